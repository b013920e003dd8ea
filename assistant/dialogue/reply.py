"""A reply's generated token ids and the text span each one produced.

Barge-in keeps the generated tokens that were *fully heard*. The heard position comes
from TTS word timings as a character offset in the reply text; this module maps it to
a count of leading generated tokens using the text each token released while it was
generated -- never by re-tokenising the clipped text, which could give other ids.

A token whose text was held back by the engine (a possible stop string, incomplete
UTF-8) released nothing; its text arrives with a later token. Such a token is counted
as ending where that later text ends, so a cut never keeps a token whose text was not
heard.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReplyTokens", "Cut"]


@dataclass(frozen=True)
class Cut:
    """Where to cut a reply."""

    n_tokens: int
    """Leading generated tokens to keep."""
    text: str
    """Their text (the reply text up to ``char_end``)."""
    char_end: int
    """Offset in the reply text where the kept tokens' text ends."""


class ReplyTokens:
    """Generated ids in order, with the cumulative text they released."""

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._ends: list[int] = []  # text length after each token's delta
        self._parts: list[str] = []
        self._length = 0

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(self._ids)

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, token_id: int, text_delta: str) -> None:
        self._ids.append(int(token_id))
        self._parts.append(text_delta)
        self._length += len(text_delta)
        self._ends.append(self._length)

    def add_text(self, text_delta: str) -> None:
        """Text released without a new token (e.g. held-back text flushed at the end)."""
        if not text_delta:
            return
        self._parts.append(text_delta)
        self._length += len(text_delta)
        if self._ends:
            self._ends[-1] = self._length

    def truncate(self, n_tokens: int) -> None:
        """Keep the first ``n_tokens`` tokens and the text they released."""
        n = max(0, min(n_tokens, len(self._ids)))
        text = self.text_of(n)
        del self._ids[n:]
        del self._ends[n:]
        self._parts = [text]
        self._length = len(text)

    def reset_to(self, ids: tuple[int, ...], text: str) -> None:
        """Replace the tokens by ``ids`` spelling ``text`` (after a stop string re-encoded
        the tail): tokens shared with the current ids keep their spans, the others share
        the remaining text, attributed to the last of them."""
        same = 0
        while same < min(len(ids), len(self._ids)) and ids[same] == self._ids[same]:
            same += 1
        head = self.text_of(same)
        if not text.startswith(head):
            same, head = 0, ""
        self.truncate(same)
        for i, t in enumerate(ids[same:], start=same):
            self.add(t, text[len(head):] if i == len(ids) - 1 else "")
        if len(ids) == same:
            self.add_text(text[len(head):])

    def cut_at(self, char_offset: int) -> Cut:
        """Keep the longest run of leading tokens whose text ends at or before ``char_offset``."""
        keep = 0
        end = 0
        # A token's effective end: the end of the first non-empty delta at or after it.
        effective: list[int] = [0] * len(self._ids)
        nxt = None
        for i in range(len(self._ids) - 1, -1, -1):
            start = self._ends[i - 1] if i > 0 else 0
            if self._ends[i] > start or nxt is None:
                nxt = self._ends[i]
            effective[i] = nxt
        for i, e in enumerate(effective):
            if e > char_offset:
                break
            keep = i + 1
            end = e
        return Cut(keep, self.text[:end], end)

    def text_of(self, n_tokens: int) -> str:
        """Text released by the first ``n_tokens`` tokens (all of it for all tokens)."""
        if n_tokens <= 0:
            return ""
        if n_tokens >= len(self._ids):
            return self.text
        return self.text[: self._ends[n_tokens - 1]]
