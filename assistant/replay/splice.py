"""A pause put inside one spoken sentence: a mid-sentence pause with the sentence's own
prosody.

Rendering the words before a pause as an utterance of their own gives them the falling
pitch and lengthening of a sentence's end, which no speaker pausing mid-thought makes:
an audio end-of-turn model then hears a finished sentence, and Whisper writes one. The
test set of bench/bench_turns.py instead speaks the whole sentence once and opens a gap
of room noise between two of its words (found by Whisper's word timestamps, moved to the
quietest 10 ms around them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from assistant.replay.scenario import Placed, Scenario

__all__ = ["quietest_ms", "insert_pause", "word_gap_ms"]

_FRAME_MS = 10


def quietest_ms(pcm: npt.NDArray[np.float32], rate: int, lo_ms: int, hi_ms: int) -> int:
    """The start (ms) of the quietest 10 ms frame of ``pcm`` between ``lo_ms`` and
    ``hi_ms`` (clamped to the audio): where a gap between two words cuts no sound."""
    frame = rate * _FRAME_MS // 1000
    lo = max(0, lo_ms) * rate // 1000
    hi = min(pcm.size, max(0, hi_ms) * rate // 1000)
    if hi - lo < frame:
        raise ValueError(f"no 10 ms frame between {lo_ms} and {hi_ms} ms")
    starts = np.arange(lo, hi - frame + 1, frame // 2)
    energy = [float(np.mean(pcm[s:s + frame] ** 2)) for s in starts]
    return int(starts[int(np.argmin(energy))]) * 1000 // rate


def insert_pause(scenario: Scenario, at_ms: int, pause_ms: int, *,
                 noise_floor_dbfs: float = -65.0, seed: int = 1) -> Scenario:
    """``scenario`` with ``pause_ms`` of room noise (at ``noise_floor_dbfs``) inserted at
    ``at_ms``; the utterance spoken across that point becomes two placed parts (its text
    is kept whole on the first), and every later part moves by the pause."""
    rate = scenario.sample_rate
    at = at_ms * rate // 1000
    if not 0 < at < scenario.pcm.size:
        raise ValueError(f"pause at {at_ms} ms is outside the {scenario.pcm.size * 1000 // rate} ms audio")
    if pause_ms < 0:
        raise ValueError(f"pause_ms must be >= 0, got {pause_ms}")
    n = pause_ms * rate // 1000
    rng = np.random.default_rng(seed)
    gap = (rng.standard_normal(n) * 10 ** (noise_floor_dbfs / 20)).astype(np.float32)
    pcm = np.concatenate([scenario.pcm[:at], gap, scenario.pcm[at:]])
    placed: list[Placed] = []
    for p in scenario.placed:
        if p.end_ms <= at_ms:
            placed.append(p)
        elif p.start_ms >= at_ms:
            placed.append(Placed(p.kind, p.text, p.start_ms + pause_ms, p.end_ms + pause_ms))
        else:
            placed.append(Placed(p.kind, p.text, p.start_ms, at_ms))
            placed.append(Placed(p.kind, "", at_ms + pause_ms, p.end_ms + pause_ms))
    return Scenario(pcm, tuple(placed), rate)


def _word(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum() or c == "'")


def word_gap_ms(transcriber: Any, whole: Scenario, head: str) -> int | None:
    """Where, in ``whole`` (a sentence spoken whole), the words of ``head`` end: the
    quietest 10 ms between its last word and the next by Whisper's word timestamps
    (``transcriber``: an `audio.asr.Transcriber`); None when Whisper's words do not
    begin with ``head``'s."""
    words = transcriber.transcribe(whole.pcm, word_timestamps=True).words
    want = [_word(w) for w in head.split()]
    got = [_word(w.text) for w in words]
    k = len(want)
    if len(got) <= k or got[:k] != want:
        return None
    return quietest_ms(whole.pcm, whole.sample_rate, words[k - 1].end_ms - 60,
                       words[k].start_ms + 60)
