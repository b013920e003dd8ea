"""``assistant serve``: a headless daemon speaking a subset of the OpenAI Realtime API.

Packages, one layer each:

- :mod:`~assistant.serve.protocol`: the wire -- client and server events as frozen
  dataclasses, the JSON codec (GA and beta names), session settings, item/response framing.
- :mod:`~assistant.serve.transport`: the WebSocket server with ``/healthz`` and
  ``/metrics``, one connection's tasks, bearer tokens, admission and queue bounds.
- :mod:`~assistant.serve.session`: one client's protocol state (items, responses, ids).
- :mod:`~assistant.serve.metrics`: the server's Prometheus metrics (sessions update them,
  the transport serves them).
- :mod:`~assistant.serve.backend`: the `SessionBackend` contract a conversation runs
  behind, and the real one over the live loop and the shared engine thread.
- :mod:`~assistant.serve.runtime`: what a daemon process shares between sessions.

Nothing is imported here, so importing a submodule stays cheap.
"""

__all__: list[str] = []
