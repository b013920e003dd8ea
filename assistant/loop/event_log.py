"""The pipeline's event log: what happened, as typed entries.

Every entry is a frozen dataclass with ``t_ms`` (milliseconds on the pipeline's
injected clock: the input's timeline in replay) and a ``type`` name from
:data:`ENTRY_TYPES`. Written and read as JSON lines by :mod:`assistant.loop.log_codec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "Entry",
    "SpeechStartedEntry",
    "SpeechStoppedEntry",
    "TranscriptPartialEntry",
    "TranscriptFinalEntry",
    "StateEntry",
    "SpeculationStartedEntry",
    "SpeculationHitEntry",
    "SpeculationMissEntry",
    "SpeculationCancelledEntry",
    "ResponseStartedEntry",
    "AudioStartedEntry",
    "BargeInEntry",
    "PlaybackStoppedEntry",
    "TruncatedEntry",
    "ResponseDoneEntry",
    "ResponseWithdrawnEntry",
    "TextTurnEntry",
    "EngineFailedEntry",
    "EndOfTurnScoreEntry",
    "AudioEndScoreEntry",
    "PauseEntry",
    "PromptWarmedEntry",
    "SpeculationDraftedEntry",
    "PresynthesizedEntry",
    "InterruptionPausedEntry",
    "InterruptionResumedEntry",
    "InterruptionCommittedEntry",
    "ENTRY_TYPES",
    "ToolCallEntry",
    "ToolStartedEntry",
    "ToolFinishedEntry",
]


@dataclass(frozen=True)
class Entry:
    """Base of every log entry."""

    type: ClassVar[str] = ""
    t_ms: int
    """When it happened, on the pipeline clock."""


@dataclass(frozen=True)
class SpeechStartedEntry(Entry):
    type: ClassVar[str] = "speech_started"


@dataclass(frozen=True)
class SpeechStoppedEntry(Entry):
    """The user's turn ended (``t_ms`` is when the end of turn was detected)."""

    type: ClassVar[str] = "speech_stopped"
    speech_end_ms: int
    """When the speech itself ended."""
    discarded: bool = False
    """True for speech that did not take the turn (a cough or echo during a reply)."""


@dataclass(frozen=True)
class TranscriptPartialEntry(Entry):
    type: ClassVar[str] = "transcript_partial"
    text: str


@dataclass(frozen=True)
class TranscriptFinalEntry(Entry):
    type: ClassVar[str] = "transcript_final"
    text: str


@dataclass(frozen=True)
class StateEntry(Entry):
    type: ClassVar[str] = "state"
    state: str
    """listening | user_speaking | thinking | speaking."""


@dataclass(frozen=True)
class SpeculationStartedEntry(Entry):
    type: ClassVar[str] = "speculation_started"
    spec_id: int
    text: str
    """The partial user text speculated on."""


@dataclass(frozen=True)
class PromptWarmedEntry(Entry):
    """The user's words so far (a partial transcript) were computed into the cache while
    they spoke: the speculation at their pause computes only what came after."""

    type: ClassVar[str] = "prompt_warmed"
    text: str
    tokens: int
    """Ids of the open user message so far (those not cached yet were computed)."""


@dataclass(frozen=True)
class SpeculationHitEntry(Entry):
    type: ClassVar[str] = "speculation_hit"
    spec_id: int
    turn_id: int
    generated_tokens: int
    """Reply tokens already generated on the fork when it was adopted."""
    prompt_tokens: int
    """User-turn prompt tokens the fork had computed (none to compute again)."""


@dataclass(frozen=True)
class SpeculationMissEntry(Entry):
    type: ClassVar[str] = "speculation_miss"
    spec_id: int
    turn_id: int | None
    """The turn it was checked against; None when a newer speculation replaced it."""
    spec_text: str
    final_text: str
    """The final user text, or the newer partial text that replaced the speculation."""
    common_prefix_tokens: int
    """User-turn prompt tokens shared with the final text (reused); 0 when replaced."""
    reason: str = "final_differs"
    """final_differs (checked at the end of the turn) | superseded (the transcript grew)."""


