"""A sequence's page table on a bare block pool: no runner, no model, no tensors."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from engine.block_pool import BlockPool
from engine.errors import CacheExhaustedError
from engine.events import PrefillStats
from engine.page_table import PageTable

PS = 4  # page size of these tests


class Copies:
    """Records the K/V copies a table asks for (the storage a runner would copy in)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, src_page: int, dst_page: int, n_tokens: int) -> None:
        self.calls.append((src_page, dst_page, n_tokens))


def written(table: PageTable, ids: list[int]) -> None:
    """What a forward over `ids` does to the table, short of the forward."""
    table.prepare_write(ids)
    table.record(ids)


def assert_consistent(pool: BlockPool, *tables: PageTable) -> None:
    for table in tables:
        assert table.check_problems() == []
    assert pool.check(Counter(page for table in tables for page in table.pages)) == []


def test_a_second_table_references_full_pages_and_copies_the_partial_run() -> None:
    pool, copies = BlockPool(num_pages=8, page_size=PS), Copies()
    a, b = PageTable(pool, copies, 1), PageTable(pool, copies, 2)
    written(a, list(range(10, 20)))  # 2 full pages + 2 tokens
    assert b.reuse(list(range(10, 20))) == PrefillStats(computed=0, referenced=8, copied=2)
    assert b.pages[:2] == a.pages[:2] and b.pages[2] != a.pages[2]
    assert copies.calls == [(a.pages[2], b.pages[2], 2)]
    assert b.tokens == a.tokens and b.keys == a.keys
    assert_consistent(pool, a, b)


def test_reuse_stops_where_the_cache_does_and_says_how_far_to_compute() -> None:
    pool, copies = BlockPool(num_pages=8, page_size=PS), Copies()
    a, b = PageTable(pool, copies, 1), PageTable(pool, copies, 2)
    written(a, [1, 2, 3, 4, 5, 6, 7, 8])
    assert b.reuse([1, 2, 3, 4, 9, 9]) == PrefillStats(computed=0, referenced=4, copied=0)
    assert b.tokens == [1, 2, 3, 4]
    c = PageTable(pool, copies, 3)
    # Computing [1, 2, 3, 4] first would let the page after it be referenced.
    assert c.until_cached_page([1, 2, 3, 4, 5, 6, 7, 8]) == 4
    assert c.until_cached_page([9, 9, 9, 9, 9]) == 5
    assert_consistent(pool, a, b)


def test_truncate_through_a_shared_page_copies_it_first() -> None:
    pool, copies = BlockPool(num_pages=8, page_size=PS), Copies()
    a = PageTable(pool, copies, 1)
    written(a, [1, 2, 3, 4, 5, 6])
    b = a.fork(2)
    assert b.pages == a.pages and pool.refcount(a.pages[1]) == 2
    b.truncate(5)
    assert b.tokens == [1, 2, 3, 4, 5] and b.pages[0] == a.pages[0]
    assert b.pages[1] != a.pages[1]
    assert copies.calls == [(a.pages[1], b.pages[1], 1)]
    assert a.tokens == [1, 2, 3, 4, 5, 6]
    assert_consistent(pool, a, b)
    b.truncate(4)  # on a page boundary: nothing to copy, the partial page goes
    assert len(b.pages) == 1 and len(copies.calls) == 1
    assert_consistent(pool, a, b)


def test_a_write_to_a_shared_partial_page_copies_it_and_a_rollback_returns_new_pages() -> None:
    pool, copies = BlockPool(num_pages=8, page_size=PS), Copies()
    a = PageTable(pool, copies, 1)
    written(a, [1, 2])
    b = a.fork(2)
    assert b.pages_needed(7) == 2 + 1  # two new pages and the copy of the shared one
    b.prepare_write([3, 4, 5, 6, 7, 8, 9])
    assert len(b.pages) == 3 and b.pages[0] != a.pages[0]
    assert copies.calls == [(a.pages[0], b.pages[0], 2)]
    b.rollback()
    assert len(b.pages) == 1
    assert_consistent(pool, a, b)


def test_a_cut_that_needs_a_copy_and_finds_no_page_raises_before_changing_anything() -> None:
    pool, copies = BlockPool(num_pages=2, page_size=PS), Copies()
    a = PageTable(pool, copies, 7)
    written(a, [1, 2, 3, 4, 5, 6])
    b = a.fork(8)
    with pytest.raises(CacheExhaustedError, match="sequence 8 needs 1 more pages"):
        b.truncate(5)
    assert b.tokens == a.tokens and b.pages == a.pages
    assert_consistent(pool, a, b)


def test_release_drops_every_reference_and_leaves_content_cached() -> None:
    pool, copies = BlockPool(num_pages=4, page_size=PS), Copies()
    a = PageTable(pool, copies, 1)
    written(a, [1, 2, 3, 4, 5])
    a.release()
    assert (a.tokens, a.pages, a.keys) == ([], [], [])
    assert pool.pages_used == 0 and pool.pages_cached == 2
    assert_consistent(pool, a)


def test_importing_the_page_table_does_not_import_torch() -> None:
    code = "import sys, engine.page_table; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
