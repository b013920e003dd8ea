"""vLLM over HTTP as the dialogue's LLM backend, for deployments past one machine.

- :mod:`~assistant.llm.vllm.client`: stdlib HTTP to one server (JSON, streamed events).
- :mod:`~assistant.llm.vllm.prefix_estimate`: the server's prefix cache as the client
  sees it (expected ``cached_tokens``).
- :mod:`~assistant.llm.vllm.router`: replicas, sticky routing by conversation, failover.
- :mod:`~assistant.llm.vllm.sequence` / :mod:`~assistant.llm.vllm.job`: a conversation
  as the client's id list; a generation with the local engine's rules on streamed ids.
- :mod:`~assistant.llm.vllm.remote_model`: what the server serves; a job's request.
- :mod:`~assistant.llm.vllm.streams`: the jobs in flight, one streamed request each,
  read on its own thread, failing over to the next replica.
- :mod:`~assistant.llm.vllm.backend`: `VLLMBackend`, the `LLMBackend` over them.
- :mod:`~assistant.llm.vllm.connect`: building one from the config, checking the
  server's tokenizer is ours.
- :mod:`~assistant.llm.vllm.server`: starting a local server (tests, benches).
- :mod:`~assistant.llm.vllm.penalty`: loaded *by the server*: our repetition penalty.

Nothing here imports vLLM except ``penalty`` (which only the server imports).
"""

__all__: list[str] = []
