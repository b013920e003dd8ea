"""One client's Realtime session: protocol state between the socket and the backend.

`RealtimeSession` turns client events into `SessionBackend` calls and the backend's
events into Realtime server events: it owns the ids (items, responses, events), the
conversation's item list (for ``conversation.item.retrieve`` and truncation), the
response in progress and the order of the events a response produces::

    response.created, response.output_item.added, conversation.item.added,
    response.content_part.added, (response.output_audio.delta |
    response.output_audio_transcript.delta)*, response.output_audio.done,
    response.output_audio_transcript.done, response.content_part.done,
    response.output_item.done, conversation.item.done, response.done

(``conversation.item.added`` is ``conversation.item.created`` for beta clients, which
never get ``conversation.item.done``: the codec's business.)

It owns no socket and no task: the connection (:mod:`assistant.serve.transport.server`) feeds it
and passes an async ``send`` that enqueues events for the writer (and raises when the
client stopped reading).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import numpy as np
from pydantic import MISSING

from assistant.serve.backend import contract as B
from assistant.serve.metrics import ServerMetrics
from assistant.serve.protocol import client_events as C
from assistant.serve.protocol import server_events as S
from assistant.serve.protocol.codec import ProtocolError
from assistant.serve.protocol.responses import (
    ActiveResponse,
    IdFactory,
    ItemRecord,
    closing_events,
    opening_events,
    response_shape,
)
from assistant.serve.protocol.settings import ServedModels, apply_update, describe_session

__all__ = ["IdFactory", "RealtimeSession"]

log = logging.getLogger("assistant.serve")

Send = Callable[[Any], Awaitable[None]]


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
        self.settings = settings
        self._served = served
        self._backend = backend
        self._send = send
        self._metrics = metrics
        self._clock = clock
        self._ids = ids or IdFactory(session_id.removeprefix("sess_")[:8])
        self._items: list[ItemRecord] = []
        self._by_id: dict[str, ItemRecord] = {}
        self._pending_user_item: str | None = None
        self._awaiting_transcript: deque[str] = deque()
        self._requests: dict[int, C.ResponseParam | None] = {}
        self._active: ActiveResponse | None = None
        self._speech_stopped_at: float | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self._emit(S.SessionCreated(event_id=self._ids("event"), session=self._describe()))

    @property
    def response_in_progress(self) -> bool:
        return self._active is not None

    async def error(self, exc: ProtocolError) -> None:
        """Report a refused client message; the session goes on."""
        self._metrics.errors.labels(code=exc.code).inc()
        log.info(
            "client error session=%s code=%s param=%s",
            self.session_id, exc.code, exc.param,
            extra={"session": self.session_id, "code": exc.code, "param": exc.param},
        )
        await self._emit(
            S.Error(
                event_id=self._ids("event"),
                error=S.ErrorDetail(
                    type=exc.error_type,
                    code=exc.code,
                    message=exc.message,
                    param=exc.param,
                    event_id=exc.event_id,
                ),
            )
        )

    # ------------------------------------------------------------------ client events

    async def handle_client(self, event: Any) -> None:
        """Apply one client event; raises `ProtocolError` for a refused one."""
        self._metrics.messages.labels(type=event.type).inc()
        event_id = None if event.event_id is MISSING else event.event_id
        try:
            await self._dispatch(event)
        except B.BackendRejected as exc:
            raise ProtocolError(exc.code, exc.message, param=exc.param, event_id=event_id) from None
        except ProtocolError as exc:
            if exc.event_id is None:
                exc.event_id = event_id
            raise

    async def _dispatch(self, event: Any) -> None:
        if isinstance(event, C.InputAudioBufferAppend):
            await self._append(event)
        elif isinstance(event, C.SessionUpdate):
            settings = apply_update(self.settings, event.session, self._served)
            self._backend.configure(settings)  # may refuse: then nothing changes
            self.settings = settings
            await self._emit(
                S.SessionUpdated(event_id=self._ids("event"), session=self._describe())
            )
        elif isinstance(event, C.InputAudioBufferCommit):
            self._backend.commit_audio()
        elif isinstance(event, C.InputAudioBufferClear):
            self._backend.clear_audio()
            self._pending_user_item = None
            await self._emit(S.InputAudioBufferCleared(event_id=self._ids("event")))
        elif isinstance(event, C.ConversationItemCreate):
            await self._create_item(event)
        elif isinstance(event, C.ConversationItemTruncate):
            await self._truncate(event)
        elif isinstance(event, C.ConversationItemRetrieve):
            record = self._item(event.item_id, "item_id")
            await self._emit(
                S.ConversationItemRetrieved(event_id=self._ids("event"), item=record.to_item())
            )
        elif isinstance(event, C.ResponseCreate):
            await self._create_response(event)
        elif isinstance(event, C.ResponseCancel):
            self._cancel(event)
        else:
            raise ProtocolError(
                "unsupported_event", f"{event.type} is not supported by this server", param="type"
            )

    async def _append(self, event: C.InputAudioBufferAppend) -> None:
        try:
            raw = base64.b64decode(event.audio, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError(
                "invalid_audio", "audio is not valid base64", param="audio"
            ) from None
        if len(raw) % 2:
            raise ProtocolError(
                "invalid_audio",
                f"audio has {len(raw)} bytes; 16-bit PCM needs an even number",
                param="audio",
            )
        if not raw:
            return
        pcm = np.frombuffer(raw, dtype="<i2")
        self._metrics.audio_in_seconds.inc(len(pcm) / B.PROTOCOL_RATE)
        await self._backend.push_audio(pcm)

    async def _create_item(self, event: C.ConversationItemCreate) -> None:
        item = event.item
        if item.type != "message" or item.role is MISSING:
            raise ProtocolError(
                "unsupported_item",
                "only message items with a role are supported",
                param="item.type",
            )
        texts: list[str] = []
        for i, part in enumerate(item.content):
            if part.type not in ("input_text", "text", "output_text") or part.text is MISSING:
                raise ProtocolError(
                    "unsupported_content",
                    f"content part of type {part.type!r} is not supported; send text parts",
                    param=f"item.content.{i}.type",
                )
            texts.append(part.text)
        if item.id is not MISSING and item.id in self._by_id:
            raise ProtocolError("duplicate_item_id", f"item {item.id!r} exists", param="item.id")
        item_id = self._ids("item") if item.id is MISSING else item.id
        text = " ".join(t.strip() for t in texts if t.strip())
        self._backend.add_text(item.role, text)
        kind: Literal["input_text", "output_text"] = (
            "output_text" if item.role == "assistant" else "input_text"
        )
        record = ItemRecord(item_id=item_id, role=item.role, kind=kind, transcript=text)
        await self._add_item(record)

    async def _add_item(self, record: ItemRecord) -> None:
        """A user item: added and, being complete (its transcript follows on its own
        events), done at once."""
        previous = self._items[-1].item_id if self._items else None
        self._items.append(record)
        self._by_id[record.item_id] = record
        item = record.to_item()
        await self._emit(
            S.ConversationItemAdded(event_id=self._ids("event"), previous_item_id=previous,
                                    item=item))
        await self._emit(
            S.ConversationItemDone(event_id=self._ids("event"), previous_item_id=previous,
                                   item=item))

    def _item(self, item_id: str, param: str) -> ItemRecord:
        record = self._by_id.get(item_id)
        if record is None:
            raise ProtocolError("item_not_found", f"no item with id {item_id!r}", param=param)
        return record

    async def _truncate(self, event: C.ConversationItemTruncate) -> None:
        record = self._item(event.item_id, "item_id")
        if record.role != "assistant" or record.response_key is None:
            raise ProtocolError(
                "invalid_item", "only assistant audio items can be truncated", param="item_id"
            )
        if event.content_index != 0:
            raise ProtocolError(
                "invalid_value", "content_index must be 0", param="content_index"
            )
        active = self._active
        if active is not None and active.item is record:
            # Still generating: stop it first, cut it when it has finished.
            active.pending_truncate = event
            self._backend.cancel_response("client_cancelled", reported=True)
            return
        await self._apply_truncate(record, event)

    async def _apply_truncate(self, record: ItemRecord, event: C.ConversationItemTruncate) -> None:
        sent_ms = record.audio_samples * 1000 // B.PROTOCOL_RATE
        if event.audio_end_ms > sent_ms + 1:
            raise ProtocolError(
                "invalid_value",
                f"audio_end_ms {event.audio_end_ms} is past the item's audio ({sent_ms} ms)",
                param="audio_end_ms",
            )
        assert record.response_key is not None
        result = await self._backend.truncate_response(record.response_key, event.audio_end_ms)
        record.transcript = result.text
        record.status = "incomplete"
        self._metrics.truncations.inc()
        await self._emit(
            S.ConversationItemTruncated(
                event_id=self._ids("event"),
                item_id=record.item_id,
                content_index=0,
                audio_end_ms=result.audio_end_ms,
            )
        )

    async def _create_response(self, event: C.ResponseCreate) -> None:
        if self._active is not None:
            raise ProtocolError(
                "conversation_already_has_active_response",
                f"response {self._active.response_id} is in progress; cancel it first",
            )
        params = None if event.response is MISSING else event.response
        request = B.ResponseRequest()
        if params is not None:
            if params.conversation is not MISSING and params.conversation != "auto":
                raise ProtocolError(
                    "unsupported_value",
                    "only responses in the default conversation ('auto') are supported",
                    param="response.conversation",
                )
            modalities = params.output_modalities
            if modalities is MISSING:
                modalities = params.modalities
            max_tokens = params.max_output_tokens
            if max_tokens is MISSING:
                max_tokens = params.max_response_output_tokens
            request = B.ResponseRequest(
                instructions=None if params.instructions is MISSING else params.instructions,
                output_modalities=None
                if modalities is MISSING
                else (("audio",) if "audio" in modalities else ("text",)),
                max_output_tokens=None if max_tokens in (MISSING, "inf") else max_tokens,  # type: ignore[arg-type]
            )
        key = self._backend.create_response(request)
        self._requests[key] = params

    def _cancel(self, event: C.ResponseCancel) -> None:
        active = self._active
        if active is None or (
            event.response_id is not MISSING and event.response_id != active.response_id
        ):
            raise ProtocolError(
                "response_cancel_not_active", "there is no response in progress to cancel"
            )
        self._backend.cancel_response("client_cancelled")

    # ------------------------------------------------------------------ backend events

    async def handle_backend(self, event: B.BackendEvent) -> None:
        """Translate one backend event into server events."""
        await _BACKEND_HANDLERS[type(event)](self, event)

    async def _on_speech_started(self, event: B.SpeechStarted) -> None:
        self._pending_user_item = self._pending_user_item or self._ids("item")
        self._metrics.speech_started.inc()
        await self._emit(S.SpeechStarted(event_id=self._ids("event"),
                                         audio_start_ms=event.audio_start_ms,
                                         item_id=self._pending_user_item))

    async def _on_speech_stopped(self, event: B.SpeechStopped) -> None:
        self._pending_user_item = self._pending_user_item or self._ids("item")
        self._speech_stopped_at = self._clock()
        await self._emit(S.SpeechStopped(event_id=self._ids("event"),
                                         audio_end_ms=event.audio_end_ms,
                                         item_id=self._pending_user_item))

    async def _on_failure(self, event: B.BackendFailure) -> None:
        await self.error(ProtocolError(event.code, event.message, error_type="server_error"))

    async def _on_committed(self, event: B.InputCommitted | None = None) -> None:
        item_id = self._pending_user_item or self._ids("item")
        self._pending_user_item = None
        previous = self._items[-1].item_id if self._items else None
        await self._emit(
            S.InputAudioBufferCommitted(
                event_id=self._ids("event"), previous_item_id=previous, item_id=item_id
            )
        )
        self._awaiting_transcript.append(item_id)
        await self._add_item(ItemRecord(item_id=item_id, role="user", kind="input_audio"))

    async def _on_transcript(self, event: B.UserTranscript) -> None:
        if not self._awaiting_transcript:
            return
        item_id = self._awaiting_transcript.popleft()
        self._by_id[item_id].transcript = event.text
        await self._emit(
            S.TranscriptionDelta(event_id=self._ids("event"), item_id=item_id, delta=event.text)
        )
        await self._emit(
            S.TranscriptionCompleted(
                event_id=self._ids("event"),
                item_id=item_id,
                transcript=event.text,
                usage=S.TranscriptionUsage(seconds=event.audio_ms / 1000.0),
            )
        )

    async def _on_response_started(self, event: B.ResponseStarted) -> None:
        params = self._requests.pop(event.response_key, None)
        modalities, max_tokens, metadata = response_shape(self.settings, params)
        item = ItemRecord(
            item_id=self._ids("item"),
            role="assistant",
            kind="output_audio" if "audio" in modalities else "output_text",
            transcript="",
            status="in_progress",
            response_key=event.response_key,
        )
        self._active = ActiveResponse(
            key=event.response_key,
            response_id=self._ids("resp"),
            conversation_id=f"conv_{self.session_id.removeprefix('sess_')}",
            item=item,
            modalities=modalities,
            max_output_tokens=max_tokens,
            metadata=metadata,
            started_at=self._clock(),
            previous_item_id=self._items[-1].item_id if self._items else None,
        )
        self._items.append(item)
        self._by_id[item.item_id] = item
        for out in opening_events(self._active, self._ids):
            await self._emit(out)

    async def _on_text(self, event: B.ResponseText) -> None:
        active = self._active
        if active is None or event.response_key != active.key or not event.delta:
            return
        active.text.append(event.delta)
        active.item.transcript = "".join(active.text)
        cls = S.OutputAudioTranscriptDelta if active.item.kind == "output_audio" else S.OutputTextDelta
        await self._emit(
            cls(
                event_id=self._ids("event"),
                response_id=active.response_id,
                item_id=active.item.item_id,
                delta=event.delta,
            )
        )

    async def _on_audio(self, event: B.ResponseAudio) -> None:
        active = self._active
        if active is None or event.response_key != active.key or not event.pcm:
            return
        if active.item.kind != "output_audio":
            return
        if not active.first_audio:
            active.first_audio = True
            now = self._clock()
            if self._speech_stopped_at is not None:
                self._metrics.voice_to_voice.observe(max(0.0, now - self._speech_stopped_at))
                self._speech_stopped_at = None
            self._metrics.first_audio.observe(max(0.0, now - active.started_at))
        active.item.audio_samples += len(event.pcm) // 2
        self._metrics.audio_out_seconds.inc(len(event.pcm) / 2 / B.PROTOCOL_RATE)
        await self._emit(
            S.OutputAudioDelta(
                event_id=self._ids("event"),
                response_id=active.response_id,
                item_id=active.item.item_id,
                delta=base64.b64encode(event.pcm).decode("ascii"),
            )
        )

    async def _on_response_finished(self, event: B.ResponseFinished) -> None:
        active = self._active
        if active is None or event.response_key != active.key:
            return
        self._active = None
        item = active.item
        # A completed response keeps everything it said; a cut one exactly what was
        # heard -- which may be nothing (never fall back to the unspoken text).
        item.transcript = (event.text or "".join(active.text) if event.status == "completed"
                           else event.text)
        item.status = "completed" if event.status == "completed" else "incomplete"
        self._metrics.responses.labels(status=event.status).inc()
        for out in closing_events(active, event, self._ids):
            await self._emit(out)
        if active.pending_truncate is not None:
            try:
                await self._apply_truncate(item, active.pending_truncate)
            except ProtocolError as exc:
                await self.error(exc)
            except B.BackendRejected as exc:
                await self.error(ProtocolError(exc.code, exc.message, param=exc.param))

    # ------------------------------------------------------------------ helpers

    def _describe(self) -> S.Session:
        return describe_session(self.settings, session_id=self.session_id, served=self._served)

    async def _emit(self, event: Any) -> None:
        await self._send(event)


_BACKEND_HANDLERS: dict[type, Callable[[RealtimeSession, Any], Awaitable[None]]] = {
    B.ResponseAudio: RealtimeSession._on_audio,
    B.ResponseText: RealtimeSession._on_text,
    B.SpeechStarted: RealtimeSession._on_speech_started,
    B.SpeechStopped: RealtimeSession._on_speech_stopped,
    B.InputCommitted: RealtimeSession._on_committed,
    B.UserTranscript: RealtimeSession._on_transcript,
    B.ResponseStarted: RealtimeSession._on_response_started,
    B.ResponseFinished: RealtimeSession._on_response_finished,
    B.BackendFailure: RealtimeSession._on_failure,
}
"""Backend event type -> the server events it becomes."""
