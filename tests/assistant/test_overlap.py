"""Speech over the reply: its span of speech time and when its words are asked for."""

from __future__ import annotations

from assistant.turns.overlap import Candidate, PausedReply, Span


def test_span_counts_gaps_inside_speech_but_not_pauses() -> None:
    span = Span()
    span.add(100, True, in_pause=False)
    span.add(40, False, in_pause=False)  # a consonant: counts once speech goes on
    assert (span.ms, span.gap_ms) == (100, 40)
    span.add(20, True, in_pause=False)
    assert (span.ms, span.gap_ms) == (160, 0)
    span.add(60, False, in_pause=False)
    span.pause()  # the trailing silence became a pause: it never counts
    span.add(20, False, in_pause=True)
    span.add(20, True, in_pause=True)
    assert (span.ms, span.gap_ms) == (180, 0)


def _due(cand: Candidate, ended: bool) -> bool:
    return cand.words_due(ended=ended, min_words_ms=150, barge_in_min_ms=200, every_ms=200)


def test_a_short_burst_is_asked_about_once_as_it_ends() -> None:
    cand = Candidate(voiced_ms=180, heard=Span(180))
    assert not _due(cand, ended=False)  # still going on: barge_in_min_ms decides
    cand.heard.add(40, False, in_pause=False)
    assert cand.burst_ended(voiced=False)
    assert _due(cand, ended=True)
    assert not _due(cand, ended=True)  # asked already: next after 200 ms more speech
    assert not _due(Candidate(voiced_ms=140, heard=Span(140)), ended=True)  # a click


def test_bursts_are_asked_about_once_they_add_up_to_the_barge_in_minimum() -> None:
    cand = Candidate(voiced_ms=0, heard=Span(120), bursts=2)
    assert not _due(cand, ended=False)
    cand.heard.add(80, True, in_pause=False)
    assert _due(cand, ended=False)
    cand.heard.add(180, True, in_pause=False)
    assert not _due(cand, ended=False)  # 380 < 200 + 200
    cand.heard.add(20, True, in_pause=False)
    assert _due(cand, ended=False)
    assert not Candidate(voiced_ms=0, heard=Span(500), bursts=2).words_due(
        ended=True, min_words_ms=150, barge_in_min_ms=200, every_ms=0)  # turned off


def test_a_paused_reply_asks_at_the_pause_and_every_step_of_speech_until_it_ends() -> None:
    paused = PausedReply(turn_id=1, t_ms=0, voiced_ms=200)
    assert paused.words_due(200)
    paused.speech.add(180, True, in_pause=False)
    assert not paused.words_due(200)
    paused.speech.add(20, True, in_pause=False)
    assert paused.words_due(200)
    paused.speech.add(200, True, in_pause=False)
    paused.speech_ended = True  # its words are asked for at its end instead
    assert not paused.words_due(200)
