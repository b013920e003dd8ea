"""Actions out of the turn manager: what the pipeline is to do.

:meth:`assistant.turns.turn_manager.TurnManager.handle` returns them for each input
(:mod:`assistant.turns.events`); each carries the ``turn_id`` it belongs to where one
exists, so stale work can be recognised and dropped:
    RequestPartial, RequestInterim, FinalizeUtterance, DiscardUtterance -- to ASR
    RequestAudioScore                                                 -- to ASR's thread
    SetEndOfTurnSilence                                               -- to VAD
    StartSpeculation, CancelSpeculation                               -- to the engine
    StartResponse, CancelResponse, BargeIn                            -- to engine, TTS, player
    PauseReply, ResumeReply                                           -- to the player
    StateChanged                                                      -- to UI and logs

Interruption as a first-class action after pipecat's interruption frames.
"""

from __future__ import annotations

from dataclasses import dataclass

from assistant.turns.events import State

__all__ = [
    "RequestPartial",
    "RequestInterim",
    "RequestAudioScore",
    "FinalizeUtterance",
    "DiscardUtterance",
    "SetEndOfTurnSilence",
    "StartSpeculation",
    "CancelSpeculation",
    "StartResponse",
    "CancelResponse",
    "BargeIn",
    "PauseReply",
    "ResumeReply",
    "StateChanged",
    "TurnAction",
]


@dataclass(frozen=True)
class RequestPartial:
    """Ask ASR to decode the open utterance now (used at a short pause)."""


@dataclass(frozen=True)
class RequestInterim:
    """Ask ASR for an interim transcript of the open utterance's audio so far, now
    (speech over a paused reply: its words decide the cut, and the display partials'
    interval is too slow for that)."""


@dataclass(frozen=True)
class RequestAudioScore:
    """Ask the audio end-of-turn model whether the user's speech so far sounds finished
    (at a short pause in the user's turn; numbered, so a late answer is recognised)."""

    pause: int


@dataclass(frozen=True)
class SetEndOfTurnSilence:
    """End the user's turn after ``silence_ms`` of silence in the current pause (the
    VAD's limit goes back to its default when the user speaks again)."""

    silence_ms: int
    p_end: float | None
    p_audio: float | None = None
    """The audio model's P(complete) it took into account, if any."""


@dataclass(frozen=True)
class FinalizeUtterance:
    """Ask ASR to close the open utterance and report a :class:`FinalTranscript`."""


@dataclass(frozen=True)
class DiscardUtterance:
    """Drop the open utterance without a transcript (a cough or echo during a reply)."""


@dataclass(frozen=True)
class StartSpeculation:
    """Pre-generate a reply's first clause for ``user_text`` on a fork; never play it."""

    spec_id: int
    user_text: str


@dataclass(frozen=True)
class CancelSpeculation:
    """Drop speculation ``spec_id`` (idempotent; unknown ids are ignored)."""

    spec_id: int
    missed: bool = False
    """Replaced by new words after it was live at a pause (a miss); else the user went on
    before its silence counted as one, or it was simply dropped."""


@dataclass(frozen=True)
class StartResponse:
    """Commit the user's turn and reply to it.

    ``spec_id`` names the latest speculation of this utterance, if any: the pipeline
    adopts it when ``user_text`` renders to the same token ids, else drops it.
    """

    turn_id: int
    user_text: str
    spec_id: int | None
    speech_end_ms: int
    """When the user's speech ended (for voice-to-voice latency)."""


@dataclass(frozen=True)
class CancelResponse:
    """Withdraw turn ``turn_id``: before any of its audio played, or just as it began.

    The user kept talking after the end of turn was detected: the pipeline stops its
    audio, removes the reply *and* the committed user turn (history and engine), because
    the manager will commit the user's words again, joined with what they say next.
    """

    turn_id: int
    t_ms: int
    """When the user's going on was detected."""


@dataclass(frozen=True)
class BargeIn:
    """The user interrupted turn ``turn_id`` while it played: stop playback now, cancel
    generation and TTS, truncate the reply to the words heard and close it."""

    turn_id: int
    t_ms: int
    """When the barge-in was detected."""
    reason: str = "speech"
    """``speech``, or the reason of an :class:`Interrupt`."""
    paused: bool = False
    """The reply was already paused at ``t_ms`` (a tentative cut, committed now)."""


@dataclass(frozen=True)
class PauseReply:
    """Speech over turn ``turn_id`` may be an interruption: stop its audio now (as a
    barge-in would) but keep the rest of the reply, undecided
    (:mod:`assistant.turns.interruption`). A :class:`BargeIn` of the turn commits the
    cut; a :class:`ResumeReply` plays on."""

    turn_id: int
    t_ms: int
    """When the speech over the reply counted (playback stopped)."""


@dataclass(frozen=True)
class ResumeReply:
    """The speech over paused turn ``turn_id`` was no interruption (a backchannel, a
    cough): play on from the start of the interrupted word; nothing else changes."""

    turn_id: int
    t_ms: int
    text: str
    """What the speech was heard as (empty for a non-speech sound)."""


@dataclass(frozen=True)
class StateChanged:
    """The conversation state changed (for display and logs)."""

    t_ms: int
    old: State
    new: State


TurnAction = (
    RequestPartial
    | RequestInterim
    | RequestAudioScore
    | SetEndOfTurnSilence
    | FinalizeUtterance
    | DiscardUtterance
    | StartSpeculation
    | CancelSpeculation
    | StartResponse
    | CancelResponse
    | BargeIn
    | PauseReply
    | ResumeReply
    | StateChanged
)
