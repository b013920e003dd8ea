"""Speech over the reply: the turn manager's rules while the assistant holds the floor.

:class:`OverReply` is the part of :class:`~assistant.turns.turn_manager.TurnManager`
that follows speech heard while the assistant is thinking or speaking (kept apart as
its own idea, beside :mod:`assistant.turns.overlap`'s records and
:mod:`assistant.turns.interruption`'s decision). Pure and synchronous like the manager.
Each input the manager handles goes here first (``*_over_reply``, returning whether it
was speech over the reply); the manager applies its own rules to what is left.

- Speech while the assistant holds the floor (thinking or speaking) is a *candidate*
  interruption. It interrupts only once it has been voiced for ``barge_in_min_ms``
  (counting what the VAD heard before confirming the onset, and resetting at a short
  pause), so a cough or click does not -- or once an interim transcript of it holds real
  words (not backchannels), however short it is. A candidate that ends first is
  discarded, and its audio never becomes a user turn.
- A confirmed candidate while speaking is a :class:`BargeIn`; while thinking (nothing
  played yet) it cancels the reply and reopens the user's turn, whose words are joined
  with what the user says next. Either way the state becomes user_speaking.
- With tentative interruptions (:mod:`assistant.turns.interruption`) a confirmed
  candidate while speaking only pauses the reply (:class:`PauseReply`); the manager
  follows the speech (its voiced time, pauses, interim/preview/final transcripts) until
  :func:`~assistant.turns.interruption.decide` says: commit (the :class:`BargeIn`, with
  the user's turn going on as above) or resume (:class:`ResumeReply`; the speech is
  discarded, the reply holds the floor as if nothing happened).
- Words that are the reply's own heard back (``echo`` on a transcript: the shell found
  them as a run of the reply's words just played, through a speaker the microphone
  hears) count as no words, like a guess: a residual echo does not cut the reply.
- Speech that cannot be the reply's echo (``SpeechStarted.echo_free``: the echo gate
  stood down) pauses a tentative reply at its onset (``TurnOptions.pause_at_onset``).
- Speech over the reply that began within ``continue_within_ms`` of the reply's first
  audio (or before it) is the user going on with their turn, not answering what they
  heard: the end of turn came in a pause of theirs ("Yes, [400 ms] please"). Once it
  counts (or its pause's cut is committed), the reply is withdrawn as if nothing had
  played (:class:`CancelResponse`) and the user's turn reopened, as while thinking. A
  reply to a text turn (a tool's result, say) has no such turn to go on with.
- A turn that took the floor from the reply ends by the fixed silence at the least; a
  reopened one ends by its scores, as the turn it goes on with did.
"""

from __future__ import annotations

from assistant.turns.actions import (
    BargeIn,
    CancelResponse,
    DiscardUtterance,
    FinalizeUtterance,
    PauseReply,
    RequestInterim,
    RequestPartial,
    ResumeReply,
    TurnAction,
)
from assistant.turns.events import (
    EndOfTurn,
    FinalTranscript,
    InterimTranscript,
    Interrupt,
    PartialTranscript,
    ShortPause,
    SpeechStarted,
    State,
    VoiceFrame,
)
from assistant.turns.interruption import Decision, backchannel_only, decide, guessed
from assistant.turns.options import TurnOptions
from assistant.turns.overlap import Candidate, PausedReply, Span

__all__ = ["OverReply"]


