"""A pause inserted inside a spoken sentence (bench/bench_turns.py's mid-sentence cuts)."""

from __future__ import annotations

import numpy as np
import pytest

from assistant.replay.scenario import Placed, Scenario
from assistant.replay.splice import insert_pause, quietest_ms

RATE = 16_000


def tone(ms: int) -> np.ndarray:
    t = np.arange(RATE * ms // 1000) / RATE
    return (0.5 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def two_words() -> Scenario:
    """'word' 0-300 ms, 40 ms of silence, 'word' 340-640 ms, then a cough at 800 ms."""
    pcm = np.concatenate([tone(300), np.zeros(RATE * 40 // 1000, np.float32), tone(300),
                          np.zeros(RATE * 360 // 1000, np.float32)])
    return Scenario(pcm, (Placed("say", "one two", 0, 640), Placed("cough", "", 800, 900)), RATE)


def test_the_quietest_frame_is_the_gap_between_the_words() -> None:
    s = two_words()
    at = quietest_ms(s.pcm, RATE, 250, 400)
    assert 300 <= at <= 330
    with pytest.raises(ValueError, match="no 10 ms frame"):
        quietest_ms(s.pcm, RATE, 500, 505)


def test_a_pause_splits_the_utterance_and_moves_what_follows() -> None:
    s = two_words()
    out = insert_pause(s, 310, 700, noise_floor_dbfs=-50.0)
    assert out.pcm.size == s.pcm.size + RATE * 700 // 1000
    head = RATE * 310 // 1000
    np.testing.assert_array_equal(out.pcm[:head], s.pcm[:head])
    np.testing.assert_array_equal(out.pcm[head + RATE * 700 // 1000:], s.pcm[head:])
    gap = out.pcm[head:head + RATE * 700 // 1000]
    assert 0 < float(np.sqrt(np.mean(gap ** 2))) < 10 ** (-45 / 20)  # room noise, not speech
    assert out.placed == (Placed("say", "one two", 0, 310), Placed("say", "", 1010, 1340),
                          Placed("cough", "", 1500, 1600))
    assert [p.start_ms for p in out.said()] == [0, 1010]


def test_a_pause_outside_the_audio_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        insert_pause(two_words(), 5000, 300)
    with pytest.raises(ValueError, match="pause_ms"):
        insert_pause(two_words(), 100, -1)
