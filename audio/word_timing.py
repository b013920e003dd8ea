"""Word timings for synthesized speech, and what the listener actually heard.

Piper reports how many samples each phoneme produced (its alignment output), but only
for the phonemes of a whole sentence: espeak expands ("$5" -> "five dollars"), merges
("of the" -> one phoneme word) and drops tokens, so phoneme-word boundaries do not map
one-to-one onto text words. We phonemize each text word on its own, align that
concatenation to the sentence's phonemes with :class:`difflib.SequenceMatcher`, and give
every sentence phoneme the word of its aligned counterpart (gaps interpolated). A
word's span is then the first to the last sample of its phonemes. The idea of keeping
word timestamps from TTS so the context holds only what was played is pipecat's.

:func:`heard_position` maps a count of played samples back to the last *fully* spoken
word of a reply, which is what barge-in truncation keeps.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "WordTiming",
    "TTSChunk",
    "HeardPosition",
    "TextWord",
    "split_words",
    "align_words",
    "estimate_words",
    "heard_position",
    "resume_sample",
    "words_between",
]

# Characters stripped from the ends of a whitespace token to get the spoken word.
_EDGE_PUNCT = "\"'`()[]{}<>.,;:!?\u2026\u2014\u2013-_*~\u201c\u201d\u2018\u2019\u00ab\u00bb/\\|"
# Phoneme tokens that belong to no word: word gaps, punctuation kept by piper, BOS/EOS.
_NON_WORD_PHONEMES = frozenset(" .,;:!?\u2026\u2014\u2013-\"'()^$_")


@dataclass(frozen=True)
class WordTiming:
    """One spoken word."""

    word: str
    char_start: int
    """Offset of the word's first character in the whole reply text."""
    char_end: int
    """Offset one past its last character (trailing punctuation excluded)."""
    start_sample: int
    """First sample of the word, relative to the start of its :class:`TTSChunk`."""
    end_sample: int
    """One past the word's last sample, relative to the start of its chunk."""


@dataclass(frozen=True)
class TTSChunk:
    """Synthesized audio for one span of a reply (usually a sentence or clause)."""

    turn_id: int
    pcm: npt.NDArray[np.int16] = field(repr=False)
    """Mono int16 samples."""
    sample_rate: int
    """Hz."""
    text: str
    """The text this chunk speaks (``reply[char_start:char_end]``)."""
    char_start: int
    """Offset of ``text`` in the whole reply."""
    char_end: int
    words: tuple[WordTiming, ...] = ()
    start_sample: int = 0
    """Where this chunk starts in the reply's audio (samples at ``sample_rate``)."""
    token_start: int | None = None
    """First generated-token index whose text falls in this chunk, when known."""
    token_end: int | None = None
    """One past the last generated-token index of this chunk, when known."""
    word_index: int = 0
    """Index of this chunk's first word among all words of the reply."""

    @property
    def num_samples(self) -> int:
        return int(self.pcm.shape[0])

    @property
    def end_sample(self) -> int:
        """One past this chunk's last sample in the reply's audio."""
        return self.start_sample + self.num_samples

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self.num_samples / self.sample_rate


@dataclass(frozen=True)
class HeardPosition:
    """How much of a reply the listener heard."""

    char_offset: int
    """Offset in the reply text up to which everything was spoken."""
    last_word_index: int
    """Index (over the whole reply) of the last fully spoken word; -1 if none."""
    word_count: int
    """Number of fully spoken words (``last_word_index + 1``)."""
    text: str
    """The heard text (``reply[:char_offset]``)."""
    token_end: int | None = None
    """Generated tokens fully covered by the heard chunks, when chunks carry tokens."""


@dataclass(frozen=True)
class TextWord:
    """A word in a piece of text, with offsets into that text."""

    word: str
    char_start: int
    char_end: int


