"""What the user's open turn has said at its pauses: the speculation on its words and the
end-of-turn evidence, for :class:`~assistant.turns.turn_manager.TurnManager`.

At each short pause of the user's turn the manager asks for a partial transcript; a
partial with new words starts a speculation (replacing the last one). So does the
transcript decoded at a silence's onset, before it counts as a pause (the end of a short
request has no pause before it: its draft starts as the speech stops). With the semantic
end of turn, the speculation's P(the sentence ends here) and, with the audio model on,
the pause's P(complete) set how much silence ends the pause
(:func:`~assistant.turns.end_of_turn.endpoint_silence_ms`). While the audio model's
answer for the pause is still to come, the pause lasts the fixed silence at the least: a
text score that comes first ("he was not an ill disposed young man," reads as finished)
must not end the turn before the voice is heard (the reader's comma), whichever model
is quicker on this machine. At the end of the turn the live speculation is handed to the
response, which adopts or drops it.

Pure and synchronous like the manager: each method appends the actions it implies to the
caller's list. The manager decides *when* (which state the floor is in); this object keeps
*what* was said and scored, and which scores are stale.
"""

from __future__ import annotations

from assistant.turns.actions import (
    CancelSpeculation,
    RequestAudioScore,
    RequestPartial,
    SetEndOfTurnSilence,
    StartSpeculation,
    TurnAction,
)
from assistant.turns.end_of_turn import EndOfTurnOptions, endpoint_silence_ms

__all__ = ["PauseEvidence"]


