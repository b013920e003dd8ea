"""Word timings from Piper alignments, and mapping played samples to the heard text."""

from __future__ import annotations

import difflib
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from audio.asr import ASROptions, Transcriber
from audio.resample import resample
from audio.word_timing import (
    TextWord,
    TTSChunk,
    WordTiming,
    align_words,
    estimate_words,
    heard_position,
    split_words,
    words_between,
)

# -- pure: words and alignment -----------------------------------------------------------


def test_split_words_strips_edge_punctuation_and_skips_symbols() -> None:
    text = '"Hello," she said -- it\'s 3.5 km... (really)!'
    words = split_words(text)
    assert [w.word for w in words] == ["Hello", "she", "said", "it's", "3.5", "km", "really"]
    for w in words:
        assert text[w.char_start : w.char_end] == w.word


def _words(*ws: str) -> list[TextWord]:
    out, pos = [], 0
    for w in ws:
        out.append(TextWord(w, pos, pos + len(w)))
        pos += len(w) + 1
    return out


def test_align_words_handles_words_merged_by_the_phonemizer() -> None:
    # espeak speaks "because of the rain" with "of the" as one phoneme word.
    words = _words("because", "of", "the", "rain")
    per_word = [list("bɪkˈʌz"), list("ʌv"), list("ðə"), list("ɹˈeɪn")]
    spoken = ["^", *"bɪkˈʌz", " ", *"ʌvðə", " ", *"ɹˈeɪn", ".", "$"]
    samples = [100] * len(spoken)
    t = align_words(words, per_word, spoken, samples)
    assert [w.word for w in t] == ["because", "of", "the", "rain"]
    # "because" = phonemes 1..6 -> samples 100..700; "of" = 2 phonemes after the space.
    assert (t[0].start_sample, t[0].end_sample) == (100, 700)
    assert (t[1].start_sample, t[1].end_sample) == (800, 1000)
    assert (t[2].start_sample, t[2].end_sample) == (1000, 1200)
    assert t[3].end_sample == 1300 + 5 * 100 - 0  # ends before the "." and "$"


def test_align_words_expansion_and_unmatched_words_stay_monotonic() -> None:
    # "$5" is spoken as two phoneme words; "xyzzy" phonemizes to something unrelated.
    words = _words("pay", "$5", "xyzzy", "now")
    per_word = [list("pˈeɪ"), list("faɪvdɑːlɚz"), list("zɪzi"), list("nˈaʊ")]
    spoken = ["^", *"pˈeɪ", " ", *"fˈaɪv", " ", *"dˈɑːlɚz", " ", *"ksˈɪzi", " ", *"nˈaʊ", "$"]
    samples = list(range(10, 10 + len(spoken)))
    t = align_words(words, per_word, spoken, samples)
    ends = [w.end_sample for w in t]
    starts = [w.start_sample for w in t]
    assert all(s <= e for s, e in zip(starts, ends, strict=True))
    assert all(ends[i] <= starts[i + 1] for i in range(len(t) - 1))
    bounds = np.cumsum([0, *samples])
    five_start = bounds[spoken.index("f")]
    assert t[1].start_sample == five_start  # "$5" covers "five dollars"
    assert t[1].end_sample == bounds[spoken.index("z") + 1]
    assert t[3].end_sample == bounds[len(spoken) - 1]


def test_estimate_words_covers_the_audio_in_order() -> None:
    t = estimate_words(_words("a", "longer", "word"), 1000, char_offset=5)
    assert t[0].start_sample == 0 and t[-1].end_sample == 1000
    assert t[0].char_start == 5
    assert t[1].end_sample - t[1].start_sample > t[0].end_sample - t[0].start_sample


# -- pure: heard position ----------------------------------------------------------------


def _chunk(text: str, char_start: int, start_sample: int, word_index: int, spans: list[tuple[int, int]],
           length: int, tokens: tuple[int, int] | None = None) -> TTSChunk:
    ws = split_words(text)
    words = tuple(
        WordTiming(w.word, w.char_start + char_start, w.char_end + char_start, s, e)
        for w, (s, e) in zip(ws, spans, strict=True)
    )
    return TTSChunk(0, np.zeros(length, np.int16), 22050, text, char_start, char_start + len(text), words,
                    start_sample, tokens[0] if tokens else None, tokens[1] if tokens else None, word_index)


