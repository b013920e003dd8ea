"""Incremental detokenization by prefix diff.

Decoding token by token breaks multi-byte characters split across tokens and merges that
depend on neighbours; instead each step decodes a short window ending at the new token and
emits what it adds to the window's previous text, holding back while the text ends in an
incomplete character (U+FFFD). After vLLM's and text-generation-inference's detokenizers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["IncrementalDetokenizer", "TokenizerLike"]

_REPLACEMENT = "\ufffd"


class TokenizerLike(Protocol):
    """The part of a transformers tokenizer the engine uses."""

    def decode(self, token_ids: list[int]) -> Any: ...
    """A string (transformers types it ``str | list[str]``)."""

    def encode(self, text: str, *, add_special_tokens: bool = ...) -> list[int]: ...


class IncrementalDetokenizer:
    """Turns generated ids into text deltas whose concatenation is the decoded text.

    `context` is a few ids before the first generated one (e.g. the prompt's tail), so the
    first token decodes as it would in context (leading spaces of SentencePiece models).
    """

    def __init__(self, tokenizer: TokenizerLike, context: Sequence[int] = ()) -> None:
        self._tokenizer = tokenizer
        self._context = list(context)
        self._ids = list(context)
        self._prefix = 0  # window start
        self._read = len(self._ids)  # ids up to here are already in `text`
        self.text = ""
        """All text confirmed so far."""

    @property
    def generated(self) -> list[int]:
        return self._ids[len(self._context):]

    def push(self, token_id: int) -> str:
        """Add one id; returns the newly confirmed text (may be empty)."""
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        if len(after) > len(before) and not after.endswith(_REPLACEMENT):
            delta = after[len(before):]
            self._prefix = self._read
            self._read = len(self._ids)
            self.text += delta
            return delta
        return ""

    def flush(self) -> str:
        """Confirm whatever is pending (an incomplete character decodes as U+FFFD)."""
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        delta = after[len(before):] if len(after) > len(before) else ""
        self.text += delta
        return delta

    def _decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids))

    def text_of_first(self, n_tokens: int) -> str:
        """The text of the first `n_tokens` generated ids, decoded in context."""
        context_text = self._decode(self._context) if self._context else ""
        text = self._decode(self._context + self.generated[:n_tokens])
        return text[len(context_text):]