@dataclass(frozen=True)
class SpeculationCancelledEntry(Entry):
    type: ClassVar[str] = "speculation_cancelled"
    spec_id: int


@dataclass(frozen=True)
class ResponseStartedEntry(Entry):
    """The user turn is committed and the reply's prompt is in the cache."""

    type: ClassVar[str] = "response_started"
    turn_id: int
    user_text: str
    prompt_tokens: int
    """Tokens the user turn added to the conversation (message + reply header)."""
    prompt_tokens_computed: int
    """Of those, run through the model for this turn (speculative work excluded)."""
    prompt_tokens_reused: int
    """Tokens of the whole prompt whose K/V was already cached (history, speculation)."""
    speculation: str
    """hit | miss | none."""


@dataclass(frozen=True)
class AudioStartedEntry(Entry):
    type: ClassVar[str] = "audio_started"
    turn_id: int
    speech_end_ms: int
    """End of the user speech this reply answers (voice-to-voice = t_ms - this)."""
    endpoint_ms: int
    """When the end of that turn was detected (endpoint-to-audio = t_ms - this)."""


@dataclass(frozen=True)
class BargeInEntry(Entry):
    type: ClassVar[str] = "barge_in"
    turn_id: int
    played_ms: int
    """Reply audio played when the barge-in was detected."""
    reason: str = "speech"
    """``speech`` (the user talked over the reply) or what the caller of
    ``Pipeline.interrupt`` gave (e.g. ``client_cancelled``)."""


@dataclass(frozen=True)
class PlaybackStoppedEntry(Entry):
    type: ClassVar[str] = "playback_stopped"
    turn_id: int
    played_ms: int
    """Reply audio played in total."""
    leaked_ms: int
    """Audio played after the barge-in was detected."""


@dataclass(frozen=True)
class TruncatedEntry(Entry):
    type: ClassVar[str] = "truncated"
    turn_id: int
    generated_text: str
    """Everything generated before the cut (the kept text is a word-prefix of it)."""
    kept_text: str
    kept_tokens: int
    """Generated tokens kept in the history and the engine's sequence."""
    generated_tokens: int
    """Generated tokens before the cut."""
    spoken_ms: int
    sequence_tokens: int
    """Engine sequence length after truncating and closing the turn."""


@dataclass(frozen=True)
class ResponseDoneEntry(Entry):
    type: ClassVar[str] = "response_done"
    turn_id: int
    text: str
    """The text kept in the history (all of it, or what was heard)."""
    generated_tokens: int
    interrupted: bool
    spoken_ms: int


@dataclass(frozen=True)
class ResponseWithdrawnEntry(Entry):
    """A reply was removed before any of it played, or as it began (the user went on
    talking; a ``playback_stopped`` before it says what was heard): its user message is
    back in the open turn and nothing of it is in the history."""

    type: ClassVar[str] = "response_withdrawn"
    turn_id: int


@dataclass(frozen=True)
class TextTurnEntry(Entry):
    """A user turn given as text (``Conversation.submit_text``), not heard."""

    type: ClassVar[str] = "text_turn"
    turn_id: int
    text: str


@dataclass(frozen=True)
class ToolCallEntry(Entry):
    """Reply ``turn_id`` calls a tool (logged as the reply closes, before its
    ``response_done``); ``error``: the call could not be read (no name, no arguments)."""

    type: ClassVar[str] = "tool_call"
    turn_id: int
    call_id: str
    name: str
    arguments: str
    """JSON text."""
    error: str = ""


@dataclass(frozen=True)
class ToolStartedEntry(Entry):
    """A local tool began running (``tools.enabled``)."""

    type: ClassVar[str] = "tool_started"
    call_id: str
    name: str


@dataclass(frozen=True)
class ToolFinishedEntry(Entry):
    """A local tool's result (``ok`` False: it failed, timed out or was cancelled, and
    ``output`` says so to the model)."""

    type: ClassVar[str] = "tool_finished"
    call_id: str
    name: str
    ok: bool
    output: str
    cancelled: bool = False