def split_words(text: str) -> list[TextWord]:
    """Whitespace tokens with edge punctuation stripped; tokens with nothing left are skipped."""
    words: list[TextWord] = []
    for m in re.finditer(r"\S+", text):
        tok = m.group()
        lead = len(tok) - len(tok.lstrip(_EDGE_PUNCT))
        core = tok.strip(_EDGE_PUNCT)
        if not core or not any(ch.isalnum() for ch in core):
            continue
        start = m.start() + lead
        words.append(TextWord(core, start, start + len(core)))
    return words


def _is_word_phoneme(ph: str) -> bool:
    return bool(ph) and not all(ch in _NON_WORD_PHONEMES or unicodedata.category(ch).startswith("P") for ch in ph)


def align_words(
    words: Sequence[TextWord],
    word_phonemes: Sequence[Sequence[str]],
    phonemes: Sequence[str],
    phoneme_samples: Sequence[int],
    char_offset: int = 0,
) -> tuple[WordTiming, ...]:
    """Give each word a sample span from sentence-level phoneme alignments.

    ``word_phonemes[i]`` is the phonemization of ``words[i]`` on its own; ``phonemes``
    and ``phoneme_samples`` are what the voice actually spoke (one sample count per
    phoneme, summing to the audio length). Word char offsets are shifted by
    ``char_offset``. Spans are monotonic and never overlap; a word with no phonemes
    of its own gets an empty span where it would have been.
    """
    if len(word_phonemes) != len(words):
        raise ValueError("word_phonemes must have one entry per word")
    if len(phonemes) != len(phoneme_samples):
        raise ValueError("phonemes and phoneme_samples must have the same length")
    bounds = np.concatenate([[0], np.cumsum(np.asarray(phoneme_samples, dtype=np.int64))])
    # Reference sequence: per-word phonemes, each labelled with its word.
    ref: list[str] = []
    ref_word: list[int] = []
    for i, phs in enumerate(word_phonemes):
        for ph in phs:
            if _is_word_phoneme(ph):
                ref.append(ph)
                ref_word.append(i)
    hyp_idx = [j for j, ph in enumerate(phonemes) if _is_word_phoneme(ph)]
    hyp = [phonemes[j] for j in hyp_idx]
    if not words:
        return ()
    if not ref or not hyp:
        return estimate_words(words, int(bounds[-1]), char_offset)
    label = _label_hypothesis(ref, ref_word, hyp)
    first = [-1] * len(words)
    last = [-1] * len(words)
    for k, w in enumerate(label):
        if first[w] < 0:
            first[w] = k
        last[w] = k
    out: list[WordTiming] = []
    prev_end = int(bounds[hyp_idx[0]])
    for i, tw in enumerate(words):
        if first[i] < 0:
            start = end = prev_end
        else:
            start = max(prev_end, int(bounds[hyp_idx[first[i]]]))
            end = max(start, int(bounds[hyp_idx[last[i]] + 1]))
        out.append(WordTiming(tw.word, tw.char_start + char_offset, tw.char_end + char_offset, start, end))
        prev_end = end
    return tuple(out)


def _label_hypothesis(ref: list[str], ref_word: list[int], hyp: list[str]) -> list[int]:
    """Word label for each hypothesis phoneme via a SequenceMatcher alignment."""
    matcher = difflib.SequenceMatcher(None, ref, hyp, autojunk=False)
    ref_of: list[float | None] = [None] * len(hyp)
    for block in matcher.get_matching_blocks():
        for d in range(block.size):
            ref_of[block.b + d] = float(block.a + d)
    # Interpolate unmatched runs between their matched neighbours.
    anchors = [(j, r) for j, r in enumerate(ref_of) if r is not None]
    if not anchors:
        anchors = [(0, 0.0), (len(hyp) - 1, float(len(ref) - 1))]
    labels: list[int] = []
    ai = 0
    for j in range(len(hyp)):
        while ai + 1 < len(anchors) and anchors[ai + 1][0] <= j:
            ai += 1
        j0, r0 = anchors[ai]
        if j == j0:
            r = r0
        elif j < j0:  # before the first anchor
            r = max(0.0, r0 - (j0 - j))
        elif ai + 1 < len(anchors):
            j1, r1 = anchors[ai + 1]
            r = r0 + (j - j0) * (r1 - r0) / (j1 - j0)
        else:  # after the last anchor
            r = min(float(len(ref) - 1), r0 + (j - j0))
        labels.append(ref_word[int(round(min(max(r, 0.0), len(ref) - 1)))])
    # Labels must be non-decreasing along time.
    for j in range(1, len(labels)):
        labels[j] = max(labels[j], labels[j - 1])
    return labels


