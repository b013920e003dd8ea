"""A sequence: token ids plus the page table holding their K/V, and the model run on them.

The page bookkeeping (which pages hold which tokens, what is referenced, copied or
released) lives in `engine.page_table.PageTable`, pure and tested on integer page ids; a
sequence adds what touches the model: the prefill of what is not cached, the logits after
the last token, the decode items the scheduler batches, and the generation running on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from collections.abc import Sequence as Seq
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from engine.errors import ContextLimitError, EngineError, SequenceReleasedError
from engine.events import PrefillStats, TokenEvent
from engine.page_table import PageTable
from engine.params import Priority, SamplingParams
from engine.runner import DecodeItem, PrefillItem

if TYPE_CHECKING:
    import torch

    from engine.page_cache import PageCache

__all__ = ["Sequence", "SequenceHost"]


class SequenceHost(Protocol):
    """What a sequence needs from its engine beyond the page cache."""

    def generate(self, seq: Sequence, params: SamplingParams, *,
                 prompt_ids: Iterable[int] = ()) -> Iterator[TokenEvent]: ...

    def on_release(self, seq: Sequence) -> None: ...


class _Generation(Protocol):
    @property
    def done(self) -> bool: ...


class Sequence:
    """Create with `Engine.sequence()`. Use as a context manager, or call `release()`.

    While a generation runs on it, `extend`, `truncate` and `close_turn` raise: cancel the
    job (or let it finish) first.
    """

    def __init__(self, cache: PageCache[Sequence], host: SequenceHost, *,
                 priority: Priority = Priority.LIVE) -> None:
        self.seq_id = cache.new_id()
        self.priority = priority
        self._cache = cache
        self._host = host
        self._table = PageTable(cache.pool, cache.runner.copy_slots, self.seq_id)
        self._logits: torch.Tensor | None = None  # next-token logits after the last token
        self._released = False
        self._generation: _Generation | None = None
        cache.add(self)

    # ---- public API ----------------------------------------------------------------

    @property
    def tokens(self) -> tuple[int, ...]:
        """Token ids whose K/V is in the cache, in order."""
        return tuple(self._table.tokens)

    def tail(self, n_tokens: int) -> list[int]:
        """The last ``n_tokens`` ids (fewer if the sequence is shorter)."""
        return self._table.tokens[-n_tokens:] if n_tokens > 0 else []

    @property
    def page_table(self) -> tuple[int, ...]:
        return tuple(self._table.pages)

    @property
    def released(self) -> bool:
        return self._released

    def __len__(self) -> int:
        return len(self._table.tokens)

    def __enter__(self) -> Sequence:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def extend(self, token_ids: Seq[int]) -> PrefillStats:
        """Append tokens, computing only those whose K/V is not already cached: full pages
        are referenced by chained key, a partial run is copied from a page with the same
        parent key, and the rest is prefilled in chunks (stopping at any later page
        boundary from where cached pages can be referenced again)."""
        self._idle()
        ids = self._validated(token_ids)
        self._reserve(len(ids))
        total = PrefillStats(0, 0, 0)
        while total.total < len(ids):
            total += self.extend_step(ids[total.total:], max_compute=self._cache.prefill_chunk)
        return total

    def extend_step(self, token_ids: Seq[int], *, max_compute: int,
                    compute_last: bool = False) -> PrefillStats:
        """One bounded piece of `extend`: reuse what is cached at the front of `token_ids`,
        then prefill at most `max_compute` tokens in one forward. Returns what it added
        (a prefix of `token_ids`). `compute_last` never reuses the last token, so its
        logits come out of the forward."""
        stats, ids = self.reuse_step(token_ids, max_compute=max_compute,
                                     compute_last=compute_last)
        if ids:
            item = self.prefill_item(ids)
            try:
                logits = self._cache.runner.prefill(item.page_table, item.start, ids)
            except BaseException:
                self.rollback_pages()
                raise
            self.commit_prefilled(ids, logits[-1])
            stats += PrefillStats(len(ids), 0, 0)
        return stats

    def reuse_step(self, token_ids: Seq[int], *, max_compute: int,
                   compute_last: bool = False) -> tuple[PrefillStats, list[int]]:
        """The first half of `extend_step`: reuse what is cached at the front of
        `token_ids` (appended now), and return that with the ids to compute next: at most
        `max_compute`, stopping at a later page boundary from where cached pages can be
        referenced again. The second half is `prefill_item`, a forward (alone, or with
        other sequences' items in `ModelRunner.prefill_many`), then `commit_prefilled`."""
        ids = self._validated(token_ids)
        if not ids:
            return PrefillStats(0, 0, 0), []
        self._reserve(len(ids))
        reusable = ids[:-1] if compute_last else ids
        stats = self._table.reuse(reusable) if reusable else PrefillStats(0, 0, 0)
        if stats.referenced or stats.copied:
            self._logits = None
        self._cache.count_prefill(stats)
        rest = ids[stats.total:]
        count = min(max(max_compute, 1), self._table.until_cached_page(rest)) if rest else 0
        return stats, rest[:count]

    def pages_filled_by(self, token_ids: Seq[int]) -> list[bytes]:
        """Chained keys of the full pages that appending `token_ids` would complete."""
        return self._table.pages_filled_by(token_ids)

    def pages_ahead(self, token_ids: Seq[int]) -> list[tuple[bytes, list[int], int]]:
        """The pages that appending `token_ids` writes, from the one the first goes to:
        each one's parent key, the tokens it would hold after, and how many of those it
        holds now (the first page only). Another sequence writing a page with the same
        parent key shares the run their tokens have in common."""
        return self._table.pages_ahead(token_ids)

    def prefill_item(self, token_ids: Seq[int]) -> PrefillItem:
        """Make the positions of `token_ids` writable (copy-on-write, new pages) and
        describe their prefill. Follow with `commit_prefilled`, or `rollback_pages` if the
        forward fails."""
        ids = list(token_ids)
        try:
            self._table.prepare_write(ids)
        except BaseException:
            self.rollback_pages()
            raise
        return PrefillItem(tuple(self._table.pages), len(self._table.tokens), tuple(ids))

    def commit_prefilled(self, token_ids: Seq[int], logits: torch.Tensor) -> None:
        """Record that a forward wrote the K/V of `token_ids` (see `prefill_item`);
        `logits` follow the last of them."""
        ids = list(token_ids)
        self._table.record(ids)
        self._logits = logits
        self._cache.count_prefill(PrefillStats(len(ids), 0, 0))

    def truncate(self, n_tokens: int) -> None:
        """Keep exactly the first `n_tokens`. Pages past the cut are released (they stay
        matchable while cached); a page cut in the middle loses its key, and is copied
        first if another sequence references it."""
        self._idle()
        self._truncate(n_tokens)

    def close_turn(self, end_of_turn: Seq[int], *, keep: int | None = None) -> PrefillStats:
        """End a turn, e.g. one cut by a barge-in: keep the first `keep` tokens (all when
        None), then append the chat template's end-of-turn ids."""
        self._idle()
        if keep is not None:
            self.truncate(keep)
        return self.extend(end_of_turn)

    def fork(self, *, priority: Priority | None = None) -> Sequence:
        """A new sequence sharing every page (copy-on-write)."""
        self._live()
        child = Sequence(self._cache, self._host,
                         priority=self.priority if priority is None else priority)
        child._table = self._table.fork(child.seq_id)
        child._logits = self._logits
        return child

    def generate(self, params: SamplingParams, *, prompt_ids: Iterable[int] = ()
                 ) -> Iterator[TokenEvent]:
        """Extend with `prompt_ids` (if any), then sample tokens, yielding events as they
        are produced. Runs on the engine's scheduler, so other active generations advance
        in the same batched steps. For the final `GenerationResult` use `Engine.enqueue`,
        which returns the job."""
        self._live()
        return self._host.generate(self, params, prompt_ids=prompt_ids)

    def release(self) -> None:
        """Cancel any generation on this sequence and drop its page references (pages with
        content stay cached and matchable). Idempotent."""
        if self._released:
            return
        self._host.on_release(self)
        self._table.release()
        self._logits = None
        self._released = True
        self._cache.discard(self)

    def __repr__(self) -> str:
        state = "released" if self._released else f"{len(self._table.tokens)} tokens"
        return f"Sequence(id={self.seq_id}, {state}, {len(self._table.pages)} pages)"

    # ---- engine internals (used by the scheduler) -----------------------------------

    def attach(self, generation: _Generation) -> None:
        """Mark a generation (a `Job`) as running on this sequence."""
        self._generation = generation

    def next_logits(self) -> torch.Tensor:
        """Logits for the token after the last one; recomputes the last token when they
        are not known (after a truncate, or an extend served entirely from the cache)."""
        self._live()
        if self._logits is None:
            tokens = self._table.tokens
            if not tokens:
                raise EngineError("cannot generate from an empty sequence: extend it first")
            if self._cache.pool.available() == 0:  # fail before dropping the token
                raise self._table.exhausted(1)
            last = tokens[-1]
            self._truncate(len(tokens) - 1)
            self.extend_step([last], max_compute=1, compute_last=True)
        assert self._logits is not None
        return self._logits

    @property
    def positions_left(self) -> int:
        """Tokens that still fit before the model's maximum positions."""
        return self._cache.runner.max_positions - len(self._table.tokens)

    def pages_needed(self, n_tokens: int) -> int:
        """Upper bound on pages to allocate for writing `n_tokens` more tokens."""
        return self._table.pages_needed(n_tokens)

    def decode_item(self, token_id: int) -> DecodeItem:
        """Make position len(self) writable and describe the decode of `token_id` there."""
        if self.positions_left < 1:
            raise ContextLimitError(
                f"sequence {self.seq_id} is at the model's maximum of "
                f"{self._cache.runner.max_positions} positions")
        self._table.prepare_write([token_id])
        return DecodeItem(tuple(self._table.pages), len(self._table.tokens), token_id)

    def commit_decoded(self, token_id: int, logits: torch.Tensor) -> None:
        """Record that a decode step wrote `token_id` at position len(self)."""
        self._table.record([token_id])
        self._logits = logits
        self._cache.tokens_decoded += 1

    def rollback_pages(self) -> None:
        """Release pages allocated for a write that did not happen."""
        self._table.rollback()

    def check_problems(self) -> list[str]:
        """Inconsistencies between this sequence and the pages it references."""
        return self._table.check_problems()

    # ---- helpers ----------------------------------------------------------------------

    def _live(self) -> None:
        if self._released:
            raise SequenceReleasedError(f"sequence {self.seq_id} was released")

    def _idle(self) -> None:
        self._live()
        if self._generation is not None and not self._generation.done:
            raise EngineError(f"sequence {self.seq_id} has a generation running; cancel it "
                              "or let it finish first")

    def _validated(self, token_ids: Seq[int]) -> list[int]:
        self._live()
        ids = [int(t) for t in token_ids]
        vocab = self._cache.runner.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"token ids out of range [0, {vocab}): {bad[:5]}")
        return ids

    def _reserve(self, n_tokens: int) -> None:
        limit = self._cache.runner.max_positions
        held = len(self._table.tokens)
        if held + n_tokens > limit:
            raise ContextLimitError(
                f"sequence {self.seq_id}: {held} + {n_tokens} tokens would pass "
                f"the model's maximum of {limit} positions")
        needed = self._table.pages_needed(n_tokens)
        if needed > self._cache.pool.available():
            raise self._table.exhausted(needed)

    def _truncate(self, n_tokens: int) -> None:
        held = len(self._table.tokens)
        if not 0 <= n_tokens <= held:
            raise ValueError(f"truncate({n_tokens}) on a sequence of {held} tokens")
        if n_tokens == held:
            return
        try:
            self._table.truncate(n_tokens)
        finally:
            if len(self._table.tokens) != held:  # the logits followed a token now gone
                self._logits = None
