"""Sequence bookkeeping on the fake runner: reuse, copy, truncate, fork, release, evict."""

from __future__ import annotations

import pytest
import torch

from engine import CacheExhaustedError, EngineInvariantError, PrefillStats, SequenceReleasedError
from tests.engine.fake_runner import assert_cache_matches, make_engine

PS = 4  # page size of these tests


def ids(*values: int) -> list[int]:
    return list(values)


def test_extend_computes_then_references_full_pages_and_copies_the_partial_one() -> None:
    engine, runner = make_engine(page_size=PS)
    prompt = list(range(10, 20))  # 2 full pages + 2 tokens
    with engine.sequence() as a, engine.sequence() as b:
        assert a.extend(prompt) == PrefillStats(computed=10, referenced=0, copied=0)
        before = runner.prefill_tokens
        assert b.extend(prompt) == PrefillStats(computed=0, referenced=8, copied=2)
        assert runner.prefill_tokens == before  # nothing ran through the model
        assert b.page_table[:2] == a.page_table[:2]
        assert b.page_table[2] != a.page_table[2]
        assert engine.stats().pages_shared == 2
        assert_cache_matches(engine, runner)
        # Nothing computed means no logits yet: asking for them recomputes one token.
        logits = b.next_logits()
        assert torch.equal(logits, runner.reference_logits(prompt))
        assert runner.prefill_tokens == before + 1
        assert_cache_matches(engine, runner)


def test_partial_copy_takes_the_longest_run_under_the_same_parent() -> None:
    engine, runner = make_engine(page_size=PS)
    head = [1, 2, 3, 4]
    with engine.sequence() as a, engine.sequence() as b, engine.sequence() as c:
        a.extend(head + [5, 6, 7])
        b.extend(head + [5, 6, 9])
        assert c.extend(head + [5, 6, 9, 8, 30]) == PrefillStats(computed=2, referenced=4,
                                                                 copied=3)
        assert runner.slots[c.page_table[1]][:3] == runner.slots[b.page_table[1]][:3]
        # Same tokens under a different parent key: no reuse at all.
        with engine.sequence() as d:
            assert d.extend([9, 2, 3, 4, 5, 6, 7]).computed == 7
        assert_cache_matches(engine, runner)


def test_reuse_resumes_after_a_computed_page() -> None:
    engine, runner = make_engine(page_size=PS)
    tokens = list(range(40, 52))  # 3 full pages
    with engine.sequence() as a:
        a.extend(tokens)
        a.truncate(5)  # page 1 cut in place (loses its key), page 2 released but cached
        assert engine.stats().pages_cached == 1
        stats = a.extend(tokens[5:])
        # Page 1 has to be recomputed; page 2 is then referenced from the cache.
        assert stats == PrefillStats(computed=3, referenced=4, copied=0)
        assert_cache_matches(engine, runner)