class PauseEvidence:
    """The open user turn's speculation and its end-of-turn scores."""

    def __init__(self, end_of_turn: EndOfTurnOptions, *, speculate: bool) -> None:
        self._options = end_of_turn
        self._speculate = speculate
        self._next_id = 1
        self.spec_id: int | None = None
        """The live speculation, if any (its words are `text`)."""
        self.text = ""
        self._score: float | None = None
        """The live speculation's P(the sentence ends here), once scored."""
        self._audio_p: float | None = None
        """The audio model's P(complete) at the current pause (numbered by `_pauses`)."""
        self._audio_pending = False
        """The current pause asked the audio model, which has not answered yet."""
        self._pauses = 0
        self._in_pause = False
        self._spec_paused = False
        """The live speculation was live at a pause (replaced later: a miss)."""
        self._least_ms = 0
        """The shortest silence that ends this turn (see :meth:`hold_at_least`)."""

    def set_options(self, end_of_turn: EndOfTurnOptions, *, speculate: bool,
                    paused: bool, out: list[TurnAction]) -> None:
        """New rules from now on. `paused`: the user's turn is in a pause, whose end
        follows the new rule at once: the fixed silence if the rule is no longer semantic
        (or no longer speculates), else the new rule's silence for what is known of it. A
        speculation turned off is dropped."""
        was_semantic = self._options.semantic
        self._options = end_of_turn
        self._speculate = speculate
        if not speculate:
            self.cancel(out)
        if paused and (end_of_turn.semantic or was_semantic):
            self._set_silence(self._score, out)  # (fixed: its own silence)

    def hold_at_least(self, silence_ms: int) -> None:
        """This turn ends after ``silence_ms`` of silence at the least while its words are
        not known or are a short request (`EndOfTurnOptions.is_short`), whatever the
        scores say: a turn that began by interrupting the reply with "Wait," or "Hold on."
        seldom stops there. A longer one ("Actually, what about dogs?") is a request of
        its own, and its scores end it. Until :meth:`forget`."""
        self._least_ms = silence_ms

    def enter_pause(self, out: list[TurnAction]) -> None:
        """The user's turn went quiet: ask for its words (to speculate on) and the audio
        model's score; until a score is known the fixed silence holds."""
        self._pauses += 1
        self._audio_p = None
        self._in_pause = self._spec_paused = True
        if self._speculate:
            out.append(RequestPartial())
        self._audio_pending = self._options.uses_audio
        if self._audio_pending:
            out.append(RequestAudioScore(self._pauses))
        if self._options.semantic:
            # A score that comes late (a slow transcript) may lengthen or shorten the
            # wait, but the semantic rule is never slower than the fixed one for lack of it.
            self._set_silence(None, out)

    def speech_resumed(self) -> None:
        """The user went on: the pause's audio score no longer applies."""
        self._audio_p = None
        self._audio_pending = self._in_pause = False

    def partial(self, heard: str, text: str, out: list[TurnAction]) -> None:
        """The pause's partial transcript `heard`; `text` is the whole turn's so far."""
        if not self._speculate:
            return
        if not heard.strip():
            if self._options.semantic:
                self._set_silence(None, out)  # no words: nothing to score
            return
        if text == self.text:
            if self._options.semantic and self._score is not None:
                self._set_silence(self._score, out)  # same words, same score
            return
        self._speculate_on(text, out)

    def onset(self, heard: str, text: str, out: list[TurnAction]) -> None:
        """The words `heard` up to where the speech went quiet, decoded at the silence's
        onset, before it counts as a pause (`text`: the whole turn's so far). New words
        are speculated on now: if the silence becomes a pause, its transcript is this
        decode, so the draft and its score are there sooner (the end of the turn adopts
        the draft); if the user goes on, the next transcript replaces it. The silence
        that ends the turn is set at the pause, as ever."""
        if self._speculate and heard.strip() and text != self.text:
            self._speculate_on(text, out)

    def _speculate_on(self, text: str, out: list[TurnAction]) -> None:
        self.cancel(out, missed=self._spec_paused)
        self._spec_paused = self._in_pause
        self.spec_id = self._next_id
        self._next_id += 1
        self.text = text
        out.append(StartSpeculation(spec_id=self.spec_id, user_text=text))

    def scored(self, spec_id: int, p_end: float, *, paused: bool,
               out: list[TurnAction]) -> None:
        """The speculation `spec_id`'s P(the sentence ends here); stale ones are ignored.
        `paused`: the user's turn is still in the pause it was asked at. A speculation
        started at a silence's onset is scored before that silence counts as a pause: the
        silence it sets is told all the same (the VAD keeps no limit outside a pause; the
        pause's transcript, the same words, sets it again at the pause)."""
        if spec_id != self.spec_id:
            return  # the words changed since
        self._score = p_end
        if self._options.semantic and (paused or not self._spec_paused):
            self._set_silence(p_end, out)

    def audio_scored(self, pause: int, p_complete: float, out: list[TurnAction]) -> bool:
        """The audio model's answer for pause number `pause`; False (ignored) if the
        user has paused again since."""
        if pause != self._pauses:
            return False
        self._audio_p = p_complete
        self._audio_answered(out)
        return True

    def audio_unused(self, pause: int, out: list[TurnAction]) -> None:
        """The audio model answered for pause number `pause`, and its answer does not
        apply (the turn's pause is decided on other rules: speech over the reply): the
        pause no longer waits for it."""
        if pause == self._pauses and self._audio_pending:
            self._audio_answered(out)

    def _audio_answered(self, out: list[TurnAction]) -> None:
        self._audio_pending = False
        if self._options.semantic:
            self._set_silence(self._score, out)

    def hand_over(self) -> int | None:
        """The turn ended: the live speculation (now the response's to adopt or drop),
        and the evidence starts afresh."""
        spec_id, self.spec_id = self.spec_id, None
        self.forget()
        return spec_id

    def forget(self) -> None:
        """A new utterance: what was said and scored no longer applies (a live
        speculation, if any, stays live)."""
        self.text = ""
        self._score = None
        self._audio_p = None
        self._audio_pending = False
        self._least_ms = 0
        self._in_pause = self._spec_paused = False

    def cancel(self, out: list[TurnAction], *, missed: bool = False) -> None:
        """Drop the live speculation, if any (``missed``: replaced by new words)."""
        if self.spec_id is not None:
            out.append(CancelSpeculation(spec_id=self.spec_id, missed=missed))
        self.spec_id = None
        self.text = ""
        self._score = None

    def _set_silence(self, p_end: float | None, out: list[TurnAction]) -> None:
        silence = endpoint_silence_ms(p_end, self._options, self.text, self._audio_p)
        if not self.text or self._options.is_short(self.text):
            silence = max(silence, self._least_ms)
        if self._audio_pending and self._options.uses_audio:
            silence = max(silence, self._options.fallback_ms)  # until the voice is heard
        out.append(SetEndOfTurnSilence(silence, p_end, self._audio_p))
