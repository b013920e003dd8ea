"""``assistant serve``: a headless daemon speaking a subset of the OpenAI Realtime API.

Modules, one idea each:

- :mod:`~assistant.serve.client_events` / :mod:`~assistant.serve.server_events`: the wire
  events as frozen dataclasses; :mod:`~assistant.serve.protocol`: the JSON codec (both
  directions, both the GA and the older beta event names).
- :mod:`~assistant.serve.backend`: the `SessionBackend` interface a conversation runs
  behind, and the events it reports.
- :mod:`~assistant.serve.session`: one client's protocol state (items, responses, ids).
- :mod:`~assistant.serve.server`: the WebSocket server, HTTP ``/healthz`` and ``/metrics``.
- :mod:`~assistant.serve.auth`, :mod:`~assistant.serve.limits`,
  :mod:`~assistant.serve.metrics`: bearer tokens, admission and queue bounds, Prometheus.

Nothing is imported here, so importing a submodule stays cheap.
"""

__all__: list[str] = []
