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
from collections.abc import Sequence

from audio.clauses import Clause, ClauseChunker
from audio.tts import SpanSynthesizer
from audio.word_timing import TTSChunk

__all__ = ["ReplyVoice", "ReplyChunker", "premade_clause", "FIRST_CLAUSE_MAX_CHARS"]

FIRST_CLAUSE_MAX_CHARS = 60
"""The first clause of a reply is cut at a space once it passes this many characters
(about a dozen words), so its synthesis -- the first audio -- starts sooner; later clauses
use the normal limit and keep whole-sentence prosody."""


class ReplyChunker:
    """:class:`~audio.clauses.ClauseChunker` with a shorter limit for the first clause.

    The same rule is used for a speculative draft and for the live reply, so a clause
    pre-synthesised for a draft is the very clause the live reply cuts. Until the first
    clause is out, text is fed one character at a time (the cut is then made at the
    earliest point the rule allows, exactly where a whole-delta feed would cut), and the
    normal limit applies from the next clause on.
    """

    def __init__(self, min_clause_chars: int = 12, max_clause_chars: int = 240, *,
                 first_max_chars: int = FIRST_CLAUSE_MAX_CHARS) -> None:
        self._max = max_clause_chars
        self._inner = ClauseChunker(min_clause_chars, min(max_clause_chars, first_max_chars))
        self._first_done = False

    @property
    def min_clause_chars(self) -> int:
        return self._inner.min_clause_chars

    @min_clause_chars.setter
    def min_clause_chars(self, value: int) -> None:
        self._inner.min_clause_chars = value
        self._inner.max_clause_chars = max(self._inner.max_clause_chars, value + 1)

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


def premade_clause(text: str, min_clause_chars: int) -> Clause | None:
    """The first clause the reply chunker cuts from a reply starting with ``text``."""
    chunker = ReplyChunker(min_clause_chars)
    clauses = chunker.feed(text)
    return clauses[0] if clauses else None


class ReplyVoice:
    """Synthesise one reply clause by clause (see the module docstring)."""

    def __init__(self, synthesizer: SpanSynthesizer, turn_id: int, *,
                 min_clause_chars: int = 12, max_clause_chars: int = 240,
                 premade: Sequence[TTSChunk] = ()) -> None:
        self.synthesizer = synthesizer
        self.turn_id = turn_id
        self._chunker = ReplyChunker(min_clause_chars, max_clause_chars)
        self._premade = {(c.char_start, c.text): c for c in premade}
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
            else:
                chunk = self.synthesizer.synthesize_span(
                    clause.text, turn_id=self.turn_id, char_start=clause.char_start,
                    start_sample=self._next_sample, word_index=self._next_word)
            if chunk is None:
                continue
            self._next_sample = chunk.end_sample
            self._next_word += len(chunk.words)
            self._chunks.append(chunk)
            out.append(chunk)
        return out
