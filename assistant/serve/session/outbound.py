"""The backend's events, each translated into Realtime server events.

One handler per `BackendEvent` type, found in :data:`BACKEND_HANDLERS`. A response's
events come out in the API's order::

    response.created,
    [response.output_item.added, conversation.item.added, response.content_part.added,
     (response.output_audio.delta | response.output_audio_transcript.delta)*,
     response.output_audio.done, response.output_audio_transcript.done,
     response.content_part.done, response.output_item.done, conversation.item.done],
    [response.output_item.added, conversation.item.added,
     response.function_call_arguments.delta, response.function_call_arguments.done,
     response.output_item.done, conversation.item.done]*,
    response.done,
    [conversation.item.deleted]*   (a withdrawn reply: the user went on with their turn)

The message item opens with the reply's first words (a reply that says nothing and
calls nothing still gets an empty one, when it ends); a function call closes the
message first. (``conversation.item.added`` is ``conversation.item.created`` for beta
clients, which never get ``conversation.item.done``: the codec's business.) The events
that frame a response and its items are :mod:`assistant.serve.protocol.responses`'s;
the deltas between are made here.
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
    created_event,
    done_event,
    function_call_events,
    message_closing_events,
    message_opening_events,
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
    )
    await s.emit(created_event(active, s.ids))


async def _open_message(s: SessionState, active: ActiveResponse) -> None:
    """The response's message item joins the conversation (its first words came)."""
    active.message = "open"
    active.item.previous_item_id = s.last_item_id
    s.remember(active.item)
    active.outputs.append(active.item)
    for out in message_opening_events(active, s.ids):
        await s.emit(out)


async def _close_message(s: SessionState, active: ActiveResponse) -> None:
    """The message item is done, complete (a call follows it, or the reply ended
    with all of it said)."""
    active.message = "closed"
    for out in message_closing_events(active, s.ids):
        await s.emit(out)


async def _speaking(s: SessionState, response_key: int) -> ActiveResponse | None:
    """The response in progress if it is ``response_key`` and its message takes more
    words (opened now if these are the first)."""
    active = s.active
    if active is None or response_key != active.key or active.message == "closed":
        return None
    if active.message == "pending":
        await _open_message(s, active)
    return active


async def _on_text(s: SessionState, event: B.ResponseText) -> None:
    if not event.delta:
        return
    active = await _speaking(s, event.response_key)
    if active is None:
        return
    active.text.append(event.delta)
    active.item.transcript = "".join(active.text)
    cls = S.OutputAudioTranscriptDelta if active.item.kind == "output_audio" else S.OutputTextDelta
    await s.emit(
        cls(
            event_id=s.ids("event"),
            response_id=active.response_id,
            item_id=active.item.item_id,
            output_index=active.index_of(active.item),
            delta=event.delta,
        )
    )


async def _on_audio(s: SessionState, event: B.ResponseAudio) -> None:
    active = s.active
    if (active is None or event.response_key != active.key or not event.pcm
            or active.item.kind != "output_audio"):
        return
    active = await _speaking(s, event.response_key)
    if active is None:
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
            output_index=active.index_of(active.item),
            delta=base64.b64encode(event.pcm).decode("ascii"),
        )
    )


async def _on_function_call(s: SessionState, event: B.ResponseFunctionCall) -> None:
    active = s.active
    if active is None or event.response_key != active.key:
        return
    if active.message == "open":
        active.item.transcript = "".join(active.text).rstrip()  # what was said before it
        active.item.status = "completed"
        await _close_message(s, active)
    active.message = "closed"  # nothing said before the call: no message item
    call = ItemRecord(item_id=s.ids("item"), role="assistant", kind="function_call",
                      status="in_progress", response_key=event.response_key,
                      previous_item_id=s.last_item_id, call_id=event.call_id,
                      name=event.name, arguments=event.arguments)
    s.remember(call)
    s.calls[event.call_id] = call
    active.outputs.append(call)
    for out in function_call_events(active, call, s.ids):
        await s.emit(out)


async def _on_response_finished(s: SessionState, event: B.ResponseFinished) -> None:
    active = s.active
    if active is None or event.response_key != active.key:
        return
    s.active = None
    item = active.item
    if active.message == "pending" and not active.calls:
        await _open_message(s, active)  # a reply that said nothing still has its item
    if active.message == "open":
        # A completed response keeps everything it said; a cut one exactly what was
        # heard -- which may be nothing (never fall back to the unspoken text).
        item.transcript = (event.text or "".join(active.text) if event.status == "completed"
                           else event.text)
        item.status = "completed" if event.status == "completed" else "incomplete"
        await _close_message(s, active)
    s.metrics.responses.labels(status=event.status).inc()
    await s.emit(done_event(active, event, s.ids))
    if event.withdrawn:
        # The user went on with their turn as it began: it is out of the conversation
        # (and a truncate the client asked for has nothing left to cut).
        for record in active.outputs:
            if s.by_id.get(record.item_id) is record:
                await s.delete_item(record)
        return
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
    B.ResponseFunctionCall: _on_function_call,
    B.ResponseFinished: _on_response_finished,
    B.BackendFailure: _on_failure,
}
"""Backend event type -> the server events it becomes."""
