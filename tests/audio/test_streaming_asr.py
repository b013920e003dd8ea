"""Streaming ASR: LocalAgreement commits only agreed words; the stable prefix never retracts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jiwer
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audio.asr import TranscribedWord, Transcriber
from audio.resample import resample
from audio.streaming_asr import (
    LocalAgreement,
    StreamingASROptions,
    StreamingTranscriber,
    TranscriptPartial,
    normalize_word,
)

RATE = 16000


def _hyp(text: str, step_ms: int = 200, start_ms: int = 0) -> list[TranscribedWord]:
    return [
        TranscribedWord(w, start_ms + i * step_ms, start_ms + (i + 1) * step_ms, 0.9)
        for i, w in enumerate(text.split())
    ]


def _text(words: Sequence[TranscribedWord]) -> str:
    return " ".join(w.text for w in words)


# -- LocalAgreement (pure) ---------------------------------------------------------------


def test_commits_the_prefix_two_hypotheses_agree_on() -> None:
    la = LocalAgreement(agreement=2)
    assert la.insert(_hyp("the cat")) == []  # one hypothesis is not enough
    assert _text(la.insert(_hyp("the cat sat"))) == "the cat"
    assert _text(la.tail) == "sat"
    assert _text(la.insert(_hyp("the cat sat on the"))) == "sat"
    assert _text(la.insert(_hyp("the cat sat on the mat."))) == "on the"
    assert _text(la.finish(_hyp("the cat sat on the mat."))) == "the cat sat on the mat."


def test_disagreement_commits_nothing_until_it_settles() -> None:
    la = LocalAgreement()
    la.insert(_hyp("I scream"))
    assert la.insert(_hyp("ice cream is")) == []
    assert _text(la.insert(_hyp("ice cream is good"))) == "ice cream is"
    assert _text(la.committed) == "ice cream is"


def test_agreement_ignores_case_and_punctuation() -> None:
    la = LocalAgreement()
    la.insert(_hyp("Hello, world."))
    assert _text(la.insert(_hyp("hello world and"))) == "hello world"
    assert normalize_word("World.") == normalize_word("world") == "world"
    assert normalize_word("don't") == "don't"


def test_repeated_committed_words_with_shifted_times_are_not_duplicated() -> None:
    la = LocalAgreement()
    la.insert(_hyp("one two three"))
    la.insert(_hyp("one two three four"))
    assert _text(la.committed) == "one two three"
    # Whisper re-emits "three" with a later start than the committed "three".
    shifted = [*_hyp("one two"), TranscribedWord("three", 500, 650, 0.9), *_hyp("four five", start_ms=650)]
    la.insert(shifted)
    assert _text(la.committed) == "one two three four"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=8), min_size=1, max_size=12))
def test_committed_words_only_grow(hypotheses: list[list[str]]) -> None:
    la = LocalAgreement()
    before: tuple[TranscribedWord, ...] = ()
    for h in hypotheses:
        fresh = la.insert(_hyp(" ".join(h)))
        assert la.committed == before + tuple(fresh)
        before = la.committed
    assert la.finish()[: len(before)] == before


# -- StreamingTranscriber with a scripted recognizer -------------------------------------

WORDS = ["please", "bring", "the", "red", "umbrella", "and", "two", "small", "green", "apples", "to", "the", "kitchen", "table", "today"]
SEG = 3200  # 200 ms of audio per word


def _script_audio() -> np.ndarray:
    """Each 200 ms segment carries its word's index in the sample value."""
    return np.repeat(np.arange(1, len(WORDS) + 1, dtype=np.float32) / 100.0, SEG)