def test_truncate_is_exact_and_extend_after_truncate_matches_a_fresh_prefill() -> None:
    engine, runner = make_engine(page_size=PS)
    with engine.sequence() as seq:
        seq.extend(list(range(1, 15)))
        for keep in (13, 12, 9, 8, 1, 0):
            seq.truncate(keep)
            assert seq.tokens == tuple(range(1, 1 + keep))
            assert len(seq.page_table) == -(-keep // PS)
            assert_cache_matches(engine, runner)
        seq.extend([7, 8, 9])
        assert torch.equal(seq.next_logits(), runner.reference_logits([7, 8, 9]))
        with pytest.raises(ValueError, match="truncate"):
            seq.truncate(4)


def test_truncating_a_shared_page_copies_it_and_leaves_the_other_sequence_intact() -> None:
    engine, runner = make_engine(page_size=PS)
    with engine.sequence() as a:
        a.extend(list(range(1, 9)))  # two full, keyed pages
        with a.fork() as b:
            shared = a.page_table[1]
            a.truncate(6)
            assert a.page_table[1] != shared  # copy-on-write
            assert b.page_table[1] == shared
            assert engine.stats().pages_shared == 1
            assert b.tokens == tuple(range(1, 9))
            assert_cache_matches(engine, runner)
            # b's page kept its key: a third sequence still references it.
            with engine.sequence() as c:
                assert c.extend(list(range(1, 9))).referenced == 8


def test_truncating_an_unshared_full_page_drops_its_key() -> None:
    engine, runner = make_engine(page_size=PS)
    tokens = list(range(1, 9))
    with engine.sequence() as a:
        a.extend(tokens)
        page = a.page_table[1]
        a.truncate(6)
        assert a.page_table[1] == page  # cut in place
        with engine.sequence() as b:
            # Page 0 is referenced; page 1 can only be copied (2 tokens) from the cut page.
            assert b.extend(tokens) == PrefillStats(computed=2, referenced=4, copied=2)
        assert_cache_matches(engine, runner)


def test_fork_shares_pages_and_the_first_write_copies_a_shared_partial_page() -> None:
    engine, runner = make_engine(page_size=PS)
    with engine.sequence() as a:
        a.extend([5, 6, 7, 8, 9, 10])
        b = a.fork()
        assert b.page_table == a.page_table
        assert engine.stats().pages_shared == 2
        b.extend([11])
        assert b.page_table[0] == a.page_table[0]
        assert b.page_table[1] != a.page_table[1]
        page = a.page_table[1]
        a.extend([12])  # no longer shared: written in place
        assert a.page_table[1] == page
        assert_cache_matches(engine, runner)
        assert torch.equal(a.next_logits(), runner.reference_logits([5, 6, 7, 8, 9, 10, 12]))
        assert torch.equal(b.next_logits(), runner.reference_logits([5, 6, 7, 8, 9, 10, 11]))
        b.release()
        assert_cache_matches(engine, runner)


def test_release_keeps_pages_matchable_and_eviction_takes_the_deepest_first() -> None:
    engine, runner = make_engine(page_size=PS, num_pages=4)
    tokens = list(range(20, 32))  # 3 pages
    with engine.sequence() as a:
        a.extend(tokens)
    stats = engine.stats()
    assert (stats.pages_used, stats.pages_cached, stats.pages_free) == (0, 3, 1)
    with engine.sequence() as b, engine.sequence() as c:
        b.extend([1, 2, 3, 4, 5, 6, 7, 8])  # needs 2 pages: the free one and one evicted
        assert engine.stats().pages_evicted == 1
        assert_cache_matches(engine, runner)
        b.release()
        # The first two pages survived: only the last (deepest) one was evicted.
        assert c.extend(tokens).referenced == 8
    assert_cache_matches(engine, runner)


def test_exhaustion_is_a_clear_error_and_changes_nothing() -> None:
    engine, runner = make_engine(page_size=PS, num_pages=3)
    with engine.sequence() as a, engine.sequence() as b:
        a.extend(list(range(1, 11)))  # 3 pages, all held
        with pytest.raises(CacheExhaustedError, match="KV cache exhausted"):
            b.extend([1, 2, 3, 4, 99])
        assert len(b) == 0
        with pytest.raises(CacheExhaustedError):
            a.extend([1, 2, 3])  # needs a 4th page
        assert len(a) == 10
        assert_cache_matches(engine, runner)
        a.extend([11, 12])  # fits in the last page
        assert_cache_matches(engine, runner)


def test_rejects_bad_token_ids_without_changing_state() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=300)
    with engine.sequence() as seq:
        seq.extend([1, 2, 3])
        with pytest.raises(ValueError, match="out of range"):
            seq.extend([4, 300])
        assert seq.tokens == (1, 2, 3)
        assert_cache_matches(engine, runner)


def test_release_is_idempotent_and_released_sequences_refuse_work() -> None:
    engine, runner = make_engine(page_size=PS)
    seq = engine.sequence()
    seq.extend([1, 2, 3, 4, 5])
    seq.release()
    seq.release()
    assert seq.released and len(seq) == 0
    assert engine.stats().pages_used == 0
    for action in (lambda: seq.extend([1]), lambda: seq.truncate(0), seq.fork):
        with pytest.raises(SequenceReleasedError):
            action()
    assert_cache_matches(engine, runner)


def test_check_reports_corrupted_bookkeeping() -> None:
    engine, _ = make_engine(page_size=PS)
    with engine.sequence() as seq:
        seq.extend([1, 2, 3, 4, 5, 6])
        engine.check()
        info = engine._cache.pool.info(seq.page_table[0])
        info.refcount += 1
        with pytest.raises(EngineInvariantError, match="refcount 2 but 1 references"):
            engine.check()
        info.refcount -= 1
        info.tokens[0] = 99
        with pytest.raises(EngineInvariantError, match="differ|key does not match"):
            engine.check()
        info.tokens[0] = 1
        seq._table.tokens.append(7)  # KV length != token count
        with pytest.raises(EngineInvariantError, match="tokens"):
            engine.check()
        seq._table.tokens.pop()
        engine.check()


def test_stats_count_cumulative_tokens() -> None:
    engine, _ = make_engine(page_size=PS)
    with engine.sequence() as a, engine.sequence() as b:
        a.extend(list(range(1, 8)))
        b.extend(list(range(1, 8)) + [50])
        stats = engine.stats()
        assert (stats.tokens_computed, stats.tokens_referenced, stats.tokens_copied) == \
            (7 + 1, 4, 3)
        assert stats.sequences == 2