class OverReply:
    """The rules for speech over the reply; the manager's state they read and change is
    declared here, the manager itself keeps it (see the module docstring)."""

    options: TurnOptions
    _state: State
    _active_turn: int | None
    _active_user_text: str
    _prefix: str
    _pending_finals: int
    _speech_end_ms: int
    _audio_started_ms: int | None
    _answers_speech: bool
    _candidate: Candidate | None
    _paused_reply: PausedReply | None

    @property
    def paused_turn_id(self) -> int | None:
        """The reply paused by speech over it, its cut undecided, if any."""
        return self._paused_reply.turn_id if self._paused_reply is not None else None

    @property
    def hears_over_reply(self) -> bool:
        """Speech is going on over the reply (counted or not yet): its transcripts decide
        whether it interrupts, so they come with word probabilities (a guess must not)."""
        return self._paused_reply is not None or self._candidate is not None

    def _open_utterance(self, *, keep_prefix: bool = False,
                        interrupting: bool = False) -> None:
        raise NotImplementedError

    def _set_state(self, new: State, t_ms: int, out: list[TurnAction]) -> None:
        raise NotImplementedError

    def _enter_pause(self, out: list[TurnAction]) -> None:
        raise NotImplementedError

    @property
    def assistant_has_floor(self) -> bool:
        """The assistant is answering (thinking or speaking): speech now is over its reply."""
        return self._state in (State.THINKING, State.SPEAKING)

    # ---- inputs: each ``*_over_reply`` returns True when the input was speech over the reply

    def _speech_started_over_reply(self, ev: SpeechStarted, out: list[TurnAction]) -> bool:
        if self._paused_reply is not None:
            # More speech after the paused-over speech ended: the user takes the floor;
            # the ended speech's final transcript is the start of their turn.
            finalized = self._paused_reply.finalized
            self._commit_pause(ev.t_ms, out, speaking=True)
            self._pending_finals += int(finalized)
            return True
        if not self.assistant_has_floor:
            return False
        if self._candidate is None:
            voiced = max(0, ev.voiced_ms)
            onset = ev.t_ms - voiced if ev.onset_ms is None else min(ev.onset_ms, ev.t_ms - voiced)
            self._candidate = Candidate(voiced_ms=voiced, onset_ms=onset,
                                        heard=Span(voiced), echo_free=ev.echo_free)
            self._check_candidate(ev.t_ms, out)
        return True

    def _speech_resumed_over_reply(self) -> bool:
        if self._paused_reply is not None:
            self._paused_reply.speech_ended = self._paused_reply.text_current = False
        elif self._candidate is not None:
            self._candidate.in_pause = False
            self._candidate.bursts += 1
        else:
            return False
        return True

    def _on_voice_frame(self, ev: VoiceFrame, out: list[TurnAction]) -> None:
        paused = self._paused_reply
        duration = max(0, ev.duration_ms)
        if paused is not None:
            paused.speech.add(duration, ev.voiced, in_pause=paused.speech_ended)
            if ev.voiced:
                paused.voiced_ms += duration
                self._decide_pause(ev.t_ms + duration, out)
            if self._paused_reply is paused:  # still undecided
                self._request_interim(paused, out)
            return
        cand = self._candidate
        if cand is None:
            return
        cand.heard.add(duration, ev.voiced, in_pause=cand.in_pause)
        if ev.voiced:
            cand.voiced_ms += duration
            self._check_candidate(ev.t_ms + duration, out)
        if self._candidate is cand:
            self._ask_burst_words(cand, out, ended=cand.burst_ended(ev.voiced))

    def _short_pause_over_reply(self, ev: ShortPause, out: list[TurnAction]) -> bool:
        if self._paused_reply is not None:
            self._paused_reply.speech_ended = True
            self._paused_reply.speech.pause()
            out.append(RequestPartial())  # what was said, to decide on
            self._decide_pause(ev.t_ms, out)
        elif self._candidate is not None:
            self._candidate.voiced_ms = 0  # an interruption is continuous speech ...
            self._candidate.in_pause = True
            self._candidate.heard.pause()
            # ... or words: the pause's transcript, decoded from the pause's onset as for
            # a turn, so ready now. A burst too short to be asked about alone ("Wait,"
            # voiced 320 ms, of which ~100 ms passed the echo gate) still has its words,
            # with no decode of its own.
            self._candidate.pause_words_asked(self.options.interruption.interim_every_ms)
            out.append(RequestPartial())
        else:
            return False
        return True

    def _end_of_speech_over_reply(self, ev: EndOfTurn, out: list[TurnAction]) -> bool:
        paused = self._paused_reply
        if paused is not None:
            paused.speech_ended, paused.speech_end_ms = True, ev.speech_end_ms
            decision = decide(paused.facts(), self.options.interruption)
            if decision is Decision.RESUME:
                out.append(DiscardUtterance())
                self._resume(ev.t_ms, out)
            elif decision is Decision.COMMIT:
                self._commit_pause(ev.t_ms, out, speaking=True)
                # The user's turn ends here, as usual.
                return self._end_of_speech_over_reply(ev, out)
            else:
                out.append(FinalizeUtterance())  # decide on the final transcript
                paused.finalized = True
        elif self._candidate is not None:
            # Speech while the assistant held the floor ended before it counted.
            self._candidate = None
            out.append(DiscardUtterance())
        else:
            return False
        return True

    def _partial_over_reply(self, ev: PartialTranscript, out: list[TurnAction]) -> bool:
        paused = self._paused_reply
        if (paused is not None and paused.speech_ended and not paused.finalized
                and (ev.echo or guessed(ev.text, ev.word_p, self.options.interruption))):
            # The pause's transcript (asked for at the pause, decoded from all of the
            # speech) only guessed, or heard the reply's own words: no more audio will
            # come to a later interim, so it counts as a sound, as a guessed final does
            # ("Uh-huh." as "Oh." at 0.2).
            paused.take_words(ev.text, ev.word_p, current=True, echo=ev.echo)
            self._decide_pause(ev.t_ms, out)
            return True
        if self.hears_over_reply:
            self._on_interim(InterimTranscript(ev.t_ms, ev.text, ev.word_p, ev.echo), out)
            return True
        return False

    def _final_of_paused(self, ev: FinalTranscript, out: list[TurnAction]) -> bool:
        """The final transcript of speech over a paused reply decides its cut; True when
        the reply resumes (nothing more to do), False when the manager goes on with the
        final (a cut: the words are the user's turn)."""
        paused = self._paused_reply
        if paused is None or not paused.finalized:
            return False
        paused.take_words(ev.text, ev.word_p, current=True, echo=ev.echo)
        if decide(paused.facts(), self.options.interruption) is Decision.RESUME:
            self._resume(ev.t_ms, out)
            return True
        # A real interruption whose speech already ended: its words are the turn.
        self._commit_pause(ev.t_ms, out)
        self._pending_finals += 1
        self._speech_end_ms = paused.speech_end_ms
        self._set_state(State.THINKING, ev.t_ms, out)
        return False

    def _interrupt_paused(self, ev: Interrupt, out: list[TurnAction]) -> bool:
        """The caller's cut of a paused reply wins over the pause; False if none is."""
        paused = self._paused_reply
        if paused is None:
            return False
        self._commit_pause(ev.t_ms, out, reason=ev.reason, speaking=not paused.finalized)
        if paused.finalized:  # the user's words, decoding, are their turn
            self._pending_finals += 1
            self._speech_end_ms = paused.speech_end_ms
            self._set_state(State.THINKING, ev.t_ms, out)
        return True

    # ---- rules

    def _on_interim(self, ev: InterimTranscript, out: list[TurnAction]) -> None:
        if ev.echo or guessed(ev.text, ev.word_p, self.options.interruption):
            return  # more audio, or the final transcript, decides
        cand = self._candidate
        if cand is not None and cand.heard.ms > 0:
            # (A candidate that heard nothing yet, after a resume, gets no words: they are
            # the decided speech's, asked for before it was decided.)
            cand.text = ev.text  # known when it counts, if it ever does
            if not backchannel_only(ev.text, self.options.interruption, in_progress=True):
                # Real words interrupt however short the speech ("Stop, please": two
                # bursts, each under barge_in_min_ms, the pause between them resetting it).
                cand.voiced_ms = max(cand.voiced_ms, self.options.barge_in_min_ms)
                self._check_candidate(ev.t_ms, out)
        paused = self._paused_reply
        if paused is not None and not paused.finalized:
            # Decoded now, from audio up to now: all of the speech once it has stopped.
            paused.take_words(ev.text, ev.word_p, current=paused.speech_ended)
            self._decide_pause(ev.t_ms, out)

    def _ask_burst_words(self, cand: Candidate, out: list[TurnAction], *,
                         ended: bool) -> None:
        """Words of speech over the reply too short to count (see
        :meth:`Candidate.words_due`): real words interrupt (`_on_interim`), a cough (no
        words) or a backchannel does not."""
        opts = self.options.interruption
        if cand.words_due(ended=ended, min_words_ms=opts.min_words_ms,
                          barge_in_min_ms=self.options.barge_in_min_ms,
                          every_ms=opts.interim_every_ms):
            out.append(RequestInterim())

    def _check_candidate(self, t_ms: int, out: list[TurnAction]) -> None:
        cand = self._candidate
        if cand is None or cand.voiced_ms < self._pause_after_ms(cand):
            return
        self._candidate = None
        if self._active_turn is None:
            # Thinking, final transcript still pending: the user simply goes on.
            self._open_utterance(keep_prefix=True)
            self._take_floor(cand, t_ms, out)
            return
        turn_id = self._active_turn
        if self._state is State.SPEAKING and self.options.interruption.mode == "tentative":
            # Counted by the words of its pause: the speech is in that pause.
            paused = PausedReply(turn_id, t_ms, cand.voiced_ms, onset_ms=cand.onset_ms,
                                 speech_ended=cand.in_pause, text=cand.text)
            self._paused_reply = paused
            out.append(PauseReply(turn_id=turn_id, t_ms=t_ms))
            self._decide_pause(t_ms, out)  # its words may be known already
            if self._paused_reply is paused:
                self._request_interim(paused, out)
            return  # the reply keeps the floor until the cut is decided
        if self._state is State.SPEAKING and not self._continues_turn(cand.onset_ms):
            out.append(BargeIn(turn_id=turn_id, t_ms=t_ms))
            self._end_reply(reopen=False)
        else:
            # Nothing played yet, or the user went on as it began: withdraw the reply.
            out.append(CancelResponse(turn_id=turn_id, t_ms=t_ms))
            self._end_reply(reopen=True)
        self._take_floor(cand, t_ms, out)

    def _take_floor(self, cand: Candidate, t_ms: int, out: list[TurnAction]) -> None:
        """The user's turn goes on with the counted speech; counted by the words of its
        pause, that pause is the turn's own (its words speculated on, its end timed: else
        the VAD's longest limit would end it)."""
        self._set_state(State.USER_SPEAKING, t_ms, out)
        if cand.in_pause:
            self._enter_pause(out)

    def _continues_turn(self, onset_ms: int) -> bool:
        """Whether speech over the reply that began at ``onset_ms`` goes on with the
        user's turn (see the module docstring); asked while speaking, so the reply's
        audio has started."""
        started, within = self._audio_started_ms, self.options.continue_within_ms
        return (within > 0 and self._answers_speech and started is not None
                and onset_ms - started <= within)

    def _end_reply(self, *, reopen: bool) -> None:
        """The reply in flight was cut or withdrawn: a new user utterance, which took the
        floor from it (and ends by the fixed silence at the least); with ``reopen``
        (withdrawn) it goes on with the turn the reply answered, whose words it joins,
        and ends as that turn would have: by its scores."""
        reopened = self._active_user_text if reopen else ""
        self._active_turn = None
        self._active_user_text = ""
        self._open_utterance(interrupting=not reopen)
        self._prefix = reopened

    def _pause_after_ms(self, cand: Candidate) -> int:
        """Voiced speech over the reply that counts: ``barge_in_min_ms``; none for speech
        that cannot be the reply's echo over a reply that can pause (tentative): a pause
        is cheap and resumes where it stopped, and what cuts is decided as ever."""
        if (cand.echo_free and self.options.pause_at_onset and self._state is State.SPEAKING
                and self.options.interruption.mode == "tentative"):
            return 0
        return self.options.barge_in_min_ms

    def _decide_pause(self, t_ms: int, out: list[TurnAction]) -> None:
        paused = self._paused_reply
        if paused is None or paused.finalized:
            return  # finalized: the final transcript decides
        decision = decide(paused.facts(), self.options.interruption)
        if decision is Decision.COMMIT:
            self._commit_pause(t_ms, out, speaking=True)
            if paused.speech_ended:
                # Decided inside the speech's pause ("Stop, please." heard at the pause):
                # the pause is the user's turn's now (its end, its speculation).
                self._enter_pause(out)
        elif decision is Decision.RESUME:
            self._resume(t_ms, out)
            # The speech's utterance is still open: discarded when it ends, and more
            # speech over the reply counts afresh.
            self._candidate = Candidate(voiced_ms=0, onset_ms=t_ms)

    def _request_interim(self, paused: PausedReply, out: list[TurnAction]) -> None:
        if paused.words_due(self.options.interruption.interim_every_ms):
            out.append(RequestInterim())

    def _resume(self, t_ms: int, out: list[TurnAction]) -> None:
        paused = self._paused_reply
        assert paused is not None
        self._paused_reply = None
        out.append(ResumeReply(turn_id=paused.turn_id, t_ms=t_ms, text=paused.text or ""))

    def _commit_pause(self, t_ms: int, out: list[TurnAction], *, speaking: bool = False,
                      reason: str = "speech") -> None:
        """The paused reply's cut stands (a :class:`BargeIn` dated at the pause, or the
        reply withdrawn when the speech went on with the user's turn); with ``speaking``
        the user's turn is open and goes on (user_speaking)."""
        paused = self._paused_reply
        assert paused is not None
        self._paused_reply = None
        withdraw = reason == "speech" and self._continues_turn(paused.onset_ms)
        out.append(CancelResponse(turn_id=paused.turn_id, t_ms=t_ms) if withdraw else
                   BargeIn(turn_id=paused.turn_id, t_ms=paused.t_ms, reason=reason,
                           paused=True))
        self._end_reply(reopen=withdraw)
        if speaking:
            self._set_state(State.USER_SPEAKING, t_ms, out)
        elif not paused.finalized:
            self._set_state(State.LISTENING, t_ms, out)
