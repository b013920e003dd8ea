"""A reply's voice: streaming text in, TTS chunks with reply-relative offsets out.

Like :class:`audio.tts.StreamingTTS` (the same :class:`~audio.clauses.ClauseChunker`
rule and the same :class:`~audio.word_timing.TTSChunk` offsets), plus one thing the
live loop needs: a chunk synthesised earlier for a speculative draft can be handed in
and is used, re-stamped, when the live reply cuts the very same clause -- so a
speculation hit can start playing without waiting for synthesis.

Synchronous; run it off the event loop (the TTS worker thread).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from audio.clauses import Clause, ClauseChunker
from audio.tts import SpanSynthesizer
from audio.word_timing import TTSChunk

__all__ = ["ReplyVoice", "ReplyChunker", "ClauseRule", "DEFAULT_CLAUSES", "premade_clause",
           "close_seam", "AdoptsPremade"]


@dataclass(frozen=True)
class ClauseRule:
    """Where a reply's text is cut for synthesis (``config.yaml``'s ``tts:``)."""

    min_chars: int = 12
    """A comma, semicolon, colon or dash ends a clause once it has this many characters
    (a sentence end always does)."""
    first_max_chars: int = 16
    """The first clause is cut at a space once it passes this many characters (three or
    four words): the first audio waits for its generation and its synthesis, both about
    proportional to its length (real-time replays of bench/bench_loop.py's conversation:
    32 against 60 took ~100 ms off the voice-to-voice median, 16 against 32 another
    ~110 ms, with no reply's playback running dry behind it). Later clauses keep
    whole-sentence prosody."""
    max_chars: int = 240
    """Later clauses are cut at a space once they pass this many characters."""

    def __post_init__(self) -> None:
        if self.min_chars < 0 or self.first_max_chars < 1 or self.max_chars < 1:
            raise ValueError(f"bad clause rule {self}")


DEFAULT_CLAUSES = ClauseRule()


class ReplyChunker:
    """:class:`~audio.clauses.ClauseChunker` with a shorter limit for the first clause.

    The same rule is used for a speculative draft and for the live reply, so a clause
    pre-synthesised for a draft is the very clause the live reply cuts. Until the first
    clause is out, text is fed one character at a time (the cut is then made at the
    earliest point the rule allows, exactly where a whole-delta feed would cut), and the
    normal limit applies from the next clause on.
    """

    def __init__(self, rule: ClauseRule = DEFAULT_CLAUSES) -> None:
        self._max = rule.max_chars
        self._inner = ClauseChunker(rule.min_chars, min(rule.max_chars, rule.first_max_chars))
        self._first_done = False

    @property
    def text(self) -> str:
        return self._inner.text

    @property
    def pending(self) -> str:
        return self._inner.pending

    def feed(self, delta: str) -> list[Clause]:
        if self._first_done:
            return self._inner.feed(delta)
        for i, ch in enumerate(delta):
            out = self._inner.feed(ch)
            if out:
                self._first_done = True
                self._inner.max_clause_chars = max(self._max, self._inner.min_clause_chars + 1)
                return out + self._inner.feed(delta[i + 1:])
        return []

    def flush(self) -> list[Clause]:
        return self._inner.flush()


SEAM_TAIL_MS = 30
"""Audio kept after the last word of a clause cut mid-phrase (see :func:`close_seam`)."""


def close_seam(chunk: TTSChunk) -> TTSChunk:
    """A clause cut at a space, mid-phrase, without the silence the voice ends every
    utterance with (Piper: 130-200 ms, plus 40-60 ms before the next one's first word):
    the next clause then follows as within one sentence, not after a pause."""
    if not chunk.words:
        return chunk
    end = chunk.words[-1].end_sample + chunk.sample_rate * SEAM_TAIL_MS // 1000
    if end >= chunk.num_samples:
        return chunk
    return dataclasses.replace(chunk, pcm=chunk.pcm[:end])


@runtime_checkable
class AdoptsPremade(Protocol):
    """A synthesizer that must see the pre-synthesised clauses a reply speaks (the
    daemon's recorder: it keeps each turn's chunks, and speaks text-only turns silently)."""

    def adopt(self, chunk: TTSChunk) -> TTSChunk | None:
        """``chunk``, made ahead and now the reply's: what the reply speaks instead."""
        ...


def premade_clause(text: str, rule: ClauseRule = DEFAULT_CLAUSES) -> Clause | None:
    """The first clause the reply chunker cuts from a reply starting with ``text``."""
    chunker = ReplyChunker(rule)
    clauses = chunker.feed(text)
    return clauses[0] if clauses else None


class ReplyVoice:
    """Synthesise one reply clause by clause (see the module docstring)."""

    def __init__(self, synthesizer: SpanSynthesizer, turn_id: int, *,
                 clauses: ClauseRule = DEFAULT_CLAUSES,
                 premade: Sequence[TTSChunk] = (),
                 adopt: Callable[[TTSChunk], TTSChunk | None] | None = None) -> None:
        """``premade``: clauses synthesised ahead (a speculation's), spoken where the
        reply cuts the same clause at the same place; ``adopt`` sees each one taken (as
        this turn's chunk) and returns what to speak (see :class:`AdoptsPremade`)."""
        self.synthesizer = synthesizer
        self.turn_id = turn_id
        self._chunker = ReplyChunker(clauses)
        self._premade = {(c.char_start, c.text): c for c in premade}
        self._adopt = adopt
        self._chunks: list[TTSChunk] = []
        self._next_sample = 0
        self._next_word = 0
        self._cancelled = False
        self.reused = 0
        """Chunks taken from the premade ones."""

    @property
    def chunks(self) -> tuple[TTSChunk, ...]:
        return tuple(self._chunks)

    @property
    def text(self) -> str:
        return self._chunker.text

    @property
    def total_samples(self) -> int:
        return self._next_sample

    def cancel(self) -> None:
        """Later feeds produce nothing. Idempotent."""
        self._cancelled = True

    def feed(self, delta: str) -> list[TTSChunk]:
        if self._cancelled:
            return []
        return self._speak(self._chunker.feed(delta))

    def finish(self) -> list[TTSChunk]:
        if self._cancelled:
            return []
        return self._speak(self._chunker.flush())

    def _speak(self, clauses: list[Clause]) -> list[TTSChunk]:
        out: list[TTSChunk] = []
        for clause in clauses:
            if self._cancelled:
                break
            made = self._premade.pop((clause.char_start, clause.text), None)
            if made is not None:
                self.reused += 1
                chunk: TTSChunk | None = dataclasses.replace(
                    made, turn_id=self.turn_id, start_sample=self._next_sample,
                    word_index=self._next_word)
                if self._adopt is not None and chunk is not None:
                    chunk = self._adopt(chunk)
            else:
                chunk = self.synthesizer.synthesize_span(
                    clause.text, turn_id=self.turn_id, char_start=clause.char_start,
                    start_sample=self._next_sample, word_index=self._next_word)
            if chunk is None:
                continue
            if not clause.sentence_end and clause.text.rstrip()[-1:].isalnum():
                chunk = close_seam(chunk)
            self._next_sample = chunk.end_sample
            self._next_word += len(chunk.words)
            self._chunks.append(chunk)
            out.append(chunk)
        return out
