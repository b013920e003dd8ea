"""What one Realtime session remembers, and the few ways it speaks to the client.

:class:`SessionState` is shared by the two directions of a session: the client's events
(:mod:`~assistant.serve.session.inbound`) and the backend's
(:mod:`~assistant.serve.session.outbound`) read and change it, and send server events
through :meth:`SessionState.emit`. It owns the ids (items, responses, events), the
conversation's item list (for ``conversation.item.retrieve`` and truncation) and the
response in progress.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from assistant.serve.backend import contract as B
from assistant.serve.metrics import ServerMetrics
from assistant.serve.protocol import client_events as C
from assistant.serve.protocol import server_events as S
from assistant.serve.protocol.codec import ProtocolError
from assistant.serve.protocol.responses import ActiveResponse, IdFactory, ItemRecord
from assistant.serve.protocol.settings import ServedModels, describe_session

__all__ = ["Send", "SessionState"]

log = logging.getLogger("assistant.serve")

Send = Callable[[Any], Awaitable[None]]
"""Enqueues one server event for the connection's writer (raises when the client
stopped reading)."""


@dataclass(eq=False)
class SessionState:
    """The protocol state of one connection (see the module docstring)."""

    session_id: str
    settings: B.SessionSettings
    """The session's settings as last accepted by ``session.update``."""
    served: ServedModels
    backend: B.SessionBackend
    send: Send
    metrics: ServerMetrics
    clock: Callable[[], float]
    """Wall time in seconds (for the latency metrics)."""
    ids: IdFactory
    items: list[ItemRecord] = field(default_factory=list)
    """The conversation's items, oldest first."""
    by_id: dict[str, ItemRecord] = field(default_factory=dict)
    pending_user_item: str | None = None
    """The id the user's speech in progress will commit as (named at speech start)."""
    awaiting_transcript: deque[str] = field(default_factory=deque)
    """Committed user audio items whose transcript has not arrived, oldest first."""
    requests: dict[int, C.ResponseParam | None] = field(default_factory=dict)
    """``response.create``'s parameters by response key, until the response starts."""
    active: ActiveResponse | None = None
    """The response in progress."""
    calls: dict[str, ItemRecord] = field(default_factory=dict)
    """The function calls of this session's responses by ``call_id``."""
    answered: set[str] = field(default_factory=set)
    """``call_id`` s the client gave an output for."""
    withdrawn_items: deque[str] = field(default_factory=lambda: deque(maxlen=16))
    """Items of replies the server withdrew, lately: a client's truncate of one (sent as
    it heard the user speak, before the deletion reached it) has nothing left to cut."""
    speech_stopped_at: float | None = None
    """When the user last stopped speaking (seconds on ``clock``), until the reply's
    first audio measures voice-to-voice latency from it."""

    @property
    def last_item_id(self) -> str | None:
        return self.items[-1].item_id if self.items else None

    def item(self, item_id: str, param: str) -> ItemRecord:
        """The item ``item_id``; refused as ``item_not_found`` on ``param`` if unknown."""
        record = self.by_id.get(item_id)
        if record is None:
            raise ProtocolError("item_not_found", f"no item with id {item_id!r}", param=param)
        return record

    def remember(self, record: ItemRecord) -> None:
        """Append ``record`` to the conversation's items."""
        self.items.append(record)
        self.by_id[record.item_id] = record

    async def delete_item(self, record: ItemRecord) -> None:
        """``record`` leaves the conversation (a withdrawn reply's item)."""
        self.items.remove(record)
        del self.by_id[record.item_id]
        self.withdrawn_items.append(record.item_id)
        await self.emit(S.ConversationItemDeleted(event_id=self.ids("event"),
                                                  item_id=record.item_id))

    async def add_item(self, record: ItemRecord) -> None:
        """A client's item (committed audio, created text, a tool's output): added and,
        being complete (a transcript follows on its own events), done at once."""
        previous = record.previous_item_id = self.last_item_id
        self.remember(record)
        item = record.to_item()
        await self.emit(
            S.ConversationItemAdded(event_id=self.ids("event"), previous_item_id=previous,
                                    item=item))
        await self.emit(
            S.ConversationItemDone(event_id=self.ids("event"), previous_item_id=previous,
                                   item=item))

    def describe(self) -> S.Session:
        return describe_session(self.settings, session_id=self.session_id, served=self.served)

    async def error(self, exc: ProtocolError) -> None:
        """Report a refused client message, or a failure of the server; the session goes
        on."""
        self.metrics.errors.labels(code=exc.code).inc()
        log.info(
            "client error session=%s code=%s param=%s",
            self.session_id, exc.code, exc.param,
            extra={"session": self.session_id, "code": exc.code, "param": exc.param},
        )
        await self.emit(
            S.Error(
                event_id=self.ids("event"),
                error=S.ErrorDetail(
                    type=exc.error_type,
                    code=exc.code,
                    message=exc.message,
                    param=exc.param,
                    event_id=exc.event_id,
                ),
            )
        )

    async def emit(self, event: Any) -> None:
        await self.send(event)
