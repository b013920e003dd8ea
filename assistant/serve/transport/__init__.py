"""The daemon's network side: the WebSocket/HTTP server, one connection's tasks, auth,
admission limits and Prometheus metrics."""

__all__: list[str] = []
