"""The LLM behind the dialogue: a backend protocol, its local implementation over our
paged engine, and the one thread that owns a backend for every conversation of a process.

- :mod:`~assistant.llm.protocol`: what the dialogue needs of an LLM (sequences with
  extend / truncate / fork / release, cancellable generation jobs with token events,
  reuse accounting, stats) as typed Protocols. Everything in it is expressible over
  HTTP (token ids in, token ids out), so a remote server can implement it.
- :mod:`~assistant.llm.local`: the paged-KV engine of :mod:`engine` as a backend.
- :mod:`~assistant.llm.host`: `EngineHost`, one thread that owns the backend; each
  conversation is a `HostSession` that sends it commands and gets its own outputs back.
"""

__all__: list[str] = []
