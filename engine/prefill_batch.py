"""Several sequences' prefill chunks in one forward: which may share it, and running it.

Short prompts gain most from sharing a forward: the projections run once over all their
rows (`ModelRunner.prefill_many`; on a CPU with the dense bfloat16 copy, from 16 rows on,
one call of 91 rows cost 68-80 ms where 8 calls of 10-15 rows cost ~17 ms each). What a
shared forward must not lose is prefix reuse: a sequence computes only what the cache does
not hold, and K/V written in this forward is not in the cache until it ends. So a chunk
that could reference a full page another chunk of the forward writes, or copy
`SHARE_MIN` tokens or more of a page it starts, waits for the next forward (`ForwardPlan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from engine.page_cache import PageCache
    from engine.runner import ModelRunner
    from engine.sequence import Sequence

__all__ = ["SHARE_MIN", "ForwardPlan", "extend_together", "prefill_together"]

SHARE_MIN = 16
"""Tokens a chunk could copy from a page another chunk of the forward starts, from which it
waits a forward to copy them rather than compute them again: fewer are not worth a step."""


class ForwardPlan:
    """The chunks gathered for one forward: at most `PageCache.prefill_chunk` tokens in all,
    and no more new pages than the pool can give."""

    def __init__(self, cache: PageCache) -> None:
        self.tokens_left = cache.prefill_chunk
        self._pool = cache.pool
        self._reserved = 0  # pages the chunks taken will allocate
        self._filling: set[bytes] = set()  # keys of the full pages they write
        self._starts: list[tuple[bytes, list[int]]] = []  # (parent key, tokens) of 1st pages

    def would_reuse(self, seq: Sequence, ids: list[int]) -> bool:
        """Whether appending `ids` to `seq` could take a full page, or `SHARE_MIN` tokens
        or more of a page, from what the chunks taken write."""
        if not ids or not self._starts:
            return False
        if self._filling.intersection(seq.pages_filled_by(ids)):
            return True
        return any(key == parent and _common(other, page) - held >= SHARE_MIN
                   for parent, page, held in seq.pages_ahead(ids)
                   for key, other in self._starts)

    def fits(self, seq: Sequence, ids: list[int]) -> bool:
        """Whether the pool can also give the pages that writing `ids` takes."""
        return self._reserved + seq.pages_needed(len(ids)) <= self._pool.available()

    def take(self, seq: Sequence, ids: list[int]) -> None:
        """Count `seq`'s chunk `ids` in (call before the forward writes it)."""
        self.tokens_left -= len(ids)
        self._reserved += seq.pages_needed(len(ids))
        if ids:
            self._filling.update(seq.pages_filled_by(ids))
            parent, page, _ = seq.pages_ahead(ids)[0]
            self._starts.append((parent, page))


def prefill_together(runner: ModelRunner, chunks: list[tuple[Sequence, list[int]]]
                     ) -> torch.Tensor:
    """Write the chunks' K/V in one `runner.prefill_many` and record them in their
    sequences (each chunk as `Sequence.reuse_step` returned it); returns their
    next-token logits. On failure, no sequence keeps pages for its chunk."""
    prepared: list[Sequence] = []
    try:
        items = []
        for seq, ids in chunks:
            items.append(seq.prefill_item(ids))
            prepared.append(seq)
        logits = runner.prefill_many(items)
    except BaseException:
        for seq in prepared:
            seq.rollback_pages()
        raise
    for row, (seq, ids) in enumerate(chunks):
        seq.commit_prefilled(ids, logits[row])
    return logits


def extend_together(cache: PageCache, work: list[tuple[Sequence, list[int]]]) -> None:
    """`Sequence.extend` each (sequence, ids), the computed tokens of every round in one
    forward (the ids are short, a turn's closing tokens: no chunk waits for another)."""
    while work:
        chunks: list[tuple[Sequence, list[int]]] = []
        rest: list[tuple[Sequence, list[int]]] = []
        for seq, ids in work:
            reused, todo = seq.reuse_step(ids, max_compute=cache.prefill_chunk)
            if todo:
                chunks.append((seq, todo))
            left = ids[reused.total + len(todo):]
            if left:
                rest.append((seq, left))
        if chunks:
            prefill_together(cache.runner, chunks)
        work = rest


def _common(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of `a` and `b`."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count
