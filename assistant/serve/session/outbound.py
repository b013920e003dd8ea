"""The backend's events, each translated into Realtime server events.

One handler per `BackendEvent` type, found in :data:`BACKEND_HANDLERS`. A response's
events come out in the API's order::

    response.created, response.output_item.added, conversation.item.added,
    response.content_part.added, (response.output_audio.delta |
    response.output_audio_transcript.delta)*, response.output_audio.done,
    response.output_audio_transcript.done, response.content_part.done,
    response.output_item.done, conversation.item.done, response.done

(``conversation.item.added`` is ``conversation.item.created`` for beta clients, which
never get ``conversation.item.done``: the codec's business.) The events that open and
close a response are :mod:`assistant.serve.protocol.responses`'s; the deltas between
are made here.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any

from assistant.serve.backend import contract as B
from assistant.serve.protocol import server_events as S
from assistant.serve.protocol.codec import ProtocolError
from assistant.serve.protocol.responses import (
    ActiveResponse,
    ItemRecord,
    closing_events,
    opening_events,
    response_shape,
)
from assistant.serve.session.inbound import apply_truncate
from assistant.serve.session.state import SessionState

__all__ = ["BACKEND_HANDLERS"]


async def _on_speech_started(s: SessionState, event: B.SpeechStarted) -> None:
    s.pending_user_item = s.pending_user_item or s.ids("item")
    s.metrics.speech_started.inc()
    await s.emit(S.SpeechStarted(event_id=s.ids("event"),
                                 audio_start_ms=event.audio_start_ms,
                                 item_id=s.pending_user_item))


async def _on_speech_stopped(s: SessionState, event: B.SpeechStopped) -> None:
    s.pending_user_item = s.pending_user_item or s.ids("item")
    s.speech_stopped_at = s.clock()
    await s.emit(S.SpeechStopped(event_id=s.ids("event"),
                                 audio_end_ms=event.audio_end_ms,
                                 item_id=s.pending_user_item))


async def _on_failure(s: SessionState, event: B.BackendFailure) -> None:
    await s.error(ProtocolError(event.code, event.message, error_type="server_error"))


async def _on_committed(s: SessionState, event: B.InputCommitted) -> None:
    item_id = s.pending_user_item or s.ids("item")
    s.pending_user_item = None
    await s.emit(
        S.InputAudioBufferCommitted(
            event_id=s.ids("event"), previous_item_id=s.last_item_id, item_id=item_id
        )
    )
    s.awaiting_transcript.append(item_id)
    await s.add_item(ItemRecord(item_id=item_id, role="user", kind="input_audio"))


async def _on_transcript(s: SessionState, event: B.UserTranscript) -> None:
    if not s.awaiting_transcript:
        return
    item_id = s.awaiting_transcript.popleft()
    s.by_id[item_id].transcript = event.text
    await s.emit(
        S.TranscriptionDelta(event_id=s.ids("event"), item_id=item_id, delta=event.text)
    )
    await s.emit(
        S.TranscriptionCompleted(
            event_id=s.ids("event"),
            item_id=item_id,
            transcript=event.text,
            usage=S.TranscriptionUsage(seconds=event.audio_ms / 1000.0),
        )
    )


async def _on_response_started(s: SessionState, event: B.ResponseStarted) -> None:
    params = s.requests.pop(event.response_key, None)
    modalities, max_tokens, metadata = response_shape(s.settings, params)
    item = ItemRecord(
        item_id=s.ids("item"),
        role="assistant",
        kind="output_audio" if "audio" in modalities else "output_text",
        transcript="",
        status="in_progress",
        response_key=event.response_key,
    )
    s.active = active = ActiveResponse(
        key=event.response_key,
        response_id=s.ids("resp"),
        conversation_id=f"conv_{s.session_id.removeprefix('sess_')}",
        item=item,
        modalities=modalities,
        max_output_tokens=max_tokens,
        metadata=metadata,
        started_at=s.clock(),
        previous_item_id=s.last_item_id,
    )
    s.remember(item)
    for out in opening_events(active, s.ids):
        await s.emit(out)


async def _on_text(s: SessionState, event: B.ResponseText) -> None:
    active = s.active
    if active is None or event.response_key != active.key or not event.delta:
        return
    active.text.append(event.delta)
    active.item.transcript = "".join(active.text)
    cls = S.OutputAudioTranscriptDelta if active.item.kind == "output_audio" else S.OutputTextDelta
    await s.emit(
        cls(
            event_id=s.ids("event"),
            response_id=active.response_id,
            item_id=active.item.item_id,
            delta=event.delta,
        )
    )


async def _on_audio(s: SessionState, event: B.ResponseAudio) -> None:
    active = s.active
    if active is None or event.response_key != active.key or not event.pcm:
        return
    if active.item.kind != "output_audio":
        return
    if not active.first_audio:
        active.first_audio = True
        now = s.clock()
        if s.speech_stopped_at is not None:
            s.metrics.voice_to_voice.observe(max(0.0, now - s.speech_stopped_at))
            s.speech_stopped_at = None
        s.metrics.first_audio.observe(max(0.0, now - active.started_at))
    active.item.audio_samples += len(event.pcm) // 2
    s.metrics.audio_out_seconds.inc(len(event.pcm) / 2 / B.PROTOCOL_RATE)
    await s.emit(
        S.OutputAudioDelta(
            event_id=s.ids("event"),
            response_id=active.response_id,
            item_id=active.item.item_id,
            delta=base64.b64encode(event.pcm).decode("ascii"),
        )
    )


async def _on_response_finished(s: SessionState, event: B.ResponseFinished) -> None:
    active = s.active
    if active is None or event.response_key != active.key:
        return
    s.active = None
    item = active.item
    # A completed response keeps everything it said; a cut one exactly what was
    # heard -- which may be nothing (never fall back to the unspoken text).
    item.transcript = (event.text or "".join(active.text) if event.status == "completed"
                       else event.text)
    item.status = "completed" if event.status == "completed" else "incomplete"
    s.metrics.responses.labels(status=event.status).inc()
    for out in closing_events(active, event, s.ids):
        await s.emit(out)
    if active.pending_truncate is not None:
        try:
            await apply_truncate(s, item, active.pending_truncate)
        except ProtocolError as exc:
            await s.error(exc)
        except B.BackendRejected as exc:
            await s.error(ProtocolError(exc.code, exc.message, param=exc.param))


BackendHandler = Callable[[SessionState, Any], Awaitable[None]]

BACKEND_HANDLERS: dict[type, BackendHandler] = {
    B.ResponseAudio: _on_audio,
    B.ResponseText: _on_text,
    B.SpeechStarted: _on_speech_started,
    B.SpeechStopped: _on_speech_stopped,
    B.InputCommitted: _on_committed,
    B.UserTranscript: _on_transcript,
    B.ResponseStarted: _on_response_started,
    B.ResponseFinished: _on_response_finished,
    B.BackendFailure: _on_failure,
}
"""Backend event type -> the server events it becomes."""
