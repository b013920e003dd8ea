"""One client's Realtime session: its lifecycle between the connection and the backend.

`RealtimeSession` is what the connection (:mod:`assistant.serve.transport.connection`)
holds: it announces the session, takes the client's events (dispatched by type through
:data:`~assistant.serve.session.inbound.CLIENT_HANDLERS`), takes the backend's
(through :data:`~assistant.serve.session.outbound.BACKEND_HANDLERS`) and reports
refusals as ``error`` events. Both directions share one
:class:`~assistant.serve.session.state.SessionState`.

It owns no socket and no task: the connection feeds it and passes an async ``send``
that enqueues events for the writer (and raises when the client stopped reading).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import MISSING

from assistant.serve.backend import contract as B
from assistant.serve.metrics import ServerMetrics
from assistant.serve.protocol import server_events as S
from assistant.serve.protocol.codec import ProtocolError
from assistant.serve.protocol.responses import IdFactory
from assistant.serve.protocol.settings import ServedModels
from assistant.serve.session.inbound import CLIENT_HANDLERS
from assistant.serve.session.outbound import BACKEND_HANDLERS
from assistant.serve.session.state import Send, SessionState

__all__ = ["IdFactory", "RealtimeSession"]


class RealtimeSession:
    """Protocol state of one connection (see the module docstring)."""

    def __init__(
        self,
        *,
        session_id: str,
        settings: B.SessionSettings,
        served: ServedModels,
        backend: B.SessionBackend,
        send: Send,
        metrics: ServerMetrics,
        clock: Callable[[], float],
        ids: IdFactory | None = None,
    ) -> None:
        self.session_id = session_id
        self._state = SessionState(
            session_id=session_id,
            settings=settings,
            served=served,
            backend=backend,
            send=send,
            metrics=metrics,
            clock=clock,
            ids=ids or IdFactory(session_id.removeprefix("sess_")[:8]),
        )

    async def start(self) -> None:
        s = self._state
        await s.emit(S.SessionCreated(event_id=s.ids("event"), session=s.describe()))

    @property
    def settings(self) -> B.SessionSettings:
        """The session's settings as last accepted by ``session.update``."""
        return self._state.settings

    @property
    def response_in_progress(self) -> bool:
        return self._state.active is not None

    async def error(self, exc: ProtocolError) -> None:
        """Report a refused client message; the session goes on."""
        await self._state.error(exc)

    async def handle_client(self, event: Any) -> None:
        """Apply one client event; raises `ProtocolError` for a refused one."""
        self._state.metrics.messages.labels(type=event.type).inc()
        event_id = None if event.event_id is MISSING else event.event_id
        handler = CLIENT_HANDLERS.get(type(event))
        try:
            if handler is None:
                raise ProtocolError("unsupported_event",
                                    f"{event.type} is not supported by this server", param="type")
            await handler(self._state, event)
        except B.BackendRejected as exc:
            raise ProtocolError(exc.code, exc.message, param=exc.param, event_id=event_id) from None
        except ProtocolError as exc:
            if exc.event_id is None:
                exc.event_id = event_id
            raise

    async def handle_backend(self, event: B.BackendEvent) -> None:
        """Translate one backend event into server events."""
        await BACKEND_HANDLERS[type(event)](self._state, event)
