"""Cut streaming reply text into clauses that are ready to synthesise.

An LLM emits text a few characters at a time; TTS wants whole phrases, because a
voice phonemizes and shapes prosody per sentence and first audio should come as soon
as a sensible phrase is complete. :class:`ClauseChunker` takes text deltas and emits
:class:`Clause` spans: always at a sentence end, at a comma/semicolon/colon/dash once
the clause has at least ``min_clause_chars`` characters, and at a space once it passes
``max_clause_chars``. A terminator counts only when the character after it has arrived
and is whitespace, so "3.5" and "e.g." never split mid-token. Spans are contiguous and
cover the whole text, so offsets map straight back to the reply.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Clause", "ClauseChunker", "split_sentences"]

_SENTENCE_END = ".!?\u2026"
_CLAUSE_END = ",;:\u2014\u2013"
_CLOSERS = "\"')]}\u201d\u2019\u00bb"
# Titles and Latin abbreviations that end in "." but rarely end a sentence.
_ABBREVIATIONS = frozenset(["mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "e.g", "i.e"])


@dataclass(frozen=True)
class Clause:
    """A span of the reply text to synthesise as one piece."""

    text: str
    """``reply[char_start:char_end]`` (may carry leading whitespace)."""
    char_start: int
    char_end: int
    sentence_end: bool
    """True when the clause closes a sentence (or the reply)."""


class ClauseChunker:
    """Accumulates text deltas and emits clauses (pure, synchronous)."""

    def __init__(self, min_clause_chars: int = 12, max_clause_chars: int = 240, split_clauses: bool = True) -> None:
        if min_clause_chars < 0 or max_clause_chars < 1:
            raise ValueError("min_clause_chars must be >= 0 and max_clause_chars >= 1")
        self.min_clause_chars = min_clause_chars
        self.max_clause_chars = max(max_clause_chars, min_clause_chars + 1)
        self.split_clauses = split_clauses
        self._text: list[str] = []
        self._buf = ""  # text not yet emitted
        self._buf_start = 0  # offset of _buf in the whole text
        self._flushed = False

    @property
    def text(self) -> str:
        """Everything fed so far."""
        return "".join(self._text)

    @property
    def pending(self) -> str:
        """Text fed but not yet emitted."""
        return self._buf

    def feed(self, delta: str) -> list[Clause]:
        """Add a text delta; return the clauses it completed (possibly none)."""
        if self._flushed:
            raise RuntimeError("ClauseChunker.feed() after flush()")
        if not delta:
            return []
        self._text.append(delta)
        self._buf += delta
        out: list[Clause] = []
        while True:
            cut = self._find_cut(self._buf)
            if cut is None:
                return out
            out.append(self._emit(cut, sentence_end=cut[1]))

    def flush(self) -> list[Clause]:
        """End of text: emit whatever is pending (if it has anything speakable)."""
        if self._flushed:
            return []
        self._flushed = True
        if not self._buf:
            return []
        return [self._emit((len(self._buf), True), sentence_end=True)]

    # -- internals -------------------------------------------------------------------
    def _emit(self, cut: tuple[int, bool], sentence_end: bool) -> Clause:
        end = cut[0]
        piece = self._buf[:end]
        clause = Clause(piece, self._buf_start, self._buf_start + end, sentence_end)
        self._buf = self._buf[end:]
        self._buf_start += end
        return clause

    def _find_cut(self, buf: str) -> tuple[int, bool] | None:
        """(end offset, is sentence end) of the first complete clause in ``buf``."""
        n = len(buf)
        lead = n - len(buf.lstrip())  # leading blanks do not count towards the length
        i = 0
        while i < n:
            ch = buf[i]
            if ch == "\n" and _speakable(buf[:i]):
                return _after_space(buf, i), True
            if ch in _SENTENCE_END or (self.split_clauses and ch in _CLAUSE_END):
                j = i + 1
                while j < n and (buf[j] in _SENTENCE_END or buf[j] in _CLOSERS):
                    j += 1
                if j >= n:
                    return None  # need the next character to decide
                if buf[j].isspace() and _speakable(buf[:j]):
                    is_sentence = any(c in _SENTENCE_END for c in buf[i:j])
                    if is_sentence and not _is_abbreviation(buf[:i]):
                        return _after_space(buf, j), True
                    if not is_sentence and len(buf[:j].strip()) >= self.min_clause_chars:
                        return _after_space(buf, j), False
                i = j
                continue
            if i - lead >= self.max_clause_chars and ch.isspace() and _speakable(buf[:i]):
                return _after_space(buf, i), False
            i += 1
        return None


def _speakable(text: str) -> bool:
    return any(c.isalnum() for c in text)


def _after_space(buf: str, i: int) -> int:
    while i < len(buf) and buf[i].isspace():
        i += 1
    return i


def _is_abbreviation(before: str) -> bool:
    words = before.split()
    if not words:
        return False
    last = words[-1].lower().lstrip("\"'([{")
    return last in _ABBREVIATIONS


def split_sentences(text: str, max_clause_chars: int = 400) -> list[Clause]:
    """Split a complete text into sentence clauses (no comma splits)."""
    chunker = ClauseChunker(min_clause_chars=0, max_clause_chars=max_clause_chars, split_clauses=False)
    return chunker.feed(text) + chunker.flush()
