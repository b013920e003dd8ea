"""Batched Whisper decodes give what the single path gives (the real model)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from audio.asr import ASROptions, Transcriber, Transcript
from audio.asr_batch import BatchingTranscriber
from audio.resample import resample

RATE = 16_000


def _clips(spoken_sentences: list[Any]) -> list[np.ndarray]:
    """Speech of several lengths: a word's worth, sentences, two sentences back to back."""
    pcm = [resample(c.pcm.astype(np.float32) / 32768, c.sample_rate, RATE).astype(np.float32)
           for c in spoken_sentences[:6]]
    return [pcm[0][: RATE * 6 // 10], pcm[0], pcm[1], pcm[3][: RATE * 3 // 2],
            np.concatenate([pcm[4], np.zeros(RATE // 4, np.float32), pcm[5]])]


def _concurrently(batching: BatchingTranscriber, cases: list[tuple[np.ndarray, bool, str | None]],
                  threads: int) -> list[Transcript]:
    out: list[Any] = [None] * len(cases)
    start = threading.Barrier(threads)

    def worker(k: int) -> None:
        start.wait()
        for i in range(k, len(cases), threads):
            pcm, words, prompt = cases[i]
            out[i] = batching.transcribe(pcm, word_timestamps=words, initial_prompt=prompt)

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    assert not any(t.is_alive() for t in pool)
    return out


PROB_ABS = 2e-3
"""Word probabilities come from ``align``, which in a batch of texts rounds otherwise
than alone: the same word came out 0.98472 alone and 0.98511 in a batch (CI, a 2-core
AMD EPYC with AVX-512; which decodes share a batch depends on the threads). 3.8e-4 at most in 12 runs
of this test; the rules that read them draw lines at 0.15 and 0.3."""
FRAME_MS = 20
"""Whisper's alignment frame: a word boundary that such rounding moved would move by one
(none did in those runs)."""


def _assert_same(have: Transcript, want: Transcript) -> None:
    """The same transcript: every text and every ``generate`` score exactly (rows of
    one prompt length are computed alike), word times to an alignment frame, word
    probabilities to :data:`PROB_ABS`."""
    assert (have.text, have.language, have.duration_ms, have.speech_found, have.trusted) == (
        want.text, want.language, want.duration_ms, want.speech_found, want.trusted)
    assert [s.text for s in have.segments] == [s.text for s in want.segments], have
    for hs, ws in zip(have.segments, want.segments, strict=True):
        assert (hs.start_ms, hs.end_ms, hs.avg_logprob, hs.no_speech_prob) == (
            ws.start_ms, ws.end_ms, ws.avg_logprob, ws.no_speech_prob)
        assert [w.text for w in hs.words] == [w.text for w in ws.words], have
        for hw, ww in zip(hs.words, ws.words, strict=True):
            assert abs(hw.start_ms - ww.start_ms) <= FRAME_MS, (hw, ww)
            assert abs(hw.end_ms - ww.end_ms) <= FRAME_MS, (hw, ww)
            assert hw.probability == pytest.approx(ww.probability, abs=PROB_ABS), (hw, ww)


@pytest.mark.slow
@pytest.mark.parametrize("window_s, batch_encode", [(10.0, False), (10.0, True), (0.0, False)])
def test_batched_decodes_equal_single_decodes(asr_model_dir: Path, spoken_sentences: list[Any],
                                              window_s: float, batch_encode: bool) -> None:
    single = Transcriber(asr_model_dir, ASROptions(window_s=window_s))
    # Word timings and probabilities (partials, interruptions), text only (finals), and a
    # prompt (a partial's committed text): prompts of other lengths are batched apart.
    cases = [(pcm, words, prompt) for pcm in _clips(spoken_sentences)
             for words, prompt in ((True, None), (False, None), (True, "Well, I said"))]
    expected = [single.transcribe(pcm, word_timestamps=w, initial_prompt=p) for pcm, w, p in cases]
    batching = BatchingTranscriber(single, batch_encode=batch_encode)
    try:
        got = _concurrently(batching, cases, threads=5)
        stats = batching.stats()
    finally:
        batching.close()
    for want, have in zip(expected, got, strict=True):
        _assert_same(have, want)
    assert any(t.words for t in got) and any(not t.words for t in got)
    assert stats.largest > 1 and stats.batches < stats.calls
