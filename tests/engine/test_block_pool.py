"""Block pool and prefix index: pure bookkeeping on page ids, no runner, no tensors."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from engine.block_pool import BlockPool
from engine.errors import CacheExhaustedError, EngineInvariantError
from engine.prefix_index import ROOT_KEY, chain_keys, common_prefix, page_key


def test_keys_chain_over_the_whole_prefix() -> None:
    tokens = [1, 2, 3, 4, 5, 6, 7]
    keys = chain_keys(tokens, 3)
    assert keys == [page_key(ROOT_KEY, [1, 2, 3]), page_key(keys[0], [4, 5, 6])]
    # Same page tokens after a different first page: a different key.
    assert chain_keys([9, 2, 3, 4, 5, 6], 3)[1] != keys[1]
    assert chain_keys(tokens, 3, first_page=1, parent_key=keys[0]) == keys[1:]
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2


def test_pages_move_between_free_used_and_cached() -> None:
    pool = BlockPool(num_pages=3, page_size=2)
    page = pool.allocate(ROOT_KEY)
    key = pool.record(page, [5, 6])
    assert key == page_key(ROOT_KEY, [5, 6]) and pool.lookup(key) == page
    pool.acquire(page)
    assert (pool.pages_used, pool.pages_shared) == (1, 1)
    pool.release(page)
    pool.release(page)
    assert (pool.pages_used, pool.pages_cached, pool.pages_free) == (0, 1, 2)
    assert pool.lookup(key) == page  # still matchable
    empty = pool.allocate(ROOT_KEY)
    pool.release(empty)  # no content: straight back to free
    assert pool.pages_free == 2
    assert pool.check(Counter()) == []


def test_eviction_is_least_recently_used_and_unregisters_keys() -> None:
    pool = BlockPool(num_pages=2, page_size=1)
    first = pool.allocate(ROOT_KEY)
    key_first = pool.record(first, [1])
    second = pool.allocate(ROOT_KEY)
    key_second = pool.record(second, [2])
    pool.release(first)
    pool.release(second)
    pool.acquire(first)  # touched: now the most recently used once released again
    pool.release(first)
    assert key_first is not None and key_second is not None
    new = pool.allocate(ROOT_KEY)
    assert new == second and pool.pages_evicted == 1
    assert pool.lookup(key_second) is None and pool.lookup(key_first) == first
    assert pool.check(Counter({new: 1})) == []


def test_misuse_is_caught() -> None:
    pool = BlockPool(num_pages=1, page_size=2)
    with pytest.raises(EngineInvariantError, match="free page"):
        pool.acquire(0)
    page = pool.allocate(ROOT_KEY)
    with pytest.raises(CacheExhaustedError, match="all 1 pages"):
        pool.allocate(ROOT_KEY)
    with pytest.raises(EngineInvariantError, match="overflow"):
        pool.record(page, [1, 2, 3])
    pool.acquire(page)
    with pytest.raises(EngineInvariantError, match="refcount 2"):
        pool.record(page, [1])  # a shared page is never written
    assert pool.check(Counter({page: 1})) == [f"page {page}: refcount 2 but 1 references held"]


def test_best_partial_prefers_the_longest_run() -> None:
    pool = BlockPool(num_pages=4, page_size=4)
    a = pool.allocate(ROOT_KEY)
    pool.record(a, [1, 2])
    b = pool.allocate(ROOT_KEY)
    pool.record(b, [1, 2, 3, 9])
    c = pool.allocate(b"\x01" * 16)
    pool.record(c, [1, 2, 3, 4])  # other parent: never a candidate
    match = pool.best_partial(ROOT_KEY, [1, 2, 3, 4])
    assert match is not None and (match.page, match.length) == (b, 3)
    assert pool.best_partial(ROOT_KEY, [7]) is None
    match = pool.best_partial(ROOT_KEY, [1, 2, 3], exclude=b)
    assert match is not None and (match.page, match.length) == (a, 2)


def test_importing_engine_does_not_import_torch() -> None:
    code = ("import sys, engine; engine.SamplingParams; engine.PrefillStats; "
            "engine.Priority; engine.EngineError; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
