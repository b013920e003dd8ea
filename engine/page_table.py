"""A sequence's page table: its token ids, the pages holding their K/V and the chained keys.

Pure bookkeeping on integer page ids over the block pool: which pages a sequence holds,
which cached pages it can reference instead of computing, which it must copy before writing,
and what it releases on a cut. No tensors and no model: the one K/V operation it needs,
copying slots between pages, is handed in (`CopySlots`), so it runs against a fake too.

Invariant: page ``i`` of the table holds exactly the tokens ``tokens[i*ps:(i+1)*ps]`` (its
valid length is the count of those), and its parent key is the chained key of page
``i - 1``. Shared pages (refcount > 1) are never written: the first write to a shared
partial page copies it (copy-on-write), and full pages are immutable.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq

from engine.block_pool import BlockPool
from engine.errors import CacheExhaustedError
from engine.events import PrefillStats
from engine.prefix_index import ROOT_KEY, chain_keys, page_key

__all__ = ["CopySlots", "PageTable"]

CopySlots = Callable[[int, int, int], None]
"""``copy(src_page, dst_page, n_tokens)``: copy the K/V of slots [0, n_tokens) between pages."""


class PageTable:
    """Token ids and the pages of one sequence (`seq_id`, for messages), on `pool`."""

    def __init__(self, pool: BlockPool, copy_slots: CopySlots, seq_id: int) -> None:
        self.pool = pool
        self.page_size = pool.page_size
        self.seq_id = seq_id
        self._copy_slots = copy_slots
        self.tokens: list[int] = []
        self.pages: list[int] = []
        self.keys: list[bytes] = []  # chained keys of the full pages

    # ---- queries ----------------------------------------------------------------------

    def parent_key(self, page_index: int) -> bytes:
        """The chained key of page ``page_index - 1`` (ROOT_KEY for the first page)."""
        return self.keys[page_index - 1] if page_index > 0 else ROOT_KEY

    def pages_filled_by(self, token_ids: Seq[int]) -> list[bytes]:
        """Chained keys of the full pages that appending `token_ids` would complete."""
        return chain_keys(self.tokens + list(token_ids), self.page_size,
                          first_page=len(self.keys), parent_key=self.parent_key(len(self.keys)))

    def pages_ahead(self, token_ids: Seq[int]) -> list[tuple[bytes, list[int], int]]:
        """The pages that appending `token_ids` writes, from the one the first goes to:
        each one's parent key, the tokens it would hold after, and how many of those it
        holds now (the first page only). Another sequence writing a page with the same
        parent key shares the run their tokens have in common (see `reuse`)."""
        size = self.page_size
        index, held = divmod(len(self.tokens), size)
        tokens = self.tokens[index * size:] + list(token_ids)
        parents = [self.parent_key(index), *self.pages_filled_by(token_ids)]
        return [(parents[i], tokens[i * size:(i + 1) * size], held if i == 0 else 0)
                for i in range(-(-len(tokens) // size))]

    def pages_needed(self, n_tokens: int) -> int:
        """Upper bound on pages to allocate for writing `n_tokens` more tokens."""
        size = self.page_size
        n = len(self.tokens)
        new = -(-(n + n_tokens) // size) - len(self.pages)
        cow = 1 if n % size and self.pool.refcount(self.pages[-1]) > 1 else 0
        return max(new, 0) + cow

    def until_cached_page(self, ids: list[int]) -> int:
        """Tokens of `ids` up to the first later page boundary whose next page is in the
        index (all of them if none is)."""
        size = self.page_size
        n = len(self.tokens)
        for offset, key in enumerate(self.pages_filled_by(ids)):
            index = len(self.keys) + offset
            if index * size > n and self.pool.lookup(key) is not None:
                return index * size - n
        return len(ids)

    def exhausted(self, needed: int) -> CacheExhaustedError:
        """The error for a write that needs `needed` more pages than the pool can give."""
        pool = self.pool
        return CacheExhaustedError(
            f"KV cache exhausted: sequence {self.seq_id} needs {needed} more pages but only "
            f"{pool.available()} of {pool.num_pages} are free or evictable "
            f"({pool.page_size} tokens per page); release sequences or raise engine.num_pages")

    def check_problems(self) -> list[str]:
        """Inconsistencies between this table and the pages it references."""
        problems: list[str] = []
        size = self.page_size
        name = f"sequence {self.seq_id}"
        if len(self.pages) != -(-len(self.tokens) // size):
            problems.append(f"{name}: {len(self.pages)} pages for {len(self.tokens)} tokens")
        expected_keys = chain_keys(self.tokens, size)
        if self.keys != expected_keys:
            problems.append(f"{name}: chained keys do not match its tokens")
        for i, page in enumerate(self.pages):
            info = self.pool.info(page)
            if info.tokens != self.tokens[i * size:(i + 1) * size]:
                problems.append(f"{name}: page {page} (index {i}) holds {len(info.tokens)} "
                                "tokens that differ from the sequence's")
            parent = expected_keys[i - 1] if 0 < i <= len(expected_keys) else ROOT_KEY
            if info.parent_key != parent:
                problems.append(f"{name}: page {page} (index {i}) has the wrong parent key")
        if len(set(self.pages)) != len(self.pages):
            problems.append(f"{name}: a page appears twice in its table")
        return problems

    # ---- changes ----------------------------------------------------------------------

    def reuse(self, ids: list[int]) -> PrefillStats:
        """Take the cached K/V for a prefix of `ids`: whole pages by key, then a partial
        run by copy. Appends those tokens; returns what was referenced and copied."""
        pool = self.pool
        size = self.page_size
        full = self.tokens + ids
        referenced = copied = 0
        index = len(self.tokens) // size
        while (index + 1) * size <= len(full):
            want = full[index * size:(index + 1) * size]
            key = page_key(self.parent_key(index), want)
            page = pool.lookup(key)
            if page is None or pool.tokens(page) != want:
                break
            pool.acquire(page)
            if index < len(self.pages):  # our own partial page is superseded
                pool.release(self.pages[index])
                self.pages[index] = page
            else:
                self.pages.append(page)
            referenced += (index + 1) * size - len(self.tokens)
            self.tokens.extend(full[len(self.tokens):(index + 1) * size])
            self.keys.append(key)
            index += 1
        if len(self.tokens) < len(full):
            copied = self._copy_partial(index, full[index * size:(index + 1) * size])
        return PrefillStats(0, referenced, copied)

    def prepare_write(self, ids: list[int]) -> None:
        """Make positions len(tokens) .. len(tokens)+len(ids)-1 writable: copy a shared
        partial last page, allocate the pages past the table."""
        size = self.page_size
        n = len(self.tokens)
        if n % size and self.pool.refcount(self.pages[-1]) > 1:
            self._copy_on_write(len(self.pages) - 1, n % size)
        end = n + len(ids)
        if len(self.pages) * size >= end:
            return
        ahead = self.keys + self.pages_filled_by(ids)
        while len(self.pages) * size < end:
            index = len(self.pages)
            self.pages.append(self.pool.allocate(ahead[index - 1] if index > 0 else ROOT_KEY))

    def record(self, ids: list[int]) -> None:
        """Note K/V of `ids` written at positions len(tokens)..; register pages they fill."""
        size = self.page_size
        pos = len(self.tokens)
        done = 0
        while done < len(ids):
            index, slot = divmod(pos + done, size)
            piece = ids[done:done + size - slot]
            key = self.pool.record(self.pages[index], piece)
            if key is not None:
                self.keys.append(key)
            done += len(piece)
        self.tokens.extend(ids)

    def rollback(self) -> None:
        """Release pages allocated for a write that did not happen."""
        keep = -(-len(self.tokens) // self.page_size)
        for page in reversed(self.pages[keep:]):
            self.pool.release(page)
        del self.pages[keep:]

    def truncate(self, n_tokens: int) -> None:
        """Keep exactly the first `n_tokens` (at most as many as held). Pages past the cut
        are released; a page cut in the middle loses its key, and is copied first if
        another sequence references it."""
        pool = self.pool
        full, rem = divmod(n_tokens, self.page_size)
        keep = full + (1 if rem else 0)
        if rem and pool.refcount(self.pages[full]) > 1:
            freed = sum(1 for page in self.pages[keep:] if pool.refcount(page) == 1)
            if pool.available() + freed == 0:
                raise self.exhausted(1)
        for page in reversed(self.pages[keep:]):
            pool.release(page)
        del self.pages[keep:]
        del self.keys[full:]
        del self.tokens[n_tokens:]
        if rem:
            if pool.refcount(self.pages[full]) > 1:
                self._copy_on_write(full, rem)
            else:
                pool.cut(self.pages[full], rem)

    def fork(self, seq_id: int) -> PageTable:
        """A table for sequence `seq_id` referencing every page of this one."""
        child = PageTable(self.pool, self._copy_slots, seq_id)
        for page in self.pages:
            self.pool.acquire(page)
        child.tokens = list(self.tokens)
        child.pages = list(self.pages)
        child.keys = list(self.keys)
        return child

    def release(self) -> None:
        """Drop every page reference (pages with content stay cached) and empty the table."""
        for page in reversed(self.pages):  # deepest first: evicted before their parents
            self.pool.release(page)
        self.pages.clear()
        self.keys.clear()
        self.tokens.clear()

    # ---- helpers ----------------------------------------------------------------------

    def _copy_partial(self, index: int, want: list[int]) -> int:
        """Serve page `index` by copying the longest matching run from a page with the same
        parent key, if that adds tokens. Returns the tokens added."""
        pool = self.pool
        have = len(self.tokens) - index * self.page_size
        own = self.pages[index] if index < len(self.pages) else -1
        parent = self.parent_key(index)
        match = pool.best_partial(parent, want, exclude=own)
        if match is None or match.length <= have:
            return 0
        pool.acquire(match.page)  # keep the source from being evicted by the allocation
        try:
            if pool.available() == 0:
                return 0
            page = pool.allocate(parent)
            self._copy_slots(match.page, page, match.length)
            key = pool.record(page, want[:match.length])
        finally:
            pool.release(match.page)
        if own >= 0:
            pool.release(own)
            self.pages[index] = page
        else:
            self.pages.append(page)
        self.tokens.extend(want[have:match.length])
        if key is not None:
            self.keys.append(key)
        return match.length - have

    def _copy_on_write(self, index: int, n_tokens: int) -> None:
        """Replace shared page `index` by a private copy of its first `n_tokens` slots."""
        pool = self.pool
        old = self.pages[index]
        page = pool.allocate(self.parent_key(index))
        self._copy_slots(old, page, n_tokens)
        pool.record(page, pool.tokens(old)[:n_tokens])
        pool.release(old)
        self.pages[index] = page
