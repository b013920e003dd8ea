"""The tentative-interruption decision, as a table."""

from __future__ import annotations

import pytest

from assistant.turns.interruption import (
    Decision,
    InterruptionFacts,
    InterruptionOptions,
    backchannel_only,
    decide,
    echoes,
    guessed,
)

OPTS = InterruptionOptions()


@pytest.mark.parametrize(("text", "only"), [
    ("", True),
    ("Mm-hmm.", True),
    ("MMM.", True),
    ("M. M. M. M.", True),
    ("Hmm", True),
    ("Emm...", True),  # Whisper, 400 ms into Piper's "Mm-hmm." (p 0.32)
    ("Umm.", True),
    ("Mm-hm.", True),
    ("Mhm-mhm.", True),
    ("Them.", False),
    ("'em", False),
    ("Hum.", False),
    ("Am.", False),  # a word, not a hum
    ("MM MM MM MM MM MM", True),  # Whisper looping on a hum: one hum
    ("mm mm mm mm mm stop", False),
    ("mm hmm", True),
    ("Yeah, right.", True),
    ("Okay.", True),
    ("Uh-huh. I see.", True),
    ("[cough]", True),
    ("(coughing)", True),
    ("Stop.", False),
    ("Wait, what?", False),
    ("Yeah but what about Paris?", False),
    ("yeah yeah yeah yeah yeah", False),  # more than max_words
    ("Right, stop.", False),
])
def test_backchannel_only(text: str, only: bool) -> None:
    assert backchannel_only(text, OPTS) is only


@pytest.mark.parametrize(("voiced", "ended", "text", "decision"), [
    # Nothing decoded yet: wait, unless the speech is already too long for a backchannel.
    (200, False, None, Decision.WAIT),
    (400, True, None, Decision.WAIT),
    (1200, False, None, Decision.COMMIT),
    # Real words commit at once, still speaking or not.
    (300, False, "Stop", Decision.COMMIT),
    (300, True, "Wait, what?", Decision.COMMIT),
    # Backchannels and noise resume once the speech stopped...
    (350, True, "Mm-hmm.", Decision.RESUME),
    (250, True, "", Decision.RESUME),
    (300, True, "[cough]", Decision.RESUME),
    # ... not while it goes on (it may become a turn), and never when long.
    (400, False, "Yeah", Decision.WAIT),
    (1300, True, "yeah", Decision.COMMIT),
])
def test_decide(voiced: int, ended: bool, text: str | None, decision: Decision) -> None:
    assert decide(InterruptionFacts(voiced, ended, text), OPTS) is decision


@pytest.mark.parametrize(("voiced", "ended", "text", "word_p", "decision"), [
    # Words ASR only guessed at (a hum heard as "in my mom") count as a sound ...
    (500, True, "in my mom.", 0.14, Decision.RESUME),
    (300, False, "Run!", 0.1, Decision.WAIT),
    (1300, False, "in my mom.", 0.14, Decision.COMMIT),  # ... and long speech is a turn
    # More words than a backchannel has are speech, however unclear (quiet, through AEC).
    (900, True, "Stop, please. That is enough.", 0.25, Decision.COMMIT),
    # Heard with confidence, the same words commit.
    (300, False, "Run!", 0.6, Decision.COMMIT),
    (500, True, "Stop.", 0.45, Decision.COMMIT),
])
def test_words_asr_only_guessed_count_as_a_sound(voiced: int, ended: bool, text: str,
                                                 word_p: float, decision: Decision) -> None:
    assert decide(InterruptionFacts(voiced, ended, text, word_p), OPTS) is decision


@pytest.mark.parametrize(("voiced", "ended", "current", "text", "word_p", "decision"), [
    # One word heard while the speech goes on, unsure: not known yet ("Hmm." as "done.").
    (300, False, False, "done.", 0.4, Decision.WAIT),
    (300, True, False, "done.", 0.4, Decision.WAIT),  # decoded before it stopped
    (1200, False, False, "done.", 0.4, Decision.COMMIT),  # too long for a backchannel
    # The transcript of all of it decides as ever; so do sure words, words that ask for
    # the floor, and more than one word.
    (300, True, True, "done.", 0.4, Decision.COMMIT),
    (300, False, False, "done.", 0.7, Decision.COMMIT),
    (300, False, False, "wait", 0.2, Decision.COMMIT),
    (300, False, False, "What do", 0.4, Decision.COMMIT),
    # A backchannel word keeps its own rule.
    (300, True, False, "Okay.", 0.4, Decision.RESUME),
])
def test_one_unsure_word_heard_while_the_speech_goes_on_waits(
        voiced: int, ended: bool, current: bool, text: str, word_p: float,
        decision: Decision) -> None:
    facts = InterruptionFacts(voiced, ended, text, word_p, text_current=current)
    assert decide(facts, OPTS) is decision