REPLY = "Sure, I can help. Tell me more."
CHUNKS = [
    _chunk("Sure, I can help. ", 0, 0, 0, [(100, 400), (500, 600), (650, 900), (950, 1400)], 1600, (0, 6)),
    _chunk("Tell me more.", 18, 1600, 4, [(100, 300), (350, 500), (550, 900)], 1200, (6, 10)),
]


@pytest.mark.parametrize(
    ("played", "heard", "last"),
    [
        (0, "", -1),
        (399, "", -1),
        (400, "Sure", 0),  # a word counts once its last sample is played
        (899, "Sure, I", 1),
        (1400, "Sure, I can help", 3),
        (1599, "Sure, I can help", 3),
        (1600, "Sure, I can help. ", 3),  # whole chunk played: its punctuation too
        (1600 + 499, "Sure, I can help. Tell", 4),
        (1600 + 500, "Sure, I can help. Tell me", 5),
        (2800, REPLY, 6),
        (10**9, REPLY, 6),
    ],
)
def test_heard_position(played: int, heard: str, last: int) -> None:
    pos = heard_position(CHUNKS, played)
    assert pos.text == heard
    assert pos.char_offset == len(heard)
    assert REPLY[: pos.char_offset] == heard
    assert (pos.last_word_index, pos.word_count) == (last, last + 1)


def test_heard_position_tokens_and_empty() -> None:
    assert heard_position(CHUNKS, 1599).token_end is None
    assert heard_position(CHUNKS, 1600).token_end == 6
    assert heard_position(CHUNKS, 2800).token_end == 10
    empty = heard_position([], 1000)
    assert (empty.char_offset, empty.word_count, empty.text) == (0, 0, "")


# -- real: cutting synthesized audio at a word end leaves exactly that word ---------------


def _norm(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def _same_word(a: str, b: str) -> bool:
    return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= 0.75


def _heard(transcriber: Transcriber, audio: np.ndarray, rate: int) -> list[str]:
    return _norm(transcriber.transcribe(resample(audio, rate, 16000), word_timestamps=False).text)


@pytest.mark.slow
def test_cut_at_word_end_is_heard_as_that_word(spoken_sentences: list[Any], asr_model_dir: Path) -> None:
    """Cut sentences at the end of content words (>= 4 letters, not the first or last
    word): Whisper must hear the cut ending on that word. Cut at the word's *start*, it
    must not. (Misses left are Whisper tiny mishearing a clipped word, e.g. "quick" as
    "quit", at any cut offset we tried.) Decoded on the 10 s encoder window the live loop
    uses (`asr.window_s`); the stock 30 s window hears as many ends, at three times the
    cost."""
    transcriber = Transcriber(asr_model_dir, ASROptions(window_s=10))
    rng = random.Random(1234)
    ends_ok, end_cuts, starts_ok, start_cuts, failures = 0, 0, 0, 0, []
    for i, chunk in enumerate(spoken_sentences):
        audio = chunk.pcm.astype(np.float32) / 32768.0
        candidates = [k for k, w in enumerate(chunk.words[:-1]) if k > 0 and len(w.word) >= 4]
        for j, k in enumerate(rng.sample(candidates, min(3, len(candidates)))):
            word = chunk.words[k]
            target = _norm(word.word)[-1]
            got = _heard(transcriber, audio[: word.end_sample], chunk.sample_rate)
            end_cuts += 1
            if got and _same_word(got[-1], target):
                ends_ok += 1
            else:
                failures.append((word.word, got[-3:]))
            if j == 0 and i % 2 == 0:
                got = _heard(transcriber, audio[: word.start_sample], chunk.sample_rate)
                start_cuts += 1
                starts_ok += not (got and _same_word(got[-1], target))
    assert end_cuts >= 50 and start_cuts >= 10
    assert ends_ok / end_cuts >= 0.9, failures
    assert starts_ok / start_cuts >= 0.9


@pytest.mark.parametrize(
    ("start", "end", "words"),
    [
        (0, 100, []),  # before the first word
        (0, 101, ["Sure"]),  # the word being heard counts
        (400, 650, ["I"]),  # "Sure" ended at 400; "can" starts at 650
        (1300, 1800, ["help", "Tell"]),  # across chunks
        (-5000, 10**9, ["Sure", "I", "can", "help", "Tell", "me", "more"]),
        (2800, 4000, []),
    ],
)
def test_words_between(start: int, end: int, words: list[str]) -> None:
    assert words_between(CHUNKS, start, end) == words

