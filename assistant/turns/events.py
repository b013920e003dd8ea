"""Events into the turn manager, and the conversation state it keeps.

The turn manager (:mod:`assistant.turns.turn_manager`) is a pure state machine: the pipeline
translates what VAD, ASR, the engine and the player report into the *inputs* below,
feeds them in one at a time, and carries out the actions it gets back
(:mod:`assistant.turns.actions`). Every value is a frozen dataclass; every time is an
integer in milliseconds on the pipeline's injected clock (``t_ms``), never wall-clock time
read inside logic.

Inputs (what happened):
    SpeechStarted, VoiceFrame, ShortPause, SpeechResumed, EndOfTurn   -- from VAD
    PartialTranscript, FinalTranscript, InterimTranscript,
    OnsetTranscript                                                   -- from ASR
    AudioCompleteness                                                 -- from ASR's thread
    TurnCompleteness                                                  -- from the engine
    AudioStarted, PlaybackDone                                        -- from the player
    TextTurn, Interrupt                                               -- from an API caller

Event shapes after wyoming's small event dataclasses.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from assistant.turns.options import TurnOptions

__all__ = [
    "State",
    # inputs
    "SpeechStarted",
    "VoiceFrame",
    "ShortPause",
    "SpeechResumed",
    "EndOfTurn",
    "PartialTranscript",
    "OnsetTranscript",
    "FinalTranscript",
    "InterimTranscript",
    "TurnCompleteness",
    "AudioCompleteness",
    "AudioStarted",
    "PlaybackDone",
    "TextTurn",
    "Interrupt",
    "TurnRulesChanged",
    "TurnInput",
]


class State(enum.Enum):
    """Conversation state, from the assistant's point of view."""

    LISTENING = "listening"
    """Nobody is talking; waiting for the user."""
    USER_SPEAKING = "user_speaking"
    """The user holds the turn (including short pauses inside it)."""
    THINKING = "thinking"
    """The user's turn is committed; the reply is being prepared, nothing played yet."""
    SPEAKING = "speaking"
    """The reply's audio is playing."""


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class SpeechStarted:
    """VAD confirmed the onset of user speech (after its minimum-speech check)."""

    t_ms: int
    """When the onset was confirmed."""
    voiced_ms: int = 0
    """Voiced audio the VAD already heard before confirming (counts toward barge-in)."""
    echo_free: bool = False
    """The echo gate had stood down (no echo reaches the microphone): this speech is not
    the reply's own voice, so a tentative interruption may pause the reply at once."""
    onset_ms: int | None = None
    """Where the speech began, when the echo gate muted its beginning and that sound was
    found not to be the reply's echo (None: ``t_ms - voiced_ms``)."""


@dataclass(frozen=True)
class VoiceFrame:
    """One analysed input frame (after echo handling): was it voiced?"""

    t_ms: int
    """Start of the frame."""
    voiced: bool
    duration_ms: int
    """Frame length."""


@dataclass(frozen=True)
class ShortPause:
    """The user went quiet for the short-pause threshold but has not ended the turn."""

    t_ms: int


@dataclass(frozen=True)
class SpeechResumed:
    """Speech came back after a :class:`ShortPause`, inside the same utterance."""

    t_ms: int


@dataclass(frozen=True)
class EndOfTurn:
    """Silence lasted the end-of-turn threshold: the utterance is over."""

    t_ms: int
    """When the end of turn was detected."""
    speech_end_ms: int
    """When the speech itself ended (the last voiced frame's end), ``<= t_ms``."""


@dataclass(frozen=True)
class PartialTranscript:
    """A provisional transcript of the open utterance (its stable prefix)."""

    t_ms: int
    text: str
    word_p: float = 1.0
    """The lowest probability ASR gave a word of ``text`` (1.0 when not measured)."""
    echo: bool = False
    """Heard over the reply, its words are the reply's own heard back (the shell's
    :func:`~assistant.turns.interruption.echoes`): they count as no words there."""


@dataclass(frozen=True)
class OnsetTranscript:
    """What the open utterance said up to where it went quiet, decoded from the onset of
    the silence (``vad.pause_onset_ms``), before the pause counts: if the silence becomes
    a pause (or the end of the turn), its preview is this same decode."""

    t_ms: int
    text: str
    word_p: float = 1.0


@dataclass(frozen=True)
class InterimTranscript:
    """A display partial of the open utterance (re-decoded while the user talks): used
    only to tell a real interruption from a backchannel early."""

    t_ms: int
    text: str
    word_p: float = 1.0
    """The lowest probability ASR gave a word of ``text`` (1.0 when unknown)."""
    echo: bool = False
    """Heard over the reply, its words are the reply's own heard back (the shell's
    :func:`~assistant.turns.interruption.echoes`): they count as no words there."""


@dataclass(frozen=True)
class FinalTranscript:
    """The final transcript of an utterance, produced after :class:`FinalizeUtterance`."""

    t_ms: int
    text: str
    word_p: float = 1.0
    """The lowest probability ASR gave a word of ``text`` (1.0 when not measured)."""
    echo: bool = False
    """Heard over the reply, its words are the reply's own heard back (the shell's
    :func:`~assistant.turns.interruption.echoes`): they count as no words there."""


@dataclass(frozen=True)
class TurnCompleteness:
    """The language model's P(the user's sentence ends here) for speculation
    ``spec_id``'s text (see :mod:`assistant.turns.end_of_turn`)."""

    t_ms: int
    spec_id: int
    p_end: float


@dataclass(frozen=True)
class AudioCompleteness:
    """The audio end-of-turn model's P(the turn is complete) at pause ``pause`` (see
    :class:`RequestAudioScore`; NaN when it could not tell)."""

    t_ms: int
    pause: int
    p_complete: float


@dataclass(frozen=True)
class AudioStarted:
    """The first sample of a reply reached the speaker."""

    t_ms: int
    turn_id: int


@dataclass(frozen=True)
class PlaybackDone:
    """A reply is over: generation finished and every sample of it (maybe none) played."""

    t_ms: int
    turn_id: int


@dataclass(frozen=True)
class TextTurn:
    """A whole user turn given as text (a client's text item, a manual audio commit);
    it is answered only while nobody holds the floor (listening)."""

    t_ms: int
    text: str


@dataclass(frozen=True)
class Interrupt:
    """Stop reply ``turn_id`` without user speech (a client's ``response.cancel``): cut
    it to the words heard so far (none, if nothing played) and give the floor back."""

    t_ms: int
    turn_id: int
    reason: str = "cancelled"


@dataclass(frozen=True)
class TurnRulesChanged:
    """The turn-taking rules change from now on (a client's ``session.update``)."""

    t_ms: int
    options: TurnOptions


TurnInput = (
    SpeechStarted
    | VoiceFrame
    | ShortPause
    | SpeechResumed
    | EndOfTurn
    | PartialTranscript
    | OnsetTranscript
    | FinalTranscript
    | InterimTranscript
    | TurnCompleteness
    | AudioCompleteness
    | AudioStarted
    | PlaybackDone
    | TextTurn
    | Interrupt
    | TurnRulesChanged
)
