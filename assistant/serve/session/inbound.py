"""The client's events, each made into `SessionBackend` calls and its direct replies.

One handler per client event type, found in :data:`CLIENT_HANDLERS`; a handler raises
`ProtocolError` to refuse its event (the session reports it and goes on). What the
backend does in return (speech, transcripts, responses) comes back through
:mod:`~assistant.serve.session.outbound`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import numpy as np
from pydantic import MISSING

from assistant.serve.backend import contract as B
from assistant.serve.protocol import client_events as C
from assistant.serve.protocol import server_events as S
from assistant.serve.protocol.codec import ProtocolError
from assistant.serve.protocol.responses import ItemRecord
from assistant.serve.protocol.settings import apply_update
from assistant.serve.session.state import SessionState, log

__all__ = ["CLIENT_HANDLERS", "apply_truncate"]


async def _append(s: SessionState, event: C.InputAudioBufferAppend) -> None:
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
    s.metrics.audio_in_seconds.inc(len(pcm) / B.PROTOCOL_RATE)
    await s.backend.push_audio(pcm)


async def _update_session(s: SessionState, event: C.SessionUpdate) -> None:
    settings = apply_update(s.settings, event.session, s.served)
    s.backend.configure(settings)  # may refuse: then nothing changes
    s.settings = settings
    await s.emit(S.SessionUpdated(event_id=s.ids("event"), session=s.describe()))


async def _commit(s: SessionState, event: C.InputAudioBufferCommit) -> None:
    s.backend.commit_audio()


async def _clear(s: SessionState, event: C.InputAudioBufferClear) -> None:
    s.backend.clear_audio()
    s.pending_user_item = None
    await s.emit(S.InputAudioBufferCleared(event_id=s.ids("event")))


async def _create_item(s: SessionState, event: C.ConversationItemCreate) -> None:
    item = event.item
    if item.id is not MISSING and item.id in s.by_id:
        raise ProtocolError("duplicate_item_id", f"item {item.id!r} exists", param="item.id")
    if item.type == "function_call_output":
        await _tool_output(s, item)
        return
    if item.type == "function_call":
        raise ProtocolError(
            "unsupported_item",
            "function_call items come from the model's replies; a client cannot add one "
            "(send the function_call_output of a call the model made)",
            param="item.type",
        )
    if item.role is MISSING:
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
    item_id = s.ids("item") if item.id is MISSING else item.id
    text = " ".join(t.strip() for t in texts if t.strip())
    s.backend.add_text(item.role, text)
    kind: Literal["input_text", "output_text"] = (
        "output_text" if item.role == "assistant" else "input_text"
    )
    record = ItemRecord(item_id=item_id, role=item.role, kind=kind, transcript=text)
    await s.add_item(record)


async def _tool_output(s: SessionState, item: C.ItemParam) -> None:
    """What the client's tool returned for a call; the next ``response.create``
    answers on it."""
    if item.call_id is MISSING:
        raise ProtocolError("missing_field", "a function_call_output needs the call_id of "
                            "the call it answers", param="item.call_id")
    if item.output is MISSING:
        raise ProtocolError("missing_field", "a function_call_output needs its output",
                            param="item.output")
    if item.call_id not in s.calls:
        raise ProtocolError("unknown_call_id",
                            f"no function call with call_id {item.call_id!r} in this session",
                            param="item.call_id")
    if item.call_id in s.answered:
        raise ProtocolError("duplicate_call_output",
                            f"call {item.call_id!r} already has its output",
                            param="item.call_id")
    s.backend.add_tool_output(item.call_id, item.output)
    s.answered.add(item.call_id)
    await s.add_item(ItemRecord(item_id=s.ids("item") if item.id is MISSING else item.id,
                                role="user", kind="function_call_output",
                                call_id=item.call_id, output=item.output))


async def _truncate(s: SessionState, event: C.ConversationItemTruncate) -> None:
    if event.item_id in s.withdrawn_items and event.item_id not in s.by_id:
        log.debug("truncate of withdrawn item %s: nothing left to cut", event.item_id)
        return
    record = s.item(event.item_id, "item_id")
    if record.kind == "function_call":
        raise ProtocolError(
            "invalid_item", "a function_call item has no audio to truncate", param="item_id"
        )
    if record.role != "assistant" or record.response_key is None:
        raise ProtocolError(
            "invalid_item", "only assistant audio items can be truncated", param="item_id"
        )
    if event.content_index != 0:
        raise ProtocolError(
            "invalid_value", "content_index must be 0", param="content_index"
        )
    active = s.active
    if active is not None and active.item is record:
        # Still generating: stop it first, cut it when it has finished.
        active.pending_truncate = event
        s.backend.cancel_response("client_cancelled", reported=True)
        return
    await apply_truncate(s, record, event)


async def apply_truncate(s: SessionState, record: ItemRecord,
                         event: C.ConversationItemTruncate) -> None:
    """Cut ``record``, a finished assistant item, to the audio the client heard."""
    sent_ms = record.audio_samples * 1000 // B.PROTOCOL_RATE
    if event.audio_end_ms > sent_ms + 1:
        raise ProtocolError(
            "invalid_value",
            f"audio_end_ms {event.audio_end_ms} is past the item's audio ({sent_ms} ms)",
            param="audio_end_ms",
        )
    assert record.response_key is not None
    result = await s.backend.truncate_response(record.response_key, event.audio_end_ms)
    record.transcript = result.text
    record.status = "incomplete"
    s.metrics.truncations.inc()
    await s.emit(
        S.ConversationItemTruncated(
            event_id=s.ids("event"),
            item_id=record.item_id,
            content_index=0,
            audio_end_ms=result.audio_end_ms,
        )
    )


async def _retrieve(s: SessionState, event: C.ConversationItemRetrieve) -> None:
    record = s.item(event.item_id, "item_id")
    await s.emit(S.ConversationItemRetrieved(event_id=s.ids("event"), item=record.to_item()))


async def _create_response(s: SessionState, event: C.ResponseCreate) -> None:
    if s.active is not None:
        raise ProtocolError(
            "conversation_already_has_active_response",
            f"response {s.active.response_id} is in progress; cancel it first",
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
    key = s.backend.create_response(request)
    s.requests[key] = params


async def _cancel(s: SessionState, event: C.ResponseCancel) -> None:
    active = s.active
    if active is None or (
        event.response_id is not MISSING and event.response_id != active.response_id
    ):
        raise ProtocolError(
            "response_cancel_not_active", "there is no response in progress to cancel"
        )
    s.backend.cancel_response("client_cancelled")


ClientHandler = Callable[[SessionState, Any], Awaitable[None]]

CLIENT_HANDLERS: dict[type, ClientHandler] = {
    C.InputAudioBufferAppend: _append,
    C.SessionUpdate: _update_session,
    C.InputAudioBufferCommit: _commit,
    C.InputAudioBufferClear: _clear,
    C.ConversationItemCreate: _create_item,
    C.ConversationItemTruncate: _truncate,
    C.ConversationItemRetrieve: _retrieve,
    C.ResponseCreate: _create_response,
    C.ResponseCancel: _cancel,
}
"""Client event type -> its handler; a type missing here is refused as unsupported."""
