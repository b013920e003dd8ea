"""Who holds the floor: a pure, synchronous turn-taking state machine.

``TurnManager.handle(event)`` takes one input from :mod:`assistant.turns.events` (VAD, ASR
and playback reports) and returns the actions (:mod:`assistant.turns.actions`) the pipeline
must carry out, in order. It owns no threads, clocks or models, so every rule below is
tested by feeding event tables.

States: listening -> user_speaking -> thinking -> speaking -> listening, and an
interruption moves speaking (or thinking) back to user_speaking.

Rules
- Speech while the assistant holds the floor (thinking or speaking): see
  :mod:`assistant.turns.over_reply` (a candidate interruption, a barge-in, a paused
  reply), which sees each input first.
- At each short pause inside the user's turn the manager asks ASR for a partial and,
  when the partial says something new, starts a speculation on it (replacing the
  previous one). At end of turn the latest speculation is handed to the response, which
  adopts or drops it. The transcript decoded at a silence's onset (before it counts as
  a pause, :class:`OnsetTranscript`) starts the speculation as soon as it is there; the
  pause's own transcript, the same decode, then finds it started. (What was said and scored at the pauses, and which scores are
  stale, is kept by :class:`~assistant.turns.pause_evidence.PauseEvidence`.)
- With the semantic end of turn (:mod:`assistant.turns.end_of_turn`), the speculation's
  P(the sentence ends here) sets how much silence ends this pause
  (:class:`SetEndOfTurnSilence`); until it is known, and when there is nothing to score
  (no words, no speculation), the fixed fallback holds. With the audio model on, each
  such pause also asks it (:class:`RequestAudioScore`); an unfinished-sounding answer
  lengthens the pause's silence (:class:`AudioCompleteness`).
- A text turn (:class:`TextTurn`) is answered only while listening; an
  :class:`Interrupt` of the reply in flight cuts it like a barge-in (to the words heard,
  none before audio) and gives the floor back.
- Outputs carry a ``turn_id``; reports about any other turn (stale audio, a late
  playback-done from an interrupted reply) are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from assistant.turns.actions import (
    BargeIn,
    FinalizeUtterance,
    StartResponse,
    StateChanged,
    TurnAction,
)
from assistant.turns.events import (
    AudioCompleteness,
    AudioStarted,
    EndOfTurn,
    FinalTranscript,
    InterimTranscript,
    Interrupt,
    OnsetTranscript,
    PartialTranscript,
    PlaybackDone,
    ShortPause,
    SpeechResumed,
    SpeechStarted,
    State,
    TextTurn,
    TurnCompleteness,
    TurnInput,
    TurnRulesChanged,
    VoiceFrame,
)
from assistant.turns.options import TurnOptions
from assistant.turns.over_reply import OverReply
from assistant.turns.overlap import Candidate, PausedReply
from assistant.turns.pause_evidence import PauseEvidence

__all__ = ["TurnManager", "join_text"]


def join_text(head: str, tail: str) -> str:
    """Join two pieces of transcript with one space, ignoring empty pieces."""
    head, tail = head.strip(), tail.strip()
    if head and tail:
        return f"{head} {tail}"
    return head or tail


class TurnManager(OverReply):
    """The turn-taking state machine; see the module docstring for its rules."""

    def __init__(self, options: TurnOptions | None = None) -> None:
        self.options = options if options is not None else TurnOptions()
        self._state = State.LISTENING
        self._next_turn_id = 1
        # The reply in flight (thinking or speaking) and the user text it answers.
        self._active_turn: int | None = None
        self._active_user_text = ""
        # The user's open utterance.
        self._paused = False
        # Its speculation and end-of-turn scores at its pauses.
        self._evidence = PauseEvidence(self.options.end_of_turn,
                                       speculate=self.options.speculate)
        # Text already final for the user's turn (from earlier utterances of the same
        # turn: a reopened turn, or an utterance finalised just before the user went on).
        self._prefix = ""
        self._pending_finals = 0
        self._speech_end_ms = 0
        # When the reply in flight began to play; whether it answers the user's speech.
        self._audio_started_ms: int | None = None
        self._answers_speech = False
        self._candidate: Candidate | None = None
        self._paused_reply: PausedReply | None = None

    # ------------------------------------------------------------------ queries

    @property
    def state(self) -> State:
        return self._state

    @property
    def active_turn_id(self) -> int | None:
        """The reply in flight, if any; outputs of any other turn are stale."""
        return self._active_turn

    @property
    def next_turn_id(self) -> int:
        """The id the next reply will get."""
        return self._next_turn_id

    @property
    def speculation_id(self) -> int | None:
        """The live speculation of the open user turn, if any."""
        return self._evidence.spec_id

    # ------------------------------------------------------------------ input

    def handle(self, event: TurnInput) -> list[TurnAction]:
        """Apply one input; return the actions to carry out, in order."""
        out: list[TurnAction] = []
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a turn-manager input: {event!r}")
        handler(self, event, out)
        return out

    # ------------------------------------------------------------------ handlers

    def _on_speech_started(self, ev: SpeechStarted, out: list[TurnAction]) -> None:
        if self._speech_started_over_reply(ev, out):
            return
        if self._state is State.LISTENING:
            self._open_utterance()
            self._set_state(State.USER_SPEAKING, ev.t_ms, out)
        # In user_speaking the utterance is already open: nothing to do.

    def _on_speech_resumed(self, ev: SpeechResumed, out: list[TurnAction]) -> None:
        if self._speech_resumed_over_reply():
            return
        if self._state is State.USER_SPEAKING:
            self._paused = False
            self._evidence.speech_resumed()

    def _on_audio_started(self, ev: AudioStarted, out: list[TurnAction]) -> None:
        if ev.turn_id == self._active_turn and self._state is State.THINKING:
            self._audio_started_ms = ev.t_ms
            self._set_state(State.SPEAKING, ev.t_ms, out)

    def _on_text_turn(self, ev: TextTurn, out: list[TurnAction]) -> None:
        if self._state is not State.LISTENING or self._candidate is not None:
            return  # somebody holds the floor: the caller is told by the empty result
        if not ev.text.strip():
            return
        self._set_state(State.THINKING, ev.t_ms, out)
        self._speech_end_ms = ev.t_ms
        self._prefix = ev.text.strip()
        self._start_response(out, answers_speech=False)

    def _on_interrupt(self, ev: Interrupt, out: list[TurnAction]) -> None:
        if ev.turn_id != self._active_turn or not self.assistant_has_floor:
            return
        if self._interrupt_paused(ev, out):  # the caller's cut wins over the pause
            return
        out.append(BargeIn(turn_id=ev.turn_id, t_ms=ev.t_ms, reason=ev.reason))
        self._active_turn = None
        self._active_user_text = ""
        if self._candidate is not None:  # the user is talking: their turn now
            self._candidate = None
            self._open_utterance()
            self._set_state(State.USER_SPEAKING, ev.t_ms, out)
        else:
            self._set_state(State.LISTENING, ev.t_ms, out)

    def _on_short_pause(self, ev: ShortPause, out: list[TurnAction]) -> None:
        if self._short_pause_over_reply(ev, out):
            return
        if self._state is State.USER_SPEAKING and not self._paused:
            self._enter_pause(out)

    def _on_rules_changed(self, ev: TurnRulesChanged, out: list[TurnAction]) -> None:
        """New rules from now on; the user's turn in progress follows them too, a pause
        in progress ending by the new end-of-turn rule at once."""
        self.options = ev.options
        self._evidence.set_options(
            ev.options.end_of_turn, speculate=ev.options.speculate,
            paused=self._state is State.USER_SPEAKING and self._paused, out=out)

    def _enter_pause(self, out: list[TurnAction]) -> None:
        """The user's turn is in a pause: speculate on its words, time its end."""
        self._paused = True
        self._evidence.enter_pause(out)

    def _on_end_of_turn(self, ev: EndOfTurn, out: list[TurnAction]) -> None:
        if self._end_of_speech_over_reply(ev, out):
            return
        if self._state is State.USER_SPEAKING:
            self._pending_finals += 1
            self._speech_end_ms = ev.speech_end_ms
            self._paused = False
            out.append(FinalizeUtterance())
            self._set_state(State.THINKING, ev.t_ms, out)

    def _on_partial(self, ev: PartialTranscript, out: list[TurnAction]) -> None:
        if self._partial_over_reply(ev, out):
            return
        if self._state is not State.USER_SPEAKING or not self._paused:
            return
        self._evidence.partial(ev.text, join_text(self._prefix, ev.text), out)

    def _on_onset(self, ev: OnsetTranscript, out: list[TurnAction]) -> None:
        if self._state is not State.USER_SPEAKING or self.hears_over_reply:
            return  # speech over the reply decides at its pause, on its own rules
        self._evidence.onset(ev.text, join_text(self._prefix, ev.text), out)

    def _on_completeness(self, ev: TurnCompleteness, out: list[TurnAction]) -> None:
        if self._state is not State.USER_SPEAKING:
            return  # a stale score (the turn already ended)
        self._evidence.scored(ev.spec_id, ev.p_end, paused=self._paused, out=out)

    def _on_audio_completeness(self, ev: AudioCompleteness, out: list[TurnAction]) -> None:
        if not self._paused or self._state is not State.USER_SPEAKING:
            return  # the user went on, or not the user's turn
        if self.hears_over_reply:
            self._evidence.audio_unused(ev.pause, out)  # speech over the reply: its rules
            return
        self._evidence.audio_scored(ev.pause, ev.p_complete, out)

    def _on_final(self, ev: FinalTranscript, out: list[TurnAction]) -> None:
        if self._final_of_paused(ev, out):
            return  # the reply resumes
        if self._pending_finals <= 0:
            return  # no utterance was finalised: a stray report
        self._pending_finals -= 1
        self._prefix = join_text(self._prefix, ev.text)
        if self._pending_finals > 0 or self._state is not State.THINKING:
            return  # the user's turn goes on (they spoke again): keep collecting
        if self._active_turn is not None:
            return  # a reply is already in flight (cannot happen with ordered ASR)
        if not self._prefix:
            # Nothing intelligible was said: the floor returns to the user.
            self._evidence.cancel(out)
            if self._candidate is not None:  # ... who is already talking again
                self._candidate = None
                self._open_utterance()
                self._set_state(State.USER_SPEAKING, ev.t_ms, out)
            else:
                self._set_state(State.LISTENING, ev.t_ms, out)
            return
        self._start_response(out, answers_speech=True)

    def _start_response(self, out: list[TurnAction], *, answers_speech: bool) -> None:
        turn_id = self._next_turn_id
        self._next_turn_id += 1
        self._active_turn = turn_id
        self._active_user_text = self._prefix
        self._audio_started_ms = None
        self._answers_speech = answers_speech
        out.append(
            StartResponse(
                turn_id=turn_id,
                user_text=self._prefix,
                spec_id=self._evidence.hand_over(),
                speech_end_ms=self._speech_end_ms,
            )
        )
        # The response now owns the speculation (adopt or drop).
        self._prefix = ""

    def _on_playback_done(self, ev: PlaybackDone, out: list[TurnAction]) -> None:
        if ev.turn_id != self._active_turn or not self.assistant_has_floor:
            return
        if self._paused_reply is not None:
            return  # a paused reply is not over (the player reports it after a resume)
        self._active_turn = None
        self._active_user_text = ""
        if self._candidate is not None:
            # The user was already talking when the reply ended: their turn now.
            self._candidate = None
            self._open_utterance()
            self._set_state(State.USER_SPEAKING, ev.t_ms, out)
        else:
            self._set_state(State.LISTENING, ev.t_ms, out)

    # ------------------------------------------------------------------ helpers

    def _open_utterance(self, *, keep_prefix: bool = False, interrupting: bool = False) -> None:
        """A new user utterance; ``interrupting``: it took the floor from the reply, and
        ends by the fixed silence at the least while its words are a short request
        (`PauseEvidence.hold_at_least`; the semantic rule may wait longer)."""
        self._paused = False
        self._evidence.forget()
        if interrupting:
            self._evidence.hold_at_least(self.options.end_of_turn.fallback_ms)
        if not keep_prefix:
            self._prefix = ""

    def _set_state(self, new: State, t_ms: int, out: list[TurnAction]) -> None:
        if new is not self._state:
            out.append(StateChanged(t_ms=t_ms, old=self._state, new=new))
            self._state = new


_HANDLERS: dict[type, Callable[[TurnManager, Any, list[TurnAction]], None]] = {
    SpeechStarted: TurnManager._on_speech_started,
    VoiceFrame: TurnManager._on_voice_frame,
    ShortPause: TurnManager._on_short_pause,
    SpeechResumed: TurnManager._on_speech_resumed,
    EndOfTurn: TurnManager._on_end_of_turn,
    TurnRulesChanged: TurnManager._on_rules_changed,
    PartialTranscript: TurnManager._on_partial,
    OnsetTranscript: TurnManager._on_onset,
    InterimTranscript: TurnManager._on_interim,
    FinalTranscript: TurnManager._on_final,
    TurnCompleteness: TurnManager._on_completeness,
    AudioCompleteness: TurnManager._on_audio_completeness,
    AudioStarted: TurnManager._on_audio_started,
    PlaybackDone: TurnManager._on_playback_done,
    TextTurn: TurnManager._on_text_turn,
    Interrupt: TurnManager._on_interrupt,
}
"""Input type -> handler: one row per input of :mod:`assistant.turns.events`."""
