"""Block pool: page refcounts, the free list and the LRU of cached pages.

Every page is in exactly one state:
- free: refcount 0, no content;
- cached: refcount 0, holds K/V of some tokens, still matchable through the prefix index;
  evicted least-recently-used when a page is needed and none is free;
- used: refcount > 0 (held by one or more sequences).

A page's content is described by its parent key (the chained key of the page before it in
the sequence that wrote it) and its token ids; `len(tokens)` is its valid length, the hook
for truncation. Pure bookkeeping on integer page ids (after sglang's radix_cache, which keeps
the tree testable without a tensor pool); K/V tensors live in the runner.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.errors import CacheExhaustedError, EngineInvariantError
from engine.prefix_index import PartialMatch, PrefixIndex, page_key

__all__ = ["BlockPool", "PageInfo"]


@dataclass
class PageInfo:
    """Mutable bookkeeping of one page (internal to the pool and its sequences)."""

    refcount: int = 0
    parent_key: bytes | None = None
    """None while the page is free."""
    key: bytes | None = None
    """Set while the page is full and registered in the index under this key."""
    tokens: list[int] = field(default_factory=list)


class BlockPool:
    def __init__(self, num_pages: int, page_size: int) -> None:
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"need num_pages >= 1 and page_size >= 1, got {num_pages}, "
                             f"{page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.index = PrefixIndex()
        self.pages_evicted = 0
        self._pages = [PageInfo() for _ in range(num_pages)]
        self._free: dict[int, None] = dict.fromkeys(range(num_pages))  # ordered set
        self._lru: OrderedDict[int, None] = OrderedDict()  # oldest first

    # ---- queries --------------------------------------------------------------------

    def info(self, page: int) -> PageInfo:
        return self._pages[page]

    def tokens(self, page: int) -> list[int]:
        return self._pages[page].tokens

    def refcount(self, page: int) -> int:
        return self._pages[page].refcount

    def available(self) -> int:
        """Pages that `allocate` can hand out: free plus evictable."""
        return len(self._free) + len(self._lru)

    @property
    def pages_free(self) -> int:
        return len(self._free)

    @property
    def pages_cached(self) -> int:
        return len(self._lru)

    @property
    def pages_used(self) -> int:
        return self.num_pages - len(self._free) - len(self._lru)

    @property
    def pages_shared(self) -> int:
        return sum(1 for info in self._pages if info.refcount > 1)

    def lookup(self, key: bytes) -> int | None:
        return self.index.lookup(key)

    def best_partial(self, parent_key: bytes, token_ids: Sequence[int], *, exclude: int = -1
                     ) -> PartialMatch | None:
        return self.index.best_partial(parent_key, token_ids, self.tokens, exclude=exclude)

    # ---- reference counting ------------------------------------------------------------

    def allocate(self, parent_key: bytes) -> int:
        """A new empty page with refcount 1; evicts the least-recently-used cached page
        when none is free."""
        if self._free:
            page = next(iter(self._free))
            del self._free[page]
        elif self._lru:
            page, _ = self._lru.popitem(last=False)
            self._clear(page)
            self.pages_evicted += 1
        else:
            raise CacheExhaustedError(
                f"KV cache exhausted: all {self.num_pages} pages ({self.page_size} tokens "
                "each) are held by live sequences; release sequences or raise "
                "engine.num_pages")
        info = self._pages[page]
        info.refcount = 1
        info.parent_key = parent_key
        self.index.add_child(parent_key, page)
        return page

    def acquire(self, page: int) -> None:
        """Take one more reference to a used or cached page."""
        info = self._pages[page]
        if info.refcount == 0:
            if page not in self._lru:
                raise EngineInvariantError(f"acquire of free page {page}")
            del self._lru[page]
        info.refcount += 1

    def release(self, page: int) -> None:
        """Drop one reference; at zero the page becomes cached (if it has content) or
        free."""
        info = self._pages[page]
        if info.refcount <= 0:
            raise EngineInvariantError(f"release of page {page} with refcount {info.refcount}")
        info.refcount -= 1
        if info.refcount == 0:
            if info.tokens:
                self._lru[page] = None  # most recently used
            else:
                self._clear(page)
                self._free[page] = None

    # ---- content -----------------------------------------------------------------------

    def record(self, page: int, token_ids: Sequence[int]) -> bytes | None:
        """Note that K/V of `token_ids` were written after the page's current tokens. Returns
        the page's key when this fills it (registered unless an equal page already is)."""
        info = self._exclusive(page, "write to")
        if len(info.tokens) + len(token_ids) > self.page_size:
            raise EngineInvariantError(f"page {page} overflow: {len(info.tokens)} + "
                                       f"{len(token_ids)} > {self.page_size}")
        info.tokens.extend(token_ids)
        if len(info.tokens) < self.page_size:
            return None
        assert info.parent_key is not None
        key = page_key(info.parent_key, info.tokens)
        if self.index.add_key(key, page):
            info.key = key
        return key

    def cut(self, page: int, n_tokens: int) -> None:
        """Lower a page's valid length to `n_tokens`; it loses its key (no longer full)."""
        info = self._exclusive(page, "cut")
        del info.tokens[n_tokens:]
        if info.key is not None:
            self.index.remove_key(info.key, page)
            info.key = None

    # ---- invariants --------------------------------------------------------------------

    def check(self, references: Counter[int]) -> list[str]:
        """Problems found, given how many references live sequences hold on each page."""
        problems: list[str] = []
        for page, info in enumerate(self._pages):
            held = references.get(page, 0)
            state = [page in self._free, page in self._lru, info.refcount > 0]
            if info.refcount != held:
                problems.append(f"page {page}: refcount {info.refcount} but {held} "
                                "references held")
            if sum(state) != 1:
                problems.append(f"page {page}: in {sum(state)} of free/cached/used "
                                f"(free={state[0]}, cached={state[1]}, "
                                f"refcount={info.refcount})")
            if page in self._free and (info.tokens or info.parent_key is not None
                                       or info.key is not None):
                problems.append(f"page {page}: free but has content")
            if page in self._lru and not info.tokens:
                problems.append(f"page {page}: cached but empty")
            if page not in self._free and info.parent_key is None:
                problems.append(f"page {page}: not free but has no parent key")
            if len(info.tokens) > self.page_size:
                problems.append(f"page {page}: {len(info.tokens)} tokens > page size")
            if info.key is not None:
                if len(info.tokens) != self.page_size:
                    problems.append(f"page {page}: keyed but holds {len(info.tokens)} tokens")
                elif info.parent_key is not None and \
                        page_key(info.parent_key, info.tokens) != info.key:
                    problems.append(f"page {page}: key does not match its tokens")
                if self.index.lookup(info.key) != page:
                    problems.append(f"page {page}: key not registered to it in the index")
        for key, page in self.index.entries():
            if self._pages[page].key != key:
                problems.append(f"index key {key.hex()[:8]} -> page {page}, which has "
                                "another key")
        children = 0
        for parent, pages in self.index.parents():
            for page in pages:
                children += 1
                if self._pages[page].parent_key != parent:
                    problems.append(f"page {page}: listed under a parent key it lacks")
        if children != self.num_pages - len(self._free):
            problems.append(f"{children} pages listed by parent key, "
                            f"{self.num_pages - len(self._free)} not free")
        return problems

    # ---- helpers -----------------------------------------------------------------------

    def _exclusive(self, page: int, what: str) -> PageInfo:
        info = self._pages[page]
        if info.refcount != 1:
            raise EngineInvariantError(f"{what} page {page} with refcount {info.refcount} "
                                       "(needs exactly one owner; copy it first)")
        return info

    def _clear(self, page: int) -> None:
        info = self._pages[page]
        if info.key is not None:
            self.index.remove_key(info.key, page)
        if info.parent_key is not None:
            self.index.remove_child(info.parent_key, page)
        info.key = None
        info.parent_key = None
        info.tokens = []