def test_speech_in_progress_may_be_the_start_of_a_backchannel_phrase() -> None:
    # "Okay, I" while "Okay, I see." is still being said: wait for the rest.
    assert backchannel_only("Okay, I", OPTS, in_progress=True)
    assert backchannel_only("got", OPTS, in_progress=True)
    assert not backchannel_only("Okay, I", OPTS)  # ended there: real words
    assert not backchannel_only("Okay, I think", OPTS, in_progress=True)
    assert decide(InterruptionFacts(300, False, "Okay, I"), OPTS) is Decision.WAIT
    assert decide(InterruptionFacts(300, True, "Okay, I"), OPTS) is Decision.COMMIT
    # ... unless that transcript was decoded while the speech went on: its words then may
    # still be the start of a phrase, and the transcript of the pause decides.
    assert decide(InterruptionFacts(300, True, "Okay, I", text_current=False), OPTS) is Decision.WAIT
    assert decide(InterruptionFacts(300, True, "Okay, stop", text_current=False),
                  OPTS) is Decision.COMMIT
    assert decide(InterruptionFacts(300, True, "Okay.", text_current=False), OPTS) is Decision.RESUME
    # No words yet is not a sound yet ("Hold on." in noise: "" 400 ms in, "Hold on." at
    # the pause).
    assert decide(InterruptionFacts(300, True, "", text_current=False), OPTS) is Decision.WAIT
    assert decide(InterruptionFacts(300, True, "Stop.", 0.1, text_current=False),
                  OPTS) is Decision.WAIT
    assert decide(InterruptionFacts(300, True, ""), OPTS) is Decision.RESUME


@pytest.mark.parametrize(("text", "word_p", "is_guess"), [
    # Words that ask for the floor are heard early but unsure (bench_asr --bursts).
    ("Stop.", 0.28, False),
    ("wait", 0.21, False),
    ("No...", 0.19, False),
    ("Hold.", 0.16, False),
    ("Okay, but", 0.15, False),
    ("x.", 0.05, True),
    ("Stop.", 0.05, True),  # under interrupt_word_min_p: a guess all the same
    # A phrase that asks for the floor, heard word for word, is trusted lower still
    # (espeak-ng's "Hold on." at 0.12, "Hey, hold on!" at 0.06).
    ("Hold on.", 0.12, False),
    ("Hey, hold on!", 0.06, False),
    ("hang on", 0.06, False),
    ("Hold on.", 0.03, True),
    ("Hold it.", 0.12, True),  # the word alone keeps its bar
    # Other words that unsure are guesses: backchannels, and a hum heard as words.
    ("Oh.", 0.2, True),
    ("ok.", 0.27, True),
    ("enough.", 0.09, True),
    ("in my mom.", 0.14, True),
    # More words than a backchannel has are speech however unsure.
    ("Stop, please. That is enough.", 0.05, False),
])
def test_words_that_ask_for_the_floor_are_trusted_at_a_lower_probability(
        text: str, word_p: float, is_guess: bool) -> None:
    assert guessed(text, word_p, OPTS) is is_guess


def test_custom_word_list_and_limits() -> None:
    opts = InterruptionOptions(backchannels=("jawohl",), max_backchannel_ms=600)
    assert decide(InterruptionFacts(300, True, "Jawohl!"), opts) is Decision.RESUME
    assert decide(InterruptionFacts(300, True, "Yeah"), opts) is Decision.COMMIT
    assert decide(InterruptionFacts(600, False, None), opts) is Decision.COMMIT
    with pytest.raises(ValueError, match="immediate or tentative"):
        InterruptionOptions(mode="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interrupt_word_min_p"):
        InterruptionOptions(interrupt_word_min_p=1.5)
    with pytest.raises(ValueError, match="interim_word_min_p"):
        InterruptionOptions(interim_word_min_p=-0.1)
    with pytest.raises(ValueError, match="interrupt_phrase_min_p"):
        InterruptionOptions(interrupt_phrase_min_p=2.0)
    assert not guessed("stop", 0.28, InterruptionOptions(interrupt_words=("Stop",)))
    quiet = InterruptionOptions(interrupt_words=())
    assert guessed("Stop.", 0.28, quiet)
    assert decide(InterruptionFacts(250, False, "Stop.", 0.28), quiet) is Decision.WAIT
    assert decide(InterruptionFacts(250, False, "Stop.", 0.28), OPTS) is Decision.COMMIT


PLAYED = ["while", "dragons", "are", "brave,", "but", "also", "kind"]


@pytest.mark.parametrize(("text", "echo"), [
    ("But also.", True),  # AEC3's residual of the reply, as Whisper heard it (CI, aec at 30 ms)
    ("are brave", True),
    ("Kind.", True),
    ("brave are", False),  # not in the order played
    ("dragons brave", False),  # not a run of it
    ("but also kind of", False),  # "of" was not played
    ("But what about cats?", False),
    ("", False),  # no words: a sound already
    ("[cough]", False),
    ("But.", False),  # only a word that asks for the floor: the user's
    ("Stop.", False),
])
def test_a_run_of_the_words_the_reply_just_played_is_its_echo(text: str, echo: bool) -> None:
    assert echoes(text, PLAYED, OPTS) is echo


def test_an_echo_counts_as_no_words() -> None:
    facts = InterruptionFacts(300, True, "But also.", word_p=0.6, text_current=True)
    assert decide(facts, OPTS) is Decision.COMMIT  # "but" asks for the floor
    echo = InterruptionFacts(300, True, "But also.", word_p=0.6, text_current=True, echo=True)
    assert decide(echo, OPTS) is Decision.RESUME
    # Speech too long for a backchannel still cuts, whatever it said.
    long_echo = InterruptionFacts(1300, True, "But also.", text_current=True, echo=True)
    assert decide(long_echo, OPTS) is Decision.COMMIT