@dataclass(frozen=True)
class EngineFailedEntry(Entry):
    """The engine thread failed a command or a generation of this conversation."""

    type: ClassVar[str] = "engine_failed"
    error: str


@dataclass(frozen=True)
class EndOfTurnScoreEntry(Entry):
    """The model's P(the user's sentence ends here) at a pause, and the silence it set
    for ending the turn (``silence_ms`` 0: the score came too late to count)."""

    type: ClassVar[str] = "end_of_turn_score"
    spec_id: int
    p_end: float | None
    silence_ms: int


@dataclass(frozen=True)
class AudioEndScoreEntry(Entry):
    """The audio model's P(the turn is complete) at a pause (``vad.smart_turn``), and the
    silence that now ends the turn (0: it came after the user went on)."""

    type: ClassVar[str] = "audio_end_score"
    p_complete: float | None
    silence_ms: int


@dataclass(frozen=True)
class PauseEntry(Entry):
    """A short pause inside the user's turn was detected (``t_ms``); the silence began at
    ``start_ms``."""

    type: ClassVar[str] = "pause"
    start_ms: int


@dataclass(frozen=True)
class SpeculationDraftedEntry(Entry):
    """Speculation ``spec_id`` has its first clause (ready to synthesise)."""

    type: ClassVar[str] = "speculation_drafted"
    spec_id: int
    text: str


@dataclass(frozen=True)
class PresynthesizedEntry(Entry):
    """Speculation ``spec_id``'s first clause is synthesised (it can play at once)."""

    type: ClassVar[str] = "presynthesized"
    spec_id: int


@dataclass(frozen=True)
class InterruptionPausedEntry(Entry):
    """Speech over reply ``turn_id`` paused it (tentative: the cut is not decided)."""

    type: ClassVar[str] = "interruption_paused"
    turn_id: int
    played_ms: int
    """Reply audio heard up to the pause."""
    leaked_ms: int
    """Audio heard after the speech counted (processing lag plus device buffer)."""


@dataclass(frozen=True)
class InterruptionResumedEntry(Entry):
    """The speech over reply ``turn_id`` was no interruption: it plays on."""

    type: ClassVar[str] = "interruption_resumed"
    turn_id: int
    gap_ms: int
    """Silence heard: from the pause to the resume."""
    resumed_from_ms: int
    """Reply audio position it plays on from (the start of the interrupted word)."""
    text: str
    """What the speech was heard as ("" for a sound with no words)."""


@dataclass(frozen=True)
class InterruptionCommittedEntry(Entry):
    """The speech over paused reply ``turn_id`` was an interruption: the cut stands
    (a ``barge_in`` entry dated at the pause follows)."""

    type: ClassVar[str] = "interruption_committed"
    turn_id: int
    after_ms: int
    """From the pause to the decision."""


ENTRY_TYPES: dict[str, type[Entry]] = {
    cls.type: cls
    for cls in (
        SpeechStartedEntry,
        SpeechStoppedEntry,
        ToolCallEntry,
        ToolStartedEntry,
        ToolFinishedEntry,
        EndOfTurnScoreEntry,
        AudioEndScoreEntry,
        PauseEntry,
        PromptWarmedEntry,
        SpeculationDraftedEntry,
        PresynthesizedEntry,
        TranscriptPartialEntry,
        TranscriptFinalEntry,
        StateEntry,
        SpeculationStartedEntry,
        SpeculationHitEntry,
        SpeculationMissEntry,
        SpeculationCancelledEntry,
        ResponseStartedEntry,
        AudioStartedEntry,
        BargeInEntry,
        PlaybackStoppedEntry,
        TruncatedEntry,
        ResponseDoneEntry,
        ResponseWithdrawnEntry,
        TextTurnEntry,
        EngineFailedEntry,
        InterruptionPausedEntry,
        InterruptionResumedEntry,
        InterruptionCommittedEntry,
    )
}
"""Every entry class by its ``type`` name."""

