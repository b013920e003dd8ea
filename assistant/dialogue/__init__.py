"""The conversation on an LLM backend: history == model context, replies, speculation.

Runs on the engine thread (see :mod:`assistant.llm.host`); written against the LLM
backend protocol (:mod:`assistant.llm.protocol`), never against engine internals.
"""

__all__: list[str] = []
