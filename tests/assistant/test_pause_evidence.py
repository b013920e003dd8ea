"""`PauseEvidence` alone: which partials speculate, which scores are stale, what the end
of the turn hands over (the turn manager's tables test it in context)."""

from assistant.turns.actions import (
    CancelSpeculation,
    RequestAudioScore,
    RequestPartial,
    SetEndOfTurnSilence,
    StartSpeculation,
    TurnAction,
)
from assistant.turns.end_of_turn import EndOfTurnOptions
from assistant.turns.pause_evidence import PauseEvidence

SEMANTIC = EndOfTurnOptions(mode="semantic", audio_wait_ms=200)


def test_new_words_replace_the_speculation_and_the_same_words_keep_it() -> None:
    ev, out = PauseEvidence(SEMANTIC, speculate=True), list[TurnAction]()
    ev.partial("what is", "what is", out)
    ev.partial("the weather", "what is the weather", out)
    ev.partial("the weather", "what is the weather", out)  # nothing new: no action
    assert out == [StartSpeculation(1, "what is"), CancelSpeculation(1),
                   StartSpeculation(2, "what is the weather")]
    assert ev.spec_id == 2 and ev.text == "what is the weather"


def test_a_score_of_a_replaced_speculation_is_ignored() -> None:
    ev, out = PauseEvidence(SEMANTIC, speculate=True), list[TurnAction]()
    ev.partial("a", "a", out)
    ev.partial("b", "a b", out)
    out.clear()
    ev.scored(1, 0.9, paused=True, out=out)
    assert out == []
    ev.scored(2, 0.9, paused=True, out=out)  # sure the sentence ended: the least silence
    assert out == [SetEndOfTurnSilence(SEMANTIC.min_silence_ms, 0.9, None)]


def test_an_audio_score_of_an_earlier_pause_is_ignored() -> None:
    ev, out = PauseEvidence(SEMANTIC, speculate=False), list[TurnAction]()
    ev.enter_pause(out)
    ev.enter_pause(out)
    assert out == [RequestAudioScore(1), SetEndOfTurnSilence(SEMANTIC.fallback_ms, None),
                   RequestAudioScore(2), SetEndOfTurnSilence(SEMANTIC.fallback_ms, None)]
    out.clear()
    assert not ev.audio_scored(1, 0.1, out) and out == []
    assert ev.audio_scored(2, 0.1, out)
    assert len(out) == 1 and isinstance(out[0], SetEndOfTurnSilence)
    assert out[0].p_audio == 0.1


def test_the_end_of_the_turn_hands_the_speculation_over_once() -> None:
    ev, out = PauseEvidence(EndOfTurnOptions(mode="fixed"), speculate=True), list[TurnAction]()
    ev.enter_pause(out)
    ev.partial("hello", "hello", out)
    assert out == [RequestPartial(), StartSpeculation(1, "hello")]
    assert ev.hand_over() == 1
    assert ev.hand_over() is None and ev.text == ""
    out.clear()
    ev.cancel(out)  # handed over: not ours to cancel
    assert out == []


def test_a_pause_waits_for_the_audio_models_answer_however_late() -> None:
    """The text score first (a slow CPU's audio model): the fixed silence holds until the
    voice is heard; then the two decide as ever. A reader stopping at a comma of the
    novel's sentence, transcribed as a finished one (bench/results/loop-human.md)."""
    options = EndOfTurnOptions(mode="semantic", audio_wait_ms=1000)
    ev, out = PauseEvidence(options, speculate=True), list[TurnAction]()
    ev.enter_pause(out)
    words = "He was not an old-sposed young man."
    ev.partial(words, words, out)
    out.clear()
    ev.scored(1, 0.3, paused=True, out=out)
    assert out == [SetEndOfTurnSilence(options.fallback_ms, 0.3, None)]  # not 250 yet
    out.clear()
    assert ev.audio_scored(1, 0.04, out)  # unfinished: the audio model's wait
    assert out == [SetEndOfTurnSilence(1000, 0.3, 0.04)]


def test_an_answer_that_does_not_apply_ends_the_wait_for_it() -> None:
    ev, out = PauseEvidence(SEMANTIC, speculate=True), list[TurnAction]()
    ev.enter_pause(out)
    ev.partial("what about dogs", "what about dogs", out)
    ev.scored(1, 0.9, paused=True, out=out)
    out.clear()
    ev.audio_unused(1, out)  # the pause is decided on other rules: no wait for the voice
    assert out == [SetEndOfTurnSilence(SEMANTIC.min_silence_ms, 0.9, None)]
    out.clear()
    ev.audio_unused(1, out)  # no longer waiting: nothing to change
    assert out == []
    ev.enter_pause(out)
    out.clear()
    ev.audio_unused(1, out)  # an earlier pause's
    assert out == []


def test_without_the_audio_model_a_pause_waits_for_nothing() -> None:
    ev, out = PauseEvidence(EndOfTurnOptions(mode="semantic"), speculate=True), list[TurnAction]()
    ev.enter_pause(out)
    ev.partial("what about dogs", "what about dogs", out)
    out.clear()
    ev.scored(1, 0.9, paused=True, out=out)
    assert out == [SetEndOfTurnSilence(EndOfTurnOptions().min_silence_ms, 0.9, None)]
