"""Degenerate repetition: a reply that says the same few tokens over and over.

A small model after an odd context ("Mr. Mr. Mr. ...") can repeat one n-gram until
``max_new_tokens`` -- tens of seconds of speech. :func:`repeated_tail` finds a tail of
generated ids made of one n-gram (1..``max_ngram`` tokens) repeated at least
``min_repeats`` times in a row, and the dialogue then stops the reply there. The
sampler's repetition penalty makes such loops rarer; this guard makes them short.
Pure function on token ids, table-tested.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LoopGuardOptions", "Repetition", "repeated_tail"]


@dataclass(frozen=True)
class LoopGuardOptions:
    min_repeats: int = 4
    """Consecutive copies of one n-gram that count as a loop (0: guard off)."""
    max_ngram: int = 8
    """Longest n-gram (in tokens) looked for."""


@dataclass(frozen=True)
class Repetition:
    ngram: tuple[int, ...]
    repeats: int
    """Consecutive copies at the end of the ids."""
    start: int
    """Index where the repeated run begins (the first copy)."""


def repeated_tail(ids: Sequence[int], options: LoopGuardOptions) -> Repetition | None:
    """The shortest n-gram repeated ``min_repeats`` or more times at the end of ``ids``."""
    if options.min_repeats <= 1:
        return None
    n_ids = len(ids)
    for n in range(1, options.max_ngram + 1):
        if n * options.min_repeats > n_ids:
            break
        ngram = tuple(ids[n_ids - n:])
        repeats, end = 1, n_ids - n
        while end - n >= 0 and tuple(ids[end - n:end]) == ngram:
            repeats += 1
            end -= n
        if repeats >= options.min_repeats:
            return Repetition(ngram, repeats, end)
    return None
