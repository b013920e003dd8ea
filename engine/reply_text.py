"""What a stream of sampled ids means as a reply: its text, and where it ends.

One rule set, used by the local engine's :class:`engine.job.Job` and by the remote
backend's job (ids streamed by a vLLM server), so a conversation's ids are the same on
either:

- a stop id (``stop_token_ids``, and EOS unless ``ignore_eos``) ends the reply and is
  not kept;
- a stop string ends it at the string: the ids spelling the text before it are kept
  (the whole tokens, plus the re-encoded text of a token the string starts inside);
- ``max_new_tokens``, or no room left in the context, ends it with every id kept;
- otherwise the text released is what no stop string can still claim (held back while
  a stop string may be starting).

And how a finished reply closes its turn in the sequence (:func:`closing_cut`).
Pure: no sequence, no engine; the jobs own those.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.detokenize import IncrementalDetokenizer, TokenizerLike
from engine.events import FinishReason
from engine.params import SamplingParams
from engine.prefix_index import common_prefix
from engine.stops import StopMatcher

__all__ = ["ReplyText", "Step", "closing_cut", "CONTEXT_TOKENS"]

CONTEXT_TOKENS = 4
"""Ids before the reply decoded with its first ones (so leading spaces come out right)."""


@dataclass(frozen=True)
class Step:
    """What one sampled id did."""

    delta: str
    """Text released with it."""
    finish: FinishReason | None = None
    """Set when it ended the reply."""
    kept: tuple[int, ...] = ()
    """On a finish: the generated ids the reply keeps."""


class ReplyText:
    """The reply's ids, text and stop rules (see the module docstring)."""

    def __init__(self, params: SamplingParams, tokenizer: TokenizerLike,
                 eos_token_ids: Iterable[int], context_ids: Sequence[int]) -> None:
        self.params = params
        stop_ids = frozenset(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids |= frozenset(eos_token_ids)
        self.stop_ids = stop_ids
        self.generated: list[int] = []
        """Every id taken so far (a stop id included)."""
        self.emitted = 0
        """Characters of the text released so far."""
        self._stops = StopMatcher(params.stop)
        self._tokenizer = tokenizer
        self._detok = IncrementalDetokenizer(tokenizer, list(context_ids)[-CONTEXT_TOKENS:])

    def add(self, token_id: int, *, room_for_next: bool = True) -> Step:
        """Take one sampled id; ``room_for_next`` is False when the context cannot take
        another one and still close the turn (the reply then ends here, as at length)."""
        self.generated.append(token_id)
        if token_id in self.stop_ids:
            return Step(self.rest(), FinishReason.EOS, tuple(self.generated[:-1]))
        self._detok.push(token_id)
        text = self._detok.text
        stop_at = self._stops.find(text, self.emitted)
        if stop_at is not None:
            return Step(text[self.emitted:stop_at], FinishReason.STOP,
                        self._ids_for_text(text[:stop_at]))
        if len(self.generated) >= self.params.max_new_tokens or not room_for_next:
            return Step(self.rest(), FinishReason.LENGTH, tuple(self.generated))
        hold = min(self._stops.holdback(text), len(text) - self.emitted)
        delta = text[self.emitted:len(text) - hold]
        self.emitted += len(delta)
        return Step(delta)

    def rest(self) -> str:
        """Everything not yet released, the detokenizer's held bytes included."""
        return self._detok.text[self.emitted:] + self._detok.flush()

    def end(self, delta: str) -> str:
        """Release the final ``delta``; returns the reply's whole text."""
        self.emitted += len(delta)
        return self._detok.text[:self.emitted]

    def _ids_for_text(self, kept: str) -> tuple[int, ...]:
        """Generated ids spelling exactly ``kept``: the whole tokens before it ends, plus
        the re-encoded text of a token the stop string starts inside."""
        count = len(self.generated) - 1
        while count > 0:
            prefix = self._detok.text_of_first(count)
            if kept.startswith(prefix) and not prefix.endswith("\ufffd"):
                break
            count -= 1
        prefix = self._detok.text_of_first(count) if count else ""
        rest = kept[len(prefix):]
        extra = self._tokenizer.encode(rest, add_special_tokens=False) if rest else []
        return tuple(self.generated[:count]) + tuple(int(t) for t in extra)


def closing_cut(reply_in_seq: Sequence[int], kept: Sequence[int],
                end_of_turn: Sequence[int]) -> tuple[int, list[int]]:
    """How to make a sequence end with prompt + ``kept`` + ``end_of_turn``, given the
    reply ids it holds now: (reply ids to keep, ids to append after them)."""
    same = common_prefix(list(reply_in_seq), list(kept))
    return same, list(kept[same:]) + list(end_of_turn)
