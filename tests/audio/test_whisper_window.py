"""The shorter encoder window: what it cuts, when its result is not trusted, and that the
real model on a cut window still hears what was said."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from audio.asr import ASROptions, Transcriber
from audio.resample import resample
from audio.whisper_window import (
    FULL_FRAMES,
    GLANCE,
    LOOPS_ONLY,
    WindowGuard,
    content_frames,
    cut_window,
    looks_wrong,
    token_budget,
)


def _features(content: int, total: int = FULL_FRAMES) -> np.ndarray:
    f = np.zeros((1, 80, total), np.float32)
    f[..., :content] = np.random.default_rng(0).uniform(-1.5, 1.5, (80, content))
    return f


def test_content_frames_finds_the_zero_padding() -> None:
    assert content_frames(_features(321)) == 321
    assert content_frames(_features(0)) == 0
    assert content_frames(_features(FULL_FRAMES)) == FULL_FRAMES
    # A frame of digital silence is not padding (log-mel floor, not zero).
    f = _features(100)
    f[..., 100:150] = -1.5
    assert content_frames(f) == 150


@pytest.mark.parametrize(("content", "window", "margin", "kept"), [
    (300, 1000, 100, 1000),       # short speech: the window
    (950, 1000, 100, 1050),       # speech near the window's end: content + margin
    (2950, 1000, 100, FULL_FRAMES),  # long speech: everything (never past the input)
    (300, 0, 100, FULL_FRAMES),   # no window: the stock 30 s
    (300, 3000, 100, FULL_FRAMES),
])
def test_cut_window_keeps_the_window_or_all_speech(content: int, window: int, margin: int, kept: int) -> None:
    f = _features(content)
    out = cut_window(f, window, margin)
    assert out.shape == (1, 80, kept)
    np.testing.assert_array_equal(out, f[..., :kept])


def _seg(tokens: int, ratio: float = 1.2, logprob: float = -0.3, text: str = " Hello there.") -> Any:
    return SimpleNamespace(tokens=list(range(tokens)), compression_ratio=ratio, avg_logprob=logprob,
                           text=text)


@pytest.mark.parametrize(("segments", "audio_s", "wrong"), [
    ([_seg(10)], 2.0, False),
    ([], 2.0, False),
    ([_seg(10, ratio=23.6)], 2.0, True),          # "Stop please. Stop please. ..."
    ([_seg(10), _seg(10), _seg(10)], 2.0, True),  # 30 tokens in 2 s: a loop
    ([_seg(10, logprob=-1.2)], 2.0, True),
    ([_seg(60)], 10.0, False),
    # Numerals sit lower on any window: trusted down to -1.5, not below.
    ([_seg(6, logprob=-1.34, text=" Room 204 please.")], 2.0, False),
    ([_seg(6, logprob=-1.27, text=" 29340.")], 1.8, False),
    ([_seg(6, logprob=-1.6, text=" Room 204 please.")], 2.0, True),
    # Only the segment with the numeral: a wordy one beside it keeps the -1.0 floor.
    ([_seg(6, logprob=-0.4, text=" Call 555."), _seg(4, logprob=-1.2, text=" Alright.")], 3.0, True),
    # A loop of numerals is still a loop.
    ([_seg(10, ratio=9.0, text=" 1. 1. 1. 1. 1. 1. 1.")], 2.0, True),
])
def test_looks_wrong(segments: list[Any], audio_s: float, wrong: bool) -> None:
    assert looks_wrong(segments, audio_s, WindowGuard()) is wrong


def test_the_quick_guards_trust_any_numeral_logprob() -> None:
    # LOOPS_ONLY and GLANCE take no log-probability floor at all, numerals or not.
    numerals = [_seg(6, logprob=-3.0, text=" 29340.")]
    assert not looks_wrong(numerals, 1.8, LOOPS_ONLY)
    assert not looks_wrong(numerals, 1.8, GLANCE)


class LoopingOnCutWindow:
    """A stand-in model: loops on a cut window, right on the full one (one layer only)."""

    def __init__(self) -> None:
        self.window_frames = 1000
        self.last_encoded_frames = 0
        self.windows: list[int] = []
        self.caps: list[int | None] = []

    def transcribe(self, audio: np.ndarray, **kwargs: Any) -> Any:
        self.windows.append(self.window_frames)
        self.caps.append(kwargs.get("max_new_tokens"))
        self.last_encoded_frames = self.window_frames or FULL_FRAMES
        text = " Stop please." * (20 if self.window_frames else 1)
        seg = SimpleNamespace(text=text, start=0.0, end=1.5, words=(), avg_logprob=-0.2,
                              no_speech_prob=0.01, tokens=list(range(4 * text.count("Stop"))),
                              compression_ratio=20.0 if self.window_frames else 1.1)
        return iter([seg]), SimpleNamespace(language="en")


def test_an_untrusted_cut_window_decodes_again_on_the_full_window() -> None:
    model = LoopingOnCutWindow()
    t = Transcriber.from_model(model, ASROptions(speech_check="none"))
    out = t.transcribe(np.full(16000 * 2, 0.1, np.float32))
    assert out.text == "Stop please."
    assert model.windows == [1000, 0] and model.window_frames == 1000  # restored
    assert t.fallbacks == 1
    # The cut window's decode was capped a little past the guard's budget for 2 s (a
    # loop stops there, still over it); the full window's was not.
    budget = token_budget(2.0, WindowGuard())
    assert budget == 20 and model.caps[1] is None
    cap = model.caps[0]
    assert cap is not None and budget < cap <= budget + 20


def test_a_glance_drops_an_untrusted_cut_window_result() -> None:
    model = LoopingOnCutWindow()
    t = Transcriber.from_model(model, ASROptions(speech_check="none"))
    out = t.transcribe(np.full(16000 * 2, 0.1, np.float32), guard=GLANCE)
    assert not out.trusted and out.text == "" and out.words == ()
    assert model.windows == [1000]  # no second decode on the full window
    assert (t.dropped, t.fallbacks) == (1, 0)
    assert t.transcribe(np.full(16000 * 2, 0.1, np.float32)).trusted  # the default redoes


class UnsureOnCutWindow:
    """A stand-in model: on a cut window a short burst comes out with little confidence
    (or, with ``loop``, looping); on the full window, sure."""

    def __init__(self, loop: bool = False) -> None:
        self.window_frames = 1000
        self.last_encoded_frames = 0
        self.windows: list[int] = []
        self.loop = loop

    def transcribe(self, audio: np.ndarray, **kwargs: Any) -> Any:
        self.windows.append(self.window_frames)
        self.last_encoded_frames = self.window_frames or FULL_FRAMES
        cut = bool(self.window_frames)
        text = " Stop." * (30 if cut and self.loop else 1)
        seg = SimpleNamespace(text=text, start=0.0, end=0.4, words=(), no_speech_prob=0.01,
                              avg_logprob=-1.4 if cut else -0.4,
                              tokens=list(range(2 * text.count("Stop"))),
                              compression_ratio=15.0 if cut and self.loop else 1.0)
        return iter([seg]), SimpleNamespace(language="en")


@pytest.mark.parametrize(("loop", "guard", "windows"), [
    (False, None, [1000, 0]),         # unsure: the full guard decodes again
    (False, LOOPS_ONLY, [1000]),      # unsure: a quick look keeps it
    (True, LOOPS_ONLY, [1000, 0]),    # a loop is never kept
])
def test_a_quick_look_decodes_again_only_a_loop(loop: bool, guard: WindowGuard | None,
                                                windows: list[int]) -> None:
    model = UnsureOnCutWindow(loop)
    t = Transcriber.from_model(model, ASROptions(speech_check="none"))
    out = t.transcribe(np.full(16000 // 2, 0.1, np.float32), guard=guard)
    assert out.text == "Stop."
    assert model.windows == windows
    assert t.fallbacks == len(windows) - 1


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def test_a_cut_window_hears_the_sentences_and_encodes_less(asr_model_dir: Path, spoken_sentences: list[Any]) -> None:
    t = Transcriber(asr_model_dir, ASROptions(window_s=10.0, cpu_threads=2))
    model: Any = t._model
    heard = 0
    for chunk in spoken_sentences[::2]:
        pcm = resample(chunk.pcm.astype(np.float32) / 32768.0, chunk.sample_rate, 16000)
        out = t.transcribe(pcm, word_timestamps=False)
        if model.last_encoded_frames < FULL_FRAMES:
            assert model.last_encoded_frames == 1000  # a few seconds of speech: the window
        heard += _words(out.text) == _words(chunk.text)
    assert t.fallbacks <= 1
    # The stock window gets these clean sentences word-perfect (test_roundtrip); the cut
    # one may slip on a word.
    assert heard >= 8, heard


def test_a_cut_window_decodes_after_a_lead_in_with_times_on_the_input(
        asr_model_dir: Path, piper_voice: Any) -> None:
    """The daemon's utterances may start 100 ms before the speech: on a cut window that
    turned "France" into "friends" until the decode got 300 ms of silence first. Word
    times stay on the caller's timeline."""
    from audio.tts import Synthesizer, TTSOptions

    synth = Synthesizer.from_voice(piper_voice, TTSOptions(noise_scale=0.0, noise_w_scale=0.0))
    chunk = synth.synthesize_span("What is the capital of France?")
    assert chunk is not None
    speech = resample(chunk.pcm.astype(np.float32) / 32768.0, chunk.sample_rate, 16000)
    pcm = np.concatenate([np.zeros(1600, np.float32), speech])  # 100 ms of digital silence
    cut = Transcriber(asr_model_dir, ASROptions(window_s=10.0, cpu_threads=2))
    stock = Transcriber(asr_model_dir, ASROptions(window_s=0.0, cpu_threads=2))
    heard_cut = cut.transcribe(pcm, word_timestamps=True)
    heard_stock = stock.transcribe(pcm, word_timestamps=True)
    assert _words(heard_cut.text) == ["what", "is", "the", "capital", "of", "france"]
    assert 0 < cut._model.last_encoded_frames < FULL_FRAMES
    starts_cut = [w.start_ms for s in heard_cut.segments for w in s.words]
    starts_stock = [w.start_ms for s in heard_stock.segments for w in s.words]
    assert len(starts_cut) == len(starts_stock) == 6
    assert all(abs(a - b) <= 120 for a, b in zip(starts_cut, starts_stock, strict=True))
    assert heard_cut.segments[-1].end_ms <= pcm.size * 1000 // 16000 + 50
