"""The daemon's network side: the WebSocket/HTTP server (``/metrics`` serves
:mod:`~assistant.serve.metrics`), one connection's tasks, auth and admission limits."""

__all__: list[str] = []
