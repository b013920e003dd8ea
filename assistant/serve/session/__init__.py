"""One client's Realtime session: protocol state between the socket and the backend.

Client events become `SessionBackend` calls, and the backend's events Realtime server
events; the session owns the ids, the conversation's items and the response in progress.

- :mod:`~assistant.serve.session.realtime`: :class:`RealtimeSession`, the session's
  lifecycle and the two dispatches (what the connection holds).
- :mod:`~assistant.serve.session.state`: what a session remembers, shared by both
  directions.
- :mod:`~assistant.serve.session.inbound`: one handler per client event type.
- :mod:`~assistant.serve.session.outbound`: one handler per backend event type, and
  the order of a response's events.
"""

from assistant.serve.session.realtime import IdFactory, RealtimeSession

__all__ = ["IdFactory", "RealtimeSession"]
