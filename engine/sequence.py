"""A sequence: token ids plus the page table holding their K/V.

Invariant: page ``i`` of the table holds exactly the tokens ``tokens[i*ps:(i+1)*ps]`` (its
valid length is the count of those), and its parent key is the chained key of page
``i - 1``. Shared pages (refcount > 1) are never written: the first write to a shared
partial page copies it (copy-on-write), and full pages are immutable.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from collections.abc import Sequence as Seq
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from engine.errors import (
    CacheExhaustedError,
    ContextLimitError,
    EngineError,
    SequenceReleasedError,
)
from engine.events import PrefillStats, TokenEvent
from engine.params import Priority, SamplingParams
from engine.prefix_index import ROOT_KEY, chain_keys, page_key
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
        self._tokens: list[int] = []
        self._pages: list[int] = []
        self._keys: list[bytes] = []  # chained keys of the full pages
        self._logits: torch.Tensor | None = None  # next-token logits after the last token
        self._released = False
        self._generation: _Generation | None = None
        cache.add(self)

    # ---- public API ----------------------------------------------------------------

    @property
    def tokens(self) -> tuple[int, ...]:
        """Token ids whose K/V is in the cache, in order."""
        return tuple(self._tokens)

    def tail(self, n_tokens: int) -> list[int]:
        """The last ``n_tokens`` ids (fewer if the sequence is shorter)."""
        return self._tokens[-n_tokens:] if n_tokens > 0 else []

    @property
    def page_table(self) -> tuple[int, ...]:
        return tuple(self._pages)

    @property
    def released(self) -> bool:
        return self._released

    def __len__(self) -> int:
        return len(self._tokens)

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
        stats = self._reuse(reusable) if reusable else PrefillStats(0, 0, 0)
        self._cache.count_prefill(stats)
        rest = ids[stats.total:]
        count = min(max(max_compute, 1), self._until_cached_page(rest)) if rest else 0
        return stats, rest[:count]

    def pages_filled_by(self, token_ids: Seq[int]) -> list[bytes]:
        """Chained keys of the full pages that appending `token_ids` would complete."""
        return chain_keys(self._tokens + list(token_ids), self._cache.page_size,
                          first_page=len(self._keys),
                          parent_key=self._parent_key(len(self._keys)))

    def pages_ahead(self, token_ids: Seq[int]) -> list[tuple[bytes, list[int], int]]:
        """The pages that appending `token_ids` writes, from the one the first goes to:
        each one's parent key, the tokens it would hold after, and how many of those it
        holds now (the first page only). Another sequence writing a page with the same
        parent key shares the run their tokens have in common (see `_reuse`)."""
        size = self._cache.page_size
        index, held = divmod(len(self._tokens), size)
        tokens = self._tokens[index * size:] + list(token_ids)
        parents = [self._parent_key(index), *self.pages_filled_by(token_ids)]
        return [(parents[i], tokens[i * size:(i + 1) * size], held if i == 0 else 0)
                for i in range(-(-len(tokens) // size))]

    def prefill_item(self, token_ids: Seq[int]) -> PrefillItem:
        """Make the positions of `token_ids` writable (copy-on-write, new pages) and
        describe their prefill. Follow with `commit_prefilled`, or `rollback_pages` if the
        forward fails."""
        ids = list(token_ids)
        try:
            self._prepare_write(ids)
        except BaseException:
            self.rollback_pages()
            raise
        return PrefillItem(tuple(self._pages), len(self._tokens), tuple(ids))

    def commit_prefilled(self, token_ids: Seq[int], logits: torch.Tensor) -> None:
        """Record that a forward wrote the K/V of `token_ids` (see `prefill_item`);
        `logits` follow the last of them."""
        ids = list(token_ids)
        self._record(ids)
        self._logits = logits
        self._cache.count_prefill(PrefillStats(len(ids), 0, 0))

    def truncate(self, n_tokens: int) -> None:
        """Keep exactly the first `n_tokens`. Pages past the cut are released (they stay
        matchable while cached); a page cut in the middle loses its key, and is copied
        first if another sequence references it."""
        self._idle()
        self._truncate(n_tokens)

    def _truncate(self, n_tokens: int) -> None:
        if not 0 <= n_tokens <= len(self._tokens):
            raise ValueError(f"truncate({n_tokens}) on a sequence of {len(self._tokens)} tokens")
        if n_tokens == len(self._tokens):
            return
        pool = self._cache.pool
        full, rem = divmod(n_tokens, self._cache.page_size)
        keep = full + (1 if rem else 0)
        if rem and pool.refcount(self._pages[full]) > 1:
            freed = sum(1 for page in self._pages[keep:] if pool.refcount(page) == 1)
            if pool.available() + freed == 0:
                raise self._exhausted(1)
        for page in reversed(self._pages[keep:]):
            pool.release(page)
        del self._pages[keep:]
        del self._keys[full:]
        del self._tokens[n_tokens:]
        self._logits = None
        if rem:
            if pool.refcount(self._pages[full]) > 1:
                self._copy_on_write(full, rem)
            else:
                pool.cut(self._pages[full], rem)

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
        for page in self._pages:
            self._cache.pool.acquire(page)
        child._tokens = list(self._tokens)
        child._pages = list(self._pages)
        child._keys = list(self._keys)
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
        pool = self._cache.pool
        for page in reversed(self._pages):  # deepest first: evicted before their parents
            pool.release(page)
        self._pages.clear()
        self._keys.clear()
        self._tokens.clear()
        self._logits = None
        self._released = True
        self._cache.discard(self)

    def __repr__(self) -> str:
        state = "released" if self._released else f"{len(self._tokens)} tokens"
        return f"Sequence(id={self.seq_id}, {state}, {len(self._pages)} pages)"

    # ---- engine internals (used by the scheduler) -----------------------------------

    def attach(self, generation: _Generation) -> None:
        """Mark a generation (a `Job`) as running on this sequence."""
        self._generation = generation

    def next_logits(self) -> torch.Tensor:
        """Logits for the token after the last one; recomputes the last token when they
        are not known (after a truncate, or an extend served entirely from the cache)."""
        self._live()
        if self._logits is None:
            if not self._tokens:
                raise EngineError("cannot generate from an empty sequence: extend it first")
            if self._cache.pool.available() == 0:  # fail before dropping the token
                raise self._exhausted(1)
            last = self._tokens[-1]
            self._truncate(len(self._tokens) - 1)
            self.extend_step([last], max_compute=1, compute_last=True)
        assert self._logits is not None
        return self._logits

    @property
    def positions_left(self) -> int:
        """Tokens that still fit before the model's maximum positions."""
        return self._cache.runner.max_positions - len(self._tokens)

    def pages_needed(self, n_tokens: int) -> int:
        """Upper bound on pages to allocate for writing `n_tokens` more tokens."""
        pool = self._cache.pool
        size = self._cache.page_size
        n = len(self._tokens)
        new = -(-(n + n_tokens) // size) - len(self._pages)
        cow = 1 if n % size and pool.refcount(self._pages[-1]) > 1 else 0
        return max(new, 0) + cow

    def decode_item(self, token_id: int) -> DecodeItem:
        """Make position len(self) writable and describe the decode of `token_id` there."""
        if self.positions_left < 1:
            raise ContextLimitError(
                f"sequence {self.seq_id} is at the model's maximum of "
                f"{self._cache.runner.max_positions} positions")
        self._prepare_write([token_id])
        return DecodeItem(tuple(self._pages), len(self._tokens), token_id)

    def commit_decoded(self, token_id: int, logits: torch.Tensor) -> None:
        """Record that a decode step wrote `token_id` at position len(self)."""
        self._record([token_id])
        self._logits = logits
        self._cache.tokens_decoded += 1

    def rollback_pages(self) -> None:
        """Release pages allocated for a write that did not happen."""
        size = self._cache.page_size
        keep = -(-len(self._tokens) // size)
        for page in reversed(self._pages[keep:]):
            self._cache.pool.release(page)
        del self._pages[keep:]

    def check_problems(self) -> list[str]:
        """Inconsistencies between this sequence and the pages it references."""
        problems: list[str] = []
        size = self._cache.page_size
        pool = self._cache.pool
        name = f"sequence {self.seq_id}"
        if len(self._pages) != -(-len(self._tokens) // size):
            problems.append(f"{name}: {len(self._pages)} pages for {len(self._tokens)} tokens")
        expected_keys = chain_keys(self._tokens, size)
        if self._keys != expected_keys:
            problems.append(f"{name}: chained keys do not match its tokens")
        for i, page in enumerate(self._pages):
            info = pool.info(page)
            if info.tokens != self._tokens[i * size:(i + 1) * size]:
                problems.append(f"{name}: page {page} (index {i}) holds {len(info.tokens)} "
                                "tokens that differ from the sequence's")
            parent = expected_keys[i - 1] if 0 < i <= len(expected_keys) else ROOT_KEY
            if info.parent_key != parent:
                problems.append(f"{name}: page {page} (index {i}) has the wrong parent key")
        if len(set(self._pages)) != len(self._pages):
            problems.append(f"{name}: a page appears twice in its table")
        return problems

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

    def _exhausted(self, needed: int) -> CacheExhaustedError:
        pool = self._cache.pool
        return CacheExhaustedError(
            f"KV cache exhausted: sequence {self.seq_id} needs {needed} more pages but only "
            f"{pool.available()} of {pool.num_pages} are free or evictable "
            f"({pool.page_size} tokens per page); release sequences or raise engine.num_pages")

    def _reserve(self, n_tokens: int) -> None:
        limit = self._cache.runner.max_positions
        if len(self._tokens) + n_tokens > limit:
            raise ContextLimitError(
                f"sequence {self.seq_id}: {len(self._tokens)} + {n_tokens} tokens would pass "
                f"the model's maximum of {limit} positions")
        needed = self.pages_needed(n_tokens)
        if needed > self._cache.pool.available():
            raise self._exhausted(needed)

    def _parent_key(self, page_index: int) -> bytes:
        return self._keys[page_index - 1] if page_index > 0 else ROOT_KEY

    def _until_cached_page(self, ids: list[int]) -> int:
        """Tokens of `ids` up to the first later page boundary whose next page is in the
        index (all of them if none is)."""
        size = self._cache.page_size
        n = len(self._tokens)
        keys = chain_keys(self._tokens + ids, size, first_page=len(self._keys),
                          parent_key=self._parent_key(len(self._keys)))
        for offset, key in enumerate(keys):
            index = len(self._keys) + offset
            if index * size > n and self._cache.pool.lookup(key) is not None:
                return index * size - n
        return len(ids)

    def _reuse(self, ids: list[int]) -> PrefillStats:
        """Take the cached K/V for a prefix of `ids`: whole pages by key, then a partial
        run by copy. Appends those tokens; returns what was referenced and copied."""
        pool = self._cache.pool
        size = self._cache.page_size
        full = self._tokens + ids
        referenced = copied = 0
        index = len(self._tokens) // size
        while (index + 1) * size <= len(full):
            want = full[index * size:(index + 1) * size]
            key = page_key(self._parent_key(index), want)
            page = pool.lookup(key)
            if page is None or pool.tokens(page) != want:
                break
            pool.acquire(page)
            if index < len(self._pages):  # our own partial page is superseded
                pool.release(self._pages[index])
                self._pages[index] = page
            else:
                self._pages.append(page)
            referenced += (index + 1) * size - len(self._tokens)
            self._tokens.extend(full[len(self._tokens):(index + 1) * size])
            self._keys.append(key)
            index += 1
        if len(self._tokens) < len(full):
            copied = self._copy_partial(index, full[index * size:(index + 1) * size])
        if referenced or copied:
            self._logits = None
        return PrefillStats(0, referenced, copied)

    def _copy_partial(self, index: int, want: list[int]) -> int:
        """Serve page `index` by copying the longest matching run from a page with the same
        parent key, if that adds tokens. Returns the tokens added."""
        pool = self._cache.pool
        have = len(self._tokens) - index * self._cache.page_size
        own = self._pages[index] if index < len(self._pages) else -1
        parent = self._parent_key(index)
        match = pool.best_partial(parent, want, exclude=own)
        if match is None or match.length <= have:
            return 0
        pool.acquire(match.page)  # keep the source from being evicted by the allocation
        try:
            if pool.available() == 0:
                return 0
            page = pool.allocate(parent)
            self._cache.runner.copy_slots(match.page, page, match.length)
            key = pool.record(page, want[:match.length])
        finally:
            pool.release(match.page)
        if own >= 0:
            pool.release(own)
            self._pages[index] = page
        else:
            self._pages.append(page)
        self._tokens.extend(want[have:match.length])
        if key is not None:
            self._keys.append(key)
        return match.length - have

    def _copy_on_write(self, index: int, n_tokens: int) -> None:
        """Replace shared page `index` by a private copy of its first `n_tokens` slots."""
        pool = self._cache.pool
        old = self._pages[index]
        page = pool.allocate(self._parent_key(index))
        self._cache.runner.copy_slots(old, page, n_tokens)
        pool.record(page, pool.tokens(old)[:n_tokens])
        pool.release(old)
        self._pages[index] = page

    def _prepare_write(self, ids: list[int]) -> None:
        """Make positions len(self) .. len(self)+len(ids)-1 writable: copy a shared partial
        last page, allocate the pages past the table."""
        size = self._cache.page_size
        n = len(self._tokens)
        if n % size and self._cache.pool.refcount(self._pages[-1]) > 1:
            self._copy_on_write(len(self._pages) - 1, n % size)
        end = n + len(ids)
        if len(self._pages) * size >= end:
            return
        ahead = self._keys + chain_keys(self._tokens + ids, size, first_page=len(self._keys),
                                        parent_key=self._parent_key(len(self._keys)))
        while len(self._pages) * size < end:
            index = len(self._pages)
            self._pages.append(self._cache.pool.allocate(
                ahead[index - 1] if index > 0 else ROOT_KEY))

    def _record(self, ids: list[int]) -> None:
        """Note K/V of `ids` written at positions len(self)..; register pages they fill."""
        size = self._cache.page_size
        pos = len(self._tokens)
        done = 0
        while done < len(ids):
            index, slot = divmod(pos + done, size)
            piece = ids[done:done + size - slot]
            key = self._cache.pool.record(self._pages[index], piece)
            if key is not None:
                self._keys.append(key)
            done += len(piece)
        self._tokens.extend(ids)
