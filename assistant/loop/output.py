"""The conversation's public output: what an adapter (the daemon, a UI) acts on.

The event log (:mod:`assistant.loop.event_log`) is the loop's diagnostics: every decision
with its figures, for replays, benches and tests. This is the smaller, typed stream an
adapter translates into its own protocol, one event for one of its events: the user's
speech and transcript (in progress and final), who holds the floor, each response's
start, text and end, its tool calls, a failure. Speech over a reply is
published only once it is the user's turn (:mod:`assistant.loop.speech_gate`): a
backchannel or a cough that the reply plays on over never appears here.

Subscribe with ``Conversation.open(..., on_output=...)``; events come on the event loop, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from assistant.loop import event_log as log

__all__ = [
    "ConversationEvent",
    "Failure",
    "OutputCallback",
    "ResponseDelta",
    "ResponseDone",
    "ResponseStarted",
    "ResponseWithdrawn",
    "SpeechStarted",
    "SpeechStopped",
    "StateChanged",
    "ToolCallRequested",
    "TranscriptDelta",
    "TranscriptFinal",
    "public_event",
]


@dataclass(frozen=True)
class SpeechStarted:
    """The user began speaking (confirmed by the VAD; over a reply: once it counts)."""

    t_ms: int
    """When the VAD confirmed the speech (its onset is ``vad.min_speech_ms`` earlier)."""


@dataclass(frozen=True)
class SpeechStopped:
    """The user's utterance ended (the end of turn, or a discarded utterance)."""

    t_ms: int
    """When the turn's end was decided."""
    speech_end_ms: int
    """Where the speech itself ended."""
    discarded: bool
    """The utterance said nothing that counts (no words, a backchannel): no user turn."""


@dataclass(frozen=True)
class TranscriptDelta:
    """The transcript of the utterance in progress so far (replaced by the next one;
    for display: it may change until the final)."""

    t_ms: int
    text: str


@dataclass(frozen=True)
class TranscriptFinal:
    """The final transcript of the user's utterance that just ended."""

    t_ms: int
    text: str


@dataclass(frozen=True)
class ResponseStarted:
    """Reply ``turn_id`` started (its prompt is in the model's context)."""

    t_ms: int
    turn_id: int
    prompt_tokens_computed: int
    prompt_tokens_reused: int
    """Of the context's tokens, those computed now and those reused from the KV cache."""
    speculated: bool = False
    """The reply was drafted while the user was still speaking (a speculation hit)."""


@dataclass(frozen=True)
class ResponseDelta:
    """More of reply ``turn_id``'s text, as it is generated (what will be spoken: never
    a tool call's text; ahead of the audio, so not necessarily heard)."""

    t_ms: int
    turn_id: int
    text: str


@dataclass(frozen=True)
class ResponseDone:
    """Reply ``turn_id`` is closed in the history and the cache."""

    t_ms: int
    turn_id: int
    text: str
    """What the history keeps of it: the words played (all of them unless interrupted)."""
    generated_tokens: int
    interrupted: bool


@dataclass(frozen=True)
class ToolCallRequested:
    """Reply ``turn_id`` calls a tool; published before that reply's `ResponseDone`.

    Local tools (``tools.enabled``) run in the loop, which then answers with their
    results; an adapter whose client runs the tools (the daemon) sends the call and
    gives the result back with ``Conversation.submit_tool_outputs``."""

    t_ms: int
    turn_id: int
    call_id: str
    name: str
    arguments: str
    """JSON text (valid JSON when the backend constrains calls to their schema)."""
    error: str = ""
    """The call could not be read (then ``name`` and ``arguments`` are empty)."""


@dataclass(frozen=True)
class ResponseWithdrawn:
    """Reply ``turn_id`` was taken back before any of it played (the user went on)."""

    t_ms: int
    turn_id: int


@dataclass(frozen=True)
class StateChanged:
    """Who holds the floor: ``listening``, ``user_speaking``, ``thinking``, ``speaking``."""

    t_ms: int
    state: str


@dataclass(frozen=True)
class Failure:
    """The conversation's engine failed; the conversation is over."""

    t_ms: int
    error: str


ConversationEvent = (SpeechStarted | SpeechStopped | TranscriptDelta | TranscriptFinal
                     | ResponseStarted | ResponseDelta | ToolCallRequested | ResponseDone
                     | ResponseWithdrawn
                     | StateChanged | Failure)
OutputCallback = Callable[[ConversationEvent], None]


def public_event(entry: log.Entry) -> ConversationEvent | None:
    """The public event a log entry announces, if any."""
    convert = _PUBLIC.get(type(entry))
    return None if convert is None else convert(entry)


_PUBLIC: dict[type, Callable[..., ConversationEvent]] = {
    log.SpeechStartedEntry: lambda e: SpeechStarted(e.t_ms),
    log.SpeechStoppedEntry: lambda e: SpeechStopped(e.t_ms, e.speech_end_ms, e.discarded),
    log.TranscriptPartialEntry: lambda e: TranscriptDelta(e.t_ms, e.text),
    log.TranscriptFinalEntry: lambda e: TranscriptFinal(e.t_ms, e.text),
    log.ResponseStartedEntry: lambda e: ResponseStarted(
        e.t_ms, e.turn_id, e.prompt_tokens_computed, e.prompt_tokens_reused,
        e.speculation == "hit"),
    log.StateEntry: lambda e: StateChanged(e.t_ms, e.state),
    log.ResponseDoneEntry: lambda e: ResponseDone(e.t_ms, e.turn_id, e.text,
                                                  e.generated_tokens, e.interrupted),
    log.ResponseWithdrawnEntry: lambda e: ResponseWithdrawn(e.t_ms, e.turn_id),
    log.ToolCallEntry: lambda e: ToolCallRequested(e.t_ms, e.turn_id, e.call_id, e.name,
                                                   e.arguments, e.error),
    log.EngineFailedEntry: lambda e: Failure(e.t_ms, e.error),
}
"""Log entry type -> its public event (the other entries are diagnostics only)."""
