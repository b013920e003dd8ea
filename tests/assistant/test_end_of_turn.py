"""The end-of-turn decision: a pure function of (silence so far, P(sentence ends), config),
and the turn manager's use of it (semantic end of turn)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from assistant.turns.actions import (
    CancelSpeculation,
    RequestAudioScore,
    RequestPartial,
    SetEndOfTurnSilence,
    StartSpeculation,
)
from assistant.turns.end_of_turn import (
    EAGERNESS,
    EndOfTurnOptions,
    endpoint_silence_ms,
    is_end_of_turn,
    scoring_text,
    trails_off,
)
from assistant.turns.events import (
    AudioCompleteness,
    AudioStarted,
    EndOfTurn,
    FinalTranscript,
    PartialTranscript,
    PlaybackDone,
    ShortPause,
    SpeechResumed,
    SpeechStarted,
    TurnCompleteness,
    TurnRulesChanged,
)
from assistant.turns.interruption import InterruptionOptions
from assistant.turns.options import TurnOptions
from assistant.turns.turn_manager import TurnManager

SEM = EndOfTurnOptions(mode="semantic", fallback_ms=550, min_silence_ms=250,
                       max_silence_ms=1600, p_complete=0.02, p_incomplete=0.002)
FIXED = EndOfTurnOptions(mode="fixed", fallback_ms=550)
AUDIO = EndOfTurnOptions(mode="semantic", fallback_ms=550, min_silence_ms=250,
                         max_silence_ms=1600, p_complete=0.02, p_incomplete=0.002,
                         audio_wait_ms=1000)


@pytest.mark.parametrize(("silence", "p_end", "options", "ends"), [
    # fixed: only the silence counts
    (540, 0.99, FIXED, False),
    (560, 0.0, FIXED, True),
    # semantic, sure it is complete: the short silence ends it
    (240, 0.5, SEM, False),
    (260, 0.5, SEM, True),
    (260, 0.02, SEM, True),
    # sure it is not: wait up to the long limit
    (900, 0.0001, SEM, False),
    (1500, 0.002, SEM, False),
    (1620, 0.002, SEM, True),
    # unsure: in between (0.0063 is half way in log-probability: 925 ms)
    (900, math.sqrt(0.02 * 0.002), SEM, False),
    (930, math.sqrt(0.02 * 0.002), SEM, True),
    # no score (yet, or nothing to score): the fixed fallback
    (540, None, SEM, False),
    (560, None, SEM, True),
    (560, float("nan"), SEM, True),
])
def test_end_of_turn_decision_table(silence: int, p_end: float | None,
                                    options: EndOfTurnOptions, ends: bool) -> None:
    assert is_end_of_turn(silence, p_end, options) is ends


def test_the_silence_falls_monotonically_as_the_score_rises() -> None:
    ps = [10 ** (-k / 4) for k in range(24, -1, -1)]
    waits = [endpoint_silence_ms(p, SEM) for p in ps]
    assert waits == sorted(waits, reverse=True)
    assert waits[0] == 1600 and waits[-1] == 250


def test_options_are_validated_and_eagerness_maps_to_limits() -> None:
    for bad in (dict(min_silence_ms=0), dict(min_silence_ms=900, max_silence_ms=800),
                dict(p_complete=0.001, p_incomplete=0.002), dict(mode="sometimes")):
        with pytest.raises(ValueError):
            EndOfTurnOptions(**bad)  # type: ignore[arg-type]
    assert SEM.longest_ms == 1600 and FIXED.longest_ms == 550
    low, high = EAGERNESS["low"], EAGERNESS["high"]
    assert low[0] > high[0] and low[1] > high[1]


@pytest.mark.parametrize(("text", "scored"), [
    ("What is the capital of France?", "What is the capital of France"),
    ("how much there might be...", "how much there might be"),
    ("  Well, -- ", "Well"),
    ("?", ""),
])
def test_scoring_text_drops_trailing_punctuation(text: str, scored: str) -> None:
    assert scoring_text(text) == scored


@pytest.mark.parametrize(("text", "trailing"), [
    ("What I really want to know is...", True),
    ("I need a recipe for something with\u2026", True),
    ("Well,", True),
    ("So the thing is -", True),
    ("and then \u2014 ", True),
    ('He said "wait..." ', True),
    ("What is the capital of France?", False),
    ("Name a big animal.", False),
    ("Thanks!", False),
    ("What I really want to know is", False),  # no mark: the score decides
    ("a well-known fact", False),
    ("", False),
])
def test_a_transcript_trails_off_on_an_ellipsis_a_comma_or_a_dash(text: str,
                                                                    trailing: bool) -> None:
    assert trails_off(text) is trailing


def test_a_transcript_that_trails_off_waits_the_longest_silence_whatever_its_score() -> None:
    for p_end in (0.9, 0.02, 0.0063, 0.0001):
        assert endpoint_silence_ms(p_end, SEM, "What I really want to know is...") == 1600
    assert endpoint_silence_ms(0.9, SEM, "What I really want to know is") == 250
    # Without a score the fallback holds, and the fixed rule ignores the text.
    assert endpoint_silence_ms(None, SEM, "Well,") == 550
    assert endpoint_silence_ms(0.9, FIXED, "Well,") == 550


@pytest.mark.parametrize(("p_end", "p_audio", "options", "silence"), [
    # The audio model calls it finished, or is not asked: the text score decides.
    (0.9, 0.97, AUDIO, 250),
    (0.9, None, AUDIO, 250),
    (0.9, float("nan"), AUDIO, 250),
    (0.0001, 0.97, AUDIO, 1600),
    # It calls it unfinished: at least audio_wait_ms, whatever the text says.
    (0.9, 0.2, AUDIO, 1000),
    (0.9, 0.4999, AUDIO, 1000),
    (0.0001, 0.2, AUDIO, 1600),  # the longer of the two
    (None, 0.2, AUDIO, 1000),  # before the text score: the fallback, lengthened
    # Without the audio model (audio_wait_ms 0) or in fixed mode its score changes nothing.
    (0.9, 0.2, SEM, 250),
    (0.9, 0.2, FIXED, 550),
])
def test_an_unfinished_sounding_pause_waits_at_least_the_audio_wait(
        p_end: float | None, p_audio: float | None, options: EndOfTurnOptions,
        silence: int) -> None:
    assert endpoint_silence_ms(p_end, options, "my sister and I were thinking about",
                               p_audio) == silence


def test_the_audio_wait_is_validated_and_counts_in_the_longest_silence() -> None:
    with pytest.raises(ValueError, match="audio_wait_ms"):
        EndOfTurnOptions(audio_wait_ms=-1)
    assert EndOfTurnOptions(max_silence_ms=800, audio_wait_ms=1000).longest_ms == 1000
    assert AUDIO.uses_audio and not SEM.uses_audio
    assert not EndOfTurnOptions(mode="fixed", audio_wait_ms=1000).uses_audio


# ---------------------------------------------------------------- the turn manager


def semantic_tm(speculate: bool = True) -> TurnManager:
    return TurnManager(TurnOptions(speculate=speculate, end_of_turn=SEM))


def test_a_complete_question_gets_the_short_silence() -> None:
    tm = semantic_tm()
    tm.handle(SpeechStarted(0))
    # The fixed silence holds until the score is known.
    assert tm.handle(ShortPause(1200)) == [RequestPartial(), SetEndOfTurnSilence(550, None)]
    assert tm.handle(PartialTranscript(1210, "what time is it")) == [
        StartSpeculation(1, "what time is it")]
    assert tm.handle(TurnCompleteness(1230, 1, 0.4)) == [SetEndOfTurnSilence(250, 0.4)]


def test_a_thinking_pause_waits_and_the_score_follows_the_words() -> None:
    tm = semantic_tm()
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    tm.handle(PartialTranscript(1210, "how much there might be"))
    assert tm.handle(TurnCompleteness(1230, 1, 0.001)) == [SetEndOfTurnSilence(1600, 0.001)]
    assert tm.handle(SpeechResumed(1900)) == []
    assert tm.handle(TurnCompleteness(1950, 1, 0.9)) == []  # not paused: kept, not applied
    tm.handle(ShortPause(2600))
    # Same words at the next pause: the kept score applies at once.
    assert tm.handle(PartialTranscript(2610, "how much there might be")) == [
        SetEndOfTurnSilence(250, 0.9)]
    tm.handle(SpeechResumed(2700))
    tm.handle(ShortPause(3400))
    new = tm.handle(PartialTranscript(3410, "how much there might be prudently"))
    assert isinstance(new[-1], StartSpeculation) and new[-1].spec_id == 2
    assert tm.handle(TurnCompleteness(3420, 1, 0.9)) == []  # stale: spec 1's words
    assert tm.handle(TurnCompleteness(3430, 2, 0.05)) == [SetEndOfTurnSilence(250, 0.05)]


def test_a_thinking_pause_the_asr_marks_as_trailing_off_waits_whatever_the_score() -> None:
    tm = semantic_tm()
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    tm.handle(PartialTranscript(1210, "What I really want to know is..."))
    assert tm.handle(TurnCompleteness(1230, 1, 0.029)) == [SetEndOfTurnSilence(1600, 0.029)]


def test_nothing_to_score_gets_the_fallback() -> None:
    tm = semantic_tm()
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    assert tm.handle(PartialTranscript(1210, "  ")) == [SetEndOfTurnSilence(550, None)]
    off = semantic_tm(speculate=False)
    off.handle(SpeechStarted(0))
    assert off.handle(ShortPause(1200)) == [SetEndOfTurnSilence(550, None)]


def test_a_score_after_the_end_of_turn_is_ignored() -> None:
    tm = semantic_tm()
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    tm.handle(PartialTranscript(1210, "hello there"))
    tm.handle(EndOfTurn(1800, 1000))
    assert tm.handle(TurnCompleteness(1810, 1, 0.9)) == []


def test_fixed_mode_never_sets_a_silence() -> None:
    tm = TurnManager(TurnOptions(end_of_turn=FIXED))
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    tm.handle(PartialTranscript(1210, "hello there"))
    assert tm.handle(TurnCompleteness(1230, 1, 0.9)) == []


def audio_tm() -> TurnManager:
    return TurnManager(TurnOptions(speculate=True, end_of_turn=AUDIO))


def test_each_pause_asks_the_audio_model_and_its_answer_sets_the_silence() -> None:
    tm = audio_tm()
    tm.handle(SpeechStarted(0))
    assert tm.handle(ShortPause(1200)) == [RequestPartial(), RequestAudioScore(1),
                                           SetEndOfTurnSilence(550, None)]
    tm.handle(PartialTranscript(1210, "my sister and I were thinking about"))
    # The words alone could end a sentence, but the voice is not heard yet: the pause
    # lasts the fixed silence at the least until it is (on a slow CPU the audio model
    # answers after the text one: its say must not depend on that) ...
    assert tm.handle(TurnCompleteness(1230, 1, 0.09)) == [SetEndOfTurnSilence(550, 0.09)]
    # ... and the voice says they do not end it: the pause waits.
    assert tm.handle(AudioCompleteness(1250, 1, 0.02)) == [
        SetEndOfTurnSilence(1000, 0.09, 0.02)]
    # A text score coming after the audio one keeps the audio model's say.
    tm.handle(SpeechResumed(1900))
    tm.handle(ShortPause(2600))
    tm.handle(PartialTranscript(2610, "my sister and I were thinking about visiting"))
    assert tm.handle(AudioCompleteness(2620, 2, 0.3)) == [SetEndOfTurnSilence(1000, None, 0.3)]
    assert tm.handle(TurnCompleteness(2640, 2, 0.5)) == [SetEndOfTurnSilence(1000, 0.5, 0.3)]


def test_a_finished_sentence_waits_for_the_voice_then_ends_by_the_text_rule() -> None:
    """Whichever model answers first: a finished sentence ends at the short silence once
    the voice agrees (the hold costs the audio model's answer time, no more)."""
    tm = audio_tm()
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    tm.handle(PartialTranscript(1210, "what time is it in Tokyo"))
    assert tm.handle(TurnCompleteness(1230, 1, 0.9)) == [SetEndOfTurnSilence(550, 0.9)]
    assert tm.handle(AudioCompleteness(1260, 1, 0.8)) == [SetEndOfTurnSilence(250, 0.9, 0.8)]
    # The next pause waits for its own answer again; going on drops the wait.
    tm.handle(SpeechResumed(1400))
    tm.handle(ShortPause(2000))
    tm.handle(PartialTranscript(2010, "what time is it in Tokyo and Lima"))
    assert tm.handle(TurnCompleteness(2030, 2, 0.9)) == [SetEndOfTurnSilence(550, 0.9)]


def test_a_finished_sounding_pause_keeps_the_text_rule() -> None:
    tm = audio_tm()
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    tm.handle(PartialTranscript(1210, "what time is it"))
    assert tm.handle(AudioCompleteness(1220, 1, 0.97)) == [SetEndOfTurnSilence(550, None, 0.97)]
    assert tm.handle(TurnCompleteness(1230, 1, 0.4)) == [SetEndOfTurnSilence(250, 0.4, 0.97)]


def test_a_late_audio_answer_is_ignored() -> None:
    tm = audio_tm()
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    tm.handle(SpeechResumed(1300))
    assert tm.handle(AudioCompleteness(1310, 1, 0.02)) == []  # the user went on
    tm.handle(ShortPause(2000))
    assert tm.handle(AudioCompleteness(2010, 1, 0.02)) == []  # the first pause's answer
    assert tm.handle(AudioCompleteness(2020, 2, 0.02)) == [SetEndOfTurnSilence(1000, None, 0.02)]
    tm.handle(EndOfTurn(3100, 2000))
    assert tm.handle(AudioCompleteness(3110, 2, 0.02)) == []  # the turn already ended


def test_without_the_audio_model_no_pause_asks_it() -> None:
    tm = semantic_tm()
    tm.handle(SpeechStarted(0))
    assert not any(isinstance(a, RequestAudioScore) for a in tm.handle(ShortPause(1200)))


def test_semantic_vad_eagerness_scales_the_audio_wait() -> None:
    from assistant.serve.backend import contract as B
    from assistant.serve.backend.settings_map import end_of_turn

    base = TurnOptions(speculate=True, end_of_turn=AUDIO)
    waits = {e: end_of_turn(base, B.TurnDetectionSettings(type="semantic_vad", eagerness=e))
             for e in ("low", "medium", "high")}
    assert waits["medium"].audio_wait_ms == 1000
    assert waits["high"].audio_wait_ms == 500 < waits["high"].max_silence_ms
    assert waits["low"].audio_wait_ms == 1875
    server = end_of_turn(base, B.TurnDetectionSettings(type="server_vad"))
    assert server.mode == "fixed" and not server.uses_audio


def test_new_rules_apply_to_the_pause_in_progress_and_the_pauses_after() -> None:
    """A client's session.update mid-turn: the turn manager's rule follows at once (its
    pause evidence kept the first rule before, while only the VAD's limits changed)."""
    tm = semantic_tm()
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    tm.handle(PartialTranscript(1210, "what time is it"))
    assert tm.handle(TurnCompleteness(1230, 1, 0.4)) == [SetEndOfTurnSilence(250, 0.4)]
    # To the fixed rule, in the pause: its own silence now, whatever was scored.
    fixed = TurnOptions(end_of_turn=dataclasses.replace(FIXED, fallback_ms=1500))
    assert tm.handle(TurnRulesChanged(1240, fixed)) == [SetEndOfTurnSilence(1500, 0.4)]
    assert tm.options == fixed
    tm.handle(SpeechResumed(1300))
    assert tm.handle(ShortPause(1900)) == [RequestPartial()]  # no semantic silence
    tm.handle(SpeechResumed(2000))
    # To a patient semantic rule: the kept score sets its silence at the next pause.
    patient = TurnOptions(end_of_turn=dataclasses.replace(
        SEM, min_silence_ms=EAGERNESS["low"][0], max_silence_ms=EAGERNESS["low"][1]))
    assert tm.handle(TurnRulesChanged(2010, patient)) == []  # not paused: nothing yet
    assert tm.handle(ShortPause(2600)) == [RequestPartial(), SetEndOfTurnSilence(550, None)]
    assert tm.handle(PartialTranscript(2610, "what time is it")) == [
        SetEndOfTurnSilence(EAGERNESS["low"][0], 0.4)]


def test_turning_speculation_off_drops_the_live_speculation() -> None:
    tm = semantic_tm()
    tm.handle(SpeechStarted(0))
    tm.handle(ShortPause(1200))
    tm.handle(PartialTranscript(1210, "what time is it"))
    assert tm.speculation_id == 1
    off = TurnOptions(speculate=False, end_of_turn=FIXED)
    assert tm.handle(TurnRulesChanged(1240, off)) == [CancelSpeculation(1),
                                                      SetEndOfTurnSilence(550, None)]
    assert tm.speculation_id is None
    tm.handle(SpeechResumed(1300))
    assert tm.handle(ShortPause(1900)) == []  # nothing to ask for: no speculation


def barged_in() -> TurnManager:
    """A manager whose user interrupted the reply (immediate mode) and is in the pause of
    that turn at 2400 ms."""
    tm = TurnManager(TurnOptions(end_of_turn=SEM, interruption=InterruptionOptions(
        mode="immediate")))
    tm.handle(SpeechStarted(0))
    tm.handle(EndOfTurn(1000, speech_end_ms=700))
    tm.handle(FinalTranscript(1010, "tell me a story"))
    tm.handle(AudioStarted(1100, 1))
    tm.handle(SpeechStarted(2000, voiced_ms=200))  # the barge-in
    tm.handle(ShortPause(2400))
    return tm


def test_a_turn_that_interrupted_the_reply_ends_by_the_fixed_silence_at_the_least() -> None:
    """"Wait," over the reply, then a breath: "Wait." reads complete, but the user who
    took the floor goes on ("..., tell me about cats instead")."""
    tm = barged_in()
    tm.handle(PartialTranscript(2410, "Wait."))
    assert tm.handle(TurnCompleteness(2430, 1, 0.9)) == [SetEndOfTurnSilence(550, 0.9)]
    # The next turn, not an interruption, gets the short silence again.
    tm.handle(EndOfTurn(3000, speech_end_ms=2400))
    tm.handle(FinalTranscript(3010, "Wait."))
    tm.handle(PlaybackDone(4000, 2))
    tm.handle(SpeechStarted(5000))
    tm.handle(ShortPause(6000))
    tm.handle(PartialTranscript(6010, "what time is it"))
    assert tm.handle(TurnCompleteness(6030, 2, 0.9)) == [SetEndOfTurnSilence(250, 0.9)]


def test_an_interrupting_turn_of_more_than_a_few_words_ends_by_its_scores() -> None:
    """The floor hold is for "Wait," and "Hold on.": a request of its own over the reply
    ("Actually, tell me about dogs.") is answered as soon as any other, and a "Wait." the
    user goes on from is held no longer once its words are more than a short request."""
    tm = barged_in()
    tm.handle(PartialTranscript(2410, "Actually, tell me about dogs."))
    assert tm.handle(TurnCompleteness(2430, 1, 0.9)) == [SetEndOfTurnSilence(250, 0.9)]

    tm = barged_in()
    tm.handle(PartialTranscript(2410, "Wait."))
    assert tm.handle(TurnCompleteness(2430, 1, 0.9)) == [SetEndOfTurnSilence(550, 0.9)]
    tm.handle(SpeechResumed(2500))
    tm.handle(ShortPause(3400))
    tm.handle(PartialTranscript(3410, "Wait. Tell me about cats instead."))
    assert tm.handle(TurnCompleteness(3430, 2, 0.9)) == [SetEndOfTurnSilence(250, 0.9)]


def test_a_short_request_is_held_to_a_lower_bar_a_long_sentence_is_not() -> None:
    """Issue #47: short complete requests scored 0.02-0.1 and waited ~0.5-0.9 s."""
    o = EndOfTurnOptions(mode="semantic")
    assert endpoint_silence_ms(0.03, o, "Thanks!") == o.min_silence_ms
    assert endpoint_silence_ms(0.03, dataclasses.replace(o, short_words=0), "Thanks!") > 600
    assert endpoint_silence_ms(0.018, o, "Two plus two?") < 600  # was 910
    # A longer sentence at the same score still waits, and so does a cut short one.
    assert endpoint_silence_ms(0.03, o, "Name a big animal") > 600
    assert endpoint_silence_ms(0.001, o, "What is the") == o.max_silence_ms
    assert endpoint_silence_ms(0.05, o, "Set a timer,") == o.max_silence_ms  # trails off
    # The audio model's veto still holds over a short request (without a shorter wait).
    assert endpoint_silence_ms(0.3, dataclasses.replace(o, audio_wait_ms=1000), "Yes, please.",
                               p_audio=0.09) == 1000
    # No short rule for unknown text, or when the user's own bar is lower.
    assert o.p_complete_for("") == o.p_complete
    assert dataclasses.replace(o, p_complete=0.005).p_complete_for("Thanks") == 0.005
    assert dataclasses.replace(o, p_incomplete=0.04, p_complete=0.5).p_complete_for("Hi") == 0.5


def test_a_short_request_scored_complete_waits_less_for_the_audio_models_veto() -> None:
    """Issue #47: "Yes, please" (text 0.31, audio 0.09) waited the whole 1000 ms veto.
    With audio_wait_short_ms it waits that instead -- still longer than the pause inside
    "Five, [pause] five" -- and only where the text score is sure: a long sentence, a
    short one under its bar, one that trails off and an unknown score keep the veto."""
    o = EndOfTurnOptions(mode="semantic", audio_wait_ms=1000, audio_wait_short_ms=600)
    assert endpoint_silence_ms(0.3, o, "Yes, please.", p_audio=0.09) == 600
    assert endpoint_silence_ms(0.03, o, "Thanks!", p_audio=0.2) == 600  # on the bar
    assert endpoint_silence_ms(0.3, o, "Yes, please.", p_audio=0.9) == o.min_silence_ms
    assert endpoint_silence_ms(0.29, o, "5.", p_audio=0.07) == 600  # > Five, [340 ms]
    assert endpoint_silence_ms(0.3, o, "Can you tell me the way", p_audio=0.09) == 1000
    assert endpoint_silence_ms(0.02, o, "Two plus two", p_audio=0.3) == 1000  # under 0.03
    assert endpoint_silence_ms(0.3, o, "Yes, please,", p_audio=0.09) == o.max_silence_ms
    assert endpoint_silence_ms(None, o, "Yes, please.", p_audio=0.09) == 1000
    assert endpoint_silence_ms(float("nan"), o, "Yes, please.", p_audio=0.09) == 1000
    # 0 (the options' default): the one wait; a short wait above the long one is capped.
    assert endpoint_silence_ms(0.3, dataclasses.replace(o, audio_wait_short_ms=0),
                               "Yes, please.", p_audio=0.09) == 1000
    assert endpoint_silence_ms(0.3, dataclasses.replace(o, audio_wait_short_ms=1500),
                               "Yes, please.", p_audio=0.09) == 1000
    with pytest.raises(ValueError, match="audio_wait_short_ms"):
        EndOfTurnOptions(audio_wait_short_ms=-1)


def test_the_configured_short_audio_wait_reaches_the_rule_and_scales_with_eagerness() -> None:
    from assistant.app.config import default_config_path, load_config
    from assistant.loop.setup import end_of_turn_options
    from assistant.serve.backend import contract as B
    from assistant.serve.backend.settings_map import end_of_turn

    cfg = load_config(default_config_path(), env={},
                      overrides={"vad.smart_turn_wait_short_ms": 700})
    o = end_of_turn_options(cfg)
    assert (o.audio_wait_ms, o.audio_wait_short_ms) == (1000, 700)
    assert end_of_turn_options(load_config(default_config_path(), env={})
                               ).audio_wait_short_ms == 600
    high = end_of_turn(TurnOptions(speculate=True, end_of_turn=o),
                       B.TurnDetectionSettings(type="semantic_vad", eagerness="high"))
    assert (high.audio_wait_ms, high.audio_wait_short_ms) == (500, 350)
    # The audio model's cap too: 800 ms configured, 400 at high eagerness.
    assert (o.audio_sure_ms, o.audio_sure_p, high.audio_sure_ms) == (800, 0.9, 400)


def test_the_audio_model_sure_of_the_end_caps_the_wait_on_a_misheard_request() -> None:
    """Issue #47: Whisper heard "Name a big animal" as "Name a Beginimal" (text 0.005,
    audio 0.908): the text score of words nobody said held the turn 1360 ms. With
    audio_sure_ms the audio model, sure the turn is complete, caps the wait -- but not
    for a text score at or under p_incomplete, a transcript that trails off, an audio
    P under audio_sure_p, or with no audio model."""
    o = EndOfTurnOptions(mode="semantic", audio_wait_ms=1000, audio_sure_ms=800)
    misheard = endpoint_silence_ms(0.005, o, "Name a Beginimal.", p_audio=0.908)
    assert misheard == 800
    assert endpoint_silence_ms(0.005, dataclasses.replace(o, audio_sure_ms=0),
                               "Name a Beginimal.", p_audio=0.908) > 1300
    assert endpoint_silence_ms(0.005, o, "Name a Beginimal.", p_audio=0.89) > 1300
    assert endpoint_silence_ms(0.002, o, "I was wondering how", p_audio=0.95) == o.max_silence_ms
    assert endpoint_silence_ms(0.005, o, "What I want is...", p_audio=0.95) == o.max_silence_ms
    assert endpoint_silence_ms(0.5, o, "Tell me a joke.", p_audio=0.95) == o.min_silence_ms
    assert endpoint_silence_ms(None, o, "Tell me a joke.", p_audio=0.95) == o.fallback_ms
    no_audio = dataclasses.replace(o, audio_wait_ms=0)
    assert endpoint_silence_ms(0.005, no_audio, "Name a Beginimal.", p_audio=0.95) > 1300
    with pytest.raises(ValueError, match="audio_sure_ms"):
        EndOfTurnOptions(audio_sure_ms=-1)
    with pytest.raises(ValueError, match="audio_sure_p"):
        EndOfTurnOptions(audio_sure_p=0.4)