class ScriptedDecoder:
    """Knows every complete word; guesses wildly at a word that is cut off."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str | None]] = []

    def __call__(self, audio: np.ndarray, prompt: str | None) -> list[TranscribedWord]:
        self.calls.append((audio.shape[0], prompt))
        out = []
        for i in range(0, audio.shape[0], SEG):
            seg = audio[i : i + SEG]
            word = WORDS[int(round(float(seg[0]) * 100)) - 1]
            p = 0.9
            if seg.shape[0] < SEG:
                word = word[: max(1, len(word) * seg.shape[0] // SEG)] + f"~{len(self.calls)}"
                p = 0.1
            out.append(TranscribedWord(word, i * 1000 // RATE, (i + seg.shape[0]) * 1000 // RATE, p))
        return out


def _stream(decoder: ScriptedDecoder, options: StreamingASROptions, frame: int = 320) -> tuple[list[TranscriptPartial], str]:
    st_ = StreamingTranscriber(decoder, options)
    audio = _script_audio()
    partials: list[TranscriptPartial] = []
    for i in range(0, audio.shape[0], frame):
        partials += st_.feed(audio[i : i + frame])
    return partials, st_.finalize().text


def test_scripted_stream_partials_are_stable_and_final_is_complete() -> None:
    decoder = ScriptedDecoder()
    partials, final = _stream(decoder, StreamingASROptions(partial_interval_ms=300))
    assert final == " ".join(WORDS)
    assert len(partials) >= 8
    for a, b in zip(partials, partials[1:], strict=False):
        assert b.stable_text.startswith(a.stable_text)
        assert b.audio_ms > a.audio_ms
    for p in partials:
        assert p.text.startswith(p.stable_text)
        assert "~" not in p.stable_text  # a cut-off guess is never committed
        # ... and says it is one: the lowest word probability is the guess's.
        assert p.word_p == (0.1 if "~" in p.text else 0.9)
    # Decodes ran every ~300 ms of new audio, plus the final one.
    total_ms = len(WORDS) * 200
    assert abs(len(decoder.calls) - (total_ms // 300 + 1)) <= 1


def test_long_utterances_trim_the_buffer_and_prompt_with_committed_text() -> None:
    decoder = ScriptedDecoder()
    _, final = _stream(decoder, StreamingASROptions(partial_interval_ms=200, max_buffer_ms=1000))
    assert final == " ".join(WORDS)
    longest = max(n for n, _ in decoder.calls)
    assert longest < RATE * 1.8  # without trimming the last decode would be 3.2 s
    prompts = [p for _, p in decoder.calls if p]
    assert prompts and prompts[-1].startswith("please bring")


def test_cancel_and_finalize_are_idempotent() -> None:
    decoder = ScriptedDecoder()
    s = StreamingTranscriber(decoder, StreamingASROptions(partial_interval_ms=200))
    audio = _script_audio()
    for i in range(0, SEG * 4, 320):
        s.feed(audio[i : i + 320])
    s.cancel()
    s.cancel()
    calls = len(decoder.calls)
    assert s.feed(audio[SEG * 4 : SEG * 6]) == []
    final = s.finalize()
    assert final is s.finalize()
    assert len(decoder.calls) == calls  # no decode after cancel
    assert WORDS[0] in final.text and "~" not in final.text


def test_an_untrusted_decode_leaves_the_last_partial_standing() -> None:
    scripted = ScriptedDecoder()
    untrusted = {2}  # the second decode's result is not trusted (a glance that looped)

    def decode(audio: np.ndarray, prompt: str | None) -> list[TranscribedWord] | None:
        words = scripted(audio, prompt)
        return None if len(scripted.calls) in untrusted else words

    s = StreamingTranscriber(decode, StreamingASROptions(partial_interval_ms=300))
    audio = _script_audio()
    partials: list[list[TranscriptPartial]] = []
    for end in (SEG * 2, SEG * 4, SEG * 6):
        partials.append(s.feed(audio[end - SEG * 2:end]))
    assert len(scripted.calls) == 3
    assert partials[0] and partials[1] == [] and partials[2]  # nothing new from decode 2
    assert partials[2][0].text.startswith(partials[0][0].stable_text)
    assert s.finalize().text == " ".join(WORDS[:6])


def test_no_partial_before_min_audio() -> None:
    decoder = ScriptedDecoder()
    s = StreamingTranscriber(decoder, StreamingASROptions(partial_interval_ms=100, min_audio_ms=500))
    assert s.feed(np.full(RATE * 4 // 10, 0.01, np.float32)) == []
    assert decoder.calls == []
    assert s.feed(np.full(RATE * 2 // 10, 0.01, np.float32)) != []


# -- real model --------------------------------------------------------------------------


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


@pytest.mark.slow
def test_real_stream_never_retracts_and_final_is_accurate(
    transcriber: Transcriber, spoken_sentences: list[Any]
) -> None:
    chunks = spoken_sentences[2:4]
    reference = " ".join(c.text for c in chunks)
    audio = np.concatenate([resample(c.pcm.astype(np.float32) / 32768, c.sample_rate, RATE) for c in chunks])
    stream = StreamingTranscriber.from_transcriber(transcriber, StreamingASROptions(partial_interval_ms=1000))
    partials: list[TranscriptPartial] = []
    for i in range(0, audio.shape[0], 320):  # 20 ms frames, as from the mic
        partials += stream.feed(audio[i : i + 320])
    final = stream.finalize()
    assert len(partials) >= 3
    for a, b in zip(partials, partials[1:], strict=False):
        assert b.stable_text.startswith(a.stable_text)
    assert partials[-1].stable_text, "nothing was ever committed"
    assert final.text.startswith(partials[-1].stable_text)
    assert jiwer.wer(_norm(reference), _norm(final.text)) <= 0.10
    assert [w.start_ms for w in final.words] == sorted(w.start_ms for w in final.words)