def estimate_words(words: Sequence[TextWord], total_samples: int, char_offset: int = 0) -> tuple[WordTiming, ...]:
    """Fallback when a voice gives no alignments: spans proportional to word length."""
    weights = np.array([max(1, len(w.word)) + 1 for w in words], dtype=np.float64)
    if not len(weights):
        return ()
    edges = np.round(np.concatenate([[0.0], np.cumsum(weights)]) / weights.sum() * total_samples).astype(np.int64)
    return tuple(
        WordTiming(w.word, w.char_start + char_offset, w.char_end + char_offset, int(edges[i]), int(edges[i + 1]))
        for i, w in enumerate(words)
    )


def heard_position(chunks: Sequence[TTSChunk], played_samples: int) -> HeardPosition:
    """The last fully spoken word after ``played_samples`` of the reply were played.

    ``chunks`` are the reply's chunks in playback order; ``played_samples`` counts
    samples (at the chunks' rate) played from the start of the first chunk. A word
    counts as heard only once its last sample was played. A chunk played to its end
    counts as heard through its trailing punctuation.
    """
    played = max(0, int(played_samples))
    char_offset = chunks[0].char_start if chunks else 0
    last_word = -1
    token_end: int | None = None
    pos = 0
    for chunk in chunks:
        if played >= pos + chunk.num_samples:
            char_offset = chunk.char_end
            last_word = chunk.word_index + len(chunk.words) - 1 if chunk.words else last_word
            token_end = chunk.token_end if chunk.token_end is not None else token_end
            pos += chunk.num_samples
            continue
        local = played - pos
        for k, w in enumerate(chunk.words):
            if w.end_sample > local:
                break
            char_offset = w.char_end
            last_word = chunk.word_index + k
        break
    text = _reply_text(chunks)
    base = chunks[0].char_start if chunks else 0
    return HeardPosition(char_offset, last_word, last_word + 1, text[: max(0, char_offset - base)], token_end)


def words_between(chunks: Sequence[TTSChunk], start_sample: int, end_sample: int) -> list[str]:
    """The words (as spoken, in order) whose audio overlaps reply samples
    ``[start_sample, end_sample)`` (the chunks' rate, from the start of the reply)."""
    out: list[str] = []
    for chunk in chunks:
        if chunk.end_sample <= start_sample or chunk.start_sample >= end_sample:
            continue
        for w in chunk.words:
            if (chunk.start_sample + w.end_sample > start_sample
                    and chunk.start_sample + w.start_sample < end_sample):
                out.append(w.word)
    return out


def _reply_text(chunks: Sequence[TTSChunk]) -> str:
    """The reply text rebuilt from chunk spans (gaps between spans become spaces)."""
    if not chunks:
        return ""
    parts: list[str] = []
    pos = chunks[0].char_start
    for c in chunks:
        if c.char_start > pos:
            parts.append(" " * (c.char_start - pos))
        parts.append(c.text)
        pos = c.char_end
    return "".join(parts)


def resume_sample(chunks: Sequence[TTSChunk], heard_samples: int) -> int:
    """Where a reply paused after ``heard_samples`` (reply samples) plays on: the start
    of the word it stopped in, so the listener hears that word whole; between words,
    right where it stopped."""
    for chunk in chunks:
        if chunk.start_sample <= heard_samples < chunk.end_sample:
            for w in chunk.words:
                start, end = chunk.start_sample + w.start_sample, chunk.start_sample + w.end_sample
                if start <= heard_samples < end:
                    return start
            break
    return max(0, heard_samples)
