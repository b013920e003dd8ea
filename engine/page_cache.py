"""The state every sequence shares: block pool, runner, live sequences and counters."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from engine.block_pool import BlockPool
from engine.errors import EngineInvariantError
from engine.events import EngineStats, PrefillStats

if TYPE_CHECKING:
    from engine.runner import ModelRunner

__all__ = ["CachedSequence", "PageCache"]


class CachedSequence(Protocol):
    """What the cache needs of a live sequence (:class:`engine.sequence.Sequence`)."""

    @property
    def seq_id(self) -> int: ...

    @property
    def page_table(self) -> tuple[int, ...]: ...

    def check_problems(self) -> list[str]: ...


S = TypeVar("S", bound=CachedSequence)


class PageCache(Generic[S]):
    """Owns the block pool for one runner and knows every live sequence (of type ``S``)."""

    def __init__(self, runner: ModelRunner, *, prefill_chunk: int = 512) -> None:
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {prefill_chunk}")
        self.runner = runner
        self.page_size = runner.page_size
        self.prefill_chunk = prefill_chunk
        self.pool = BlockPool(runner.num_pages, runner.page_size)
        self.tokens_computed = 0
        self.tokens_referenced = 0
        self.tokens_copied = 0
        self.tokens_decoded = 0
        self._sequences: dict[int, S] = {}
        self._next_id = 0

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def add(self, seq: S) -> None:
        self._sequences[seq.seq_id] = seq

    def discard(self, seq: S) -> None:
        self._sequences.pop(seq.seq_id, None)

    def sequences(self) -> Iterator[S]:
        return iter(tuple(self._sequences.values()))

    def count_prefill(self, stats: PrefillStats) -> None:
        self.tokens_computed += stats.computed
        self.tokens_referenced += stats.referenced
        self.tokens_copied += stats.copied

    def stats(self) -> EngineStats:
        pool = self.pool
        return EngineStats(
            page_size=self.page_size, pages_total=pool.num_pages, pages_used=pool.pages_used,
            pages_free=pool.pages_free, pages_cached=pool.pages_cached,
            pages_shared=pool.pages_shared, tokens_computed=self.tokens_computed,
            tokens_referenced=self.tokens_referenced, tokens_copied=self.tokens_copied,
            tokens_decoded=self.tokens_decoded, pages_evicted=pool.pages_evicted,
            sequences=len(self._sequences))

    def check(self) -> None:
        """Raise `EngineInvariantError` listing every inconsistency found."""
        references: Counter[int] = Counter()
        problems: list[str] = []
        for seq in self._sequences.values():
            references.update(seq.page_table)
            problems.extend(seq.check_problems())
        problems.extend(self.pool.check(references))
        if problems:
            shown = "; ".join(problems[:8])
            more = f" (+{len(problems) - 8} more)" if len(problems) > 8 else ""
            raise EngineInvariantError(f"cache invariants violated: {shown}{more}")
