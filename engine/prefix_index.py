"""Prefix index: full pages by chained hash, any page with content by parent key.

After exllamav2's dynamic generator (generator/dynamic.py): a full page is keyed by a hash
of its parent page's key and its own token ids, so one dictionary lookup per page matches a
prefix (no tree needed), and a partial page can be served by copying the longest matching
run from any page that has the same parent key. Pure Python on integer page ids.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

__all__ = ["ROOT_KEY", "PartialMatch", "PrefixIndex", "chain_keys", "common_prefix", "page_key"]

ROOT_KEY = b"\x00" * 16
"""Parent key of every sequence's first page."""


def page_key(parent_key: bytes, token_ids: Sequence[int]) -> bytes:
    """Key of a full page: a 128-bit digest of the parent key and the page's token ids, so
    equal keys mean equal token prefixes (not just equal pages)."""
    digest = hashlib.blake2b(parent_key, digest_size=16)
    digest.update(array("q", token_ids).tobytes())
    return digest.digest()


def chain_keys(token_ids: Sequence[int], page_size: int, *, first_page: int = 0,
               parent_key: bytes = ROOT_KEY) -> list[bytes]:
    """Keys of every full page of `token_ids` from page index `first_page` on; `parent_key`
    is the key of page `first_page - 1` (ROOT_KEY when `first_page` is 0)."""
    keys: list[bytes] = []
    key = parent_key
    for page in range(first_page, len(token_ids) // page_size):
        key = page_key(key, token_ids[page * page_size:(page + 1) * page_size])
        keys.append(key)
    return keys


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass(frozen=True)
class PartialMatch:
    """The best page to copy a run of K/V from."""

    page: int
    length: int
    """Tokens (slots from 0) that match."""


class PrefixIndex:
    """Maps keys to pages. Holds no tokens itself: callers pass a page's tokens in."""

    def __init__(self) -> None:
        self._by_key: dict[bytes, int] = {}
        self._by_parent: dict[bytes, dict[int, None]] = {}  # ordered set per parent key

    # ---- full pages ------------------------------------------------------------------

    def lookup(self, key: bytes) -> int | None:
        """The page holding the full page with this key, if any."""
        return self._by_key.get(key)

    def add_key(self, key: bytes, page: int) -> bool:
        """Register a full page; False (and nothing changes) if another page has the key."""
        if key in self._by_key:
            return False
        self._by_key[key] = page
        return True

    def remove_key(self, key: bytes, page: int) -> None:
        if self._by_key.get(key) == page:
            del self._by_key[key]

    def entries(self) -> Iterator[tuple[bytes, int]]:
        return iter(self._by_key.items())

    # ---- pages by parent key (partial-page reuse) --------------------------------------

    def add_child(self, parent_key: bytes, page: int) -> None:
        self._by_parent.setdefault(parent_key, {})[page] = None

    def remove_child(self, parent_key: bytes, page: int) -> None:
        children = self._by_parent.get(parent_key)
        if children is not None:
            children.pop(page, None)
            if not children:
                del self._by_parent[parent_key]

    def children(self, parent_key: bytes) -> Iterable[int]:
        return tuple(self._by_parent.get(parent_key, ()))

    def parents(self) -> Iterator[tuple[bytes, tuple[int, ...]]]:
        for parent, children in self._by_parent.items():
            yield parent, tuple(children)

    def best_partial(self, parent_key: bytes, token_ids: Sequence[int],
                     tokens_of: Callable[[int], Sequence[int]], *, exclude: int = -1
                     ) -> PartialMatch | None:
        """The page under `parent_key` whose tokens share the longest prefix with
        `token_ids` (ties: the first registered); `tokens_of(page)` gives a page's tokens.
        None when no page matches even one token."""
        best: PartialMatch | None = None
        for page in self._by_parent.get(parent_key, ()):
            if page == exclude:
                continue
            length = common_prefix(tokens_of(page), token_ids)
            if length > 0 and (best is None or length > best.length):
                best = PartialMatch(page, length)
                if length == len(token_ids):
                    break
        return best
