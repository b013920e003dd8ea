"""KV storage slot copies and the paged runner's input checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.errors import EngineError
from engine.kv_storage import KVStorage, StepKV, zeros
from engine.loader import runner_from_hf_model
from engine.runner import DecodeItem


def token_major(store: torch.Tensor) -> torch.Tensor:
    """The storage's ``[layers, kv_heads, pages, page_size, head_dim]`` as ``[layers, pages,
    page_size, kv_heads, head_dim]`` (a view), the order a page table addresses."""
    return store.permute(0, 2, 3, 1, 4)


def filled_storage() -> KVStorage:
    kv = KVStorage(num_layers=2, num_pages=4, page_size=3, num_kv_heads=2, head_dim=5)
    kv.k.copy_(torch.randn(kv.k.shape, generator=torch.Generator().manual_seed(0)))
    kv.v.copy_(torch.randn(kv.v.shape, generator=torch.Generator().manual_seed(1)))
    return kv


def test_copy_slots_copies_prefix_of_page_in_every_layer() -> None:
    kv = filled_storage()
    before_k, before_v = token_major(kv.k.clone()), token_major(kv.v.clone())
    kv.copy_slots(1, 3, 2)
    k, v = token_major(kv.k), token_major(kv.v)
    assert torch.equal(k[:, 3, :2], before_k[:, 1, :2])
    assert torch.equal(v[:, 3, :2], before_v[:, 1, :2])
    assert torch.equal(k[:, 3, 2:], before_k[:, 3, 2:])  # rest of the page untouched
    untouched = [0, 1, 2]
    assert torch.equal(k[:, untouched], before_k[:, untouched])


def _resident_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads Linux's VmRSS")
def test_a_new_pool_is_zeros_and_takes_memory_only_where_it_is_written() -> None:
    before = _resident_mib()
    pool = zeros((8, 3, 4096, 16, 64), torch.bfloat16, "cpu")  # 192 MiB
    assert _resident_mib() - before < 64  # torch.zeros: +192
    assert pool.shape == (8, 3, 4096, 16, 64) and pool.dtype == torch.bfloat16
    assert pool.is_contiguous() and pool.data_ptr() % 64 == 0
    pool[:, :, 7].fill_(1.5)  # one page of every layer and head
    assert _resident_mib() - before < 64
    assert float(pool[:, :, 7].sum()) == 1.5 * 8 * 3 * 16 * 64
    sample = pool[:, :, ::97]  # untouched pages read as zeros (padding reads are finite)
    assert int(torch.count_nonzero(sample)) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_its_own_copy_of_the_pool() -> None:
    pool = zeros((2, 2, 8, 4, 8), torch.float32, "cpu")
    pid = os.fork()
    if pid == 0:  # the child: write (through numpy: no torch thread pool after a fork),
        pool.numpy().fill(3.0)  # then leave without running the parent's cleanup
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert int(torch.count_nonzero(pool)) == 0  # a shared map would read 3.0 here


def test_a_new_storage_reads_zeros_everywhere() -> None:
    kv = KVStorage(num_layers=2, num_pages=4, page_size=3, num_kv_heads=2, head_dim=5,
                   dtype=torch.bfloat16)
    assert kv.k.dtype == kv.v.dtype == torch.bfloat16
    assert int(torch.count_nonzero(kv.k)) == int(torch.count_nonzero(kv.v)) == 0
    assert kv.k.data_ptr() != kv.v.data_ptr()


def test_flat_layer_view_addresses_page_slots() -> None:
    kv = filled_storage()
    k_flat, v_flat = kv.layer(1)
    assert k_flat.shape == (2, 4 * 3, 5)  # [kv_heads, slots, head_dim]
    assert torch.equal(k_flat[:, 2 * 3 + 1], token_major(kv.k)[1, 2, 1])
    v_flat[:, 5].fill_(7.0)  # writes go through to page 1, slot 2
    assert bool((token_major(kv.v)[1, 1, 2] == 7.0).all())


def mirrored_pages(copy: torch.Tensor, row: int, count: int) -> torch.Tensor:
    """A row of `KVStorage.mirror`'s copy as ``[layers, kv_heads, count, page_size, dim]``."""
    layers, heads, _, _, dim = copy.shape
    return copy[:, :, row, :count * 3].reshape(layers, heads, count, 3, dim)


def test_mirror_copies_each_rows_pages() -> None:
    kv = filled_storage()
    k, v = kv.mirror(torch.tensor([[3, 0], [1, 3]]))
    assert k.shape[:3] == (2, 2, 2) and k.shape[3] >= 2 * 3
    assert torch.equal(mirrored_pages(k, 0, 2), kv.k[:, :, [3, 0]])
    assert torch.equal(mirrored_pages(v, 1, 2), kv.v[:, :, [1, 3]])
    k[:, :, 0].fill_(9.0)  # a copy: the storage is untouched
    assert not bool((kv.k == 9.0).any())


def test_copy_slots_rejects_bad_arguments() -> None:
    kv = filled_storage()
    with pytest.raises(IndexError):
        kv.copy_slots(0, 4, 1)
    with pytest.raises(ValueError):
        kv.copy_slots(0, 1, 4)


def test_runner_rejects_short_page_tables_and_bad_ids(tiny_llama: Any) -> None:
    runner = runner_from_hf_model(tiny_llama, page_size=4, num_pages=8)
    with pytest.raises(EngineError, match="page table"):
        runner.prefill([0, 1], 0, list(range(3, 12)))  # 9 tokens need 3 pages
    with pytest.raises(EngineError, match="page id"):
        runner.prefill([0, 8], 0, list(range(3, 9)))
    with pytest.raises(EngineError, match="token id"):
        runner.prefill([0], 0, [runner.vocab_size])
    with pytest.raises(EngineError, match="page table"):
        runner.decode([DecodeItem([0], 4, 5)])
    with pytest.raises(EngineError):
        runner.decode([])


@pytest.mark.parametrize("gather_all", [True, False])
def test_step_kv_writes_and_reads_like_the_storage(gather_all: bool) -> None:
    """Rows on scattered pages (a padded one too), gathered for all layers at once or per
    layer: every layer reads its pages with the step's new K/V in place, and the storage
    ends up holding the new K/V at the written slots and nothing else changed."""
    kv = filled_storage()
    if not gather_all:
        kv.mirror_bytes = 0
    size = kv.page_size
    rows = [[2, 0], [3, 2]]  # row 1 reads page 2 too (shared prefix), writes into page 3
    positions = [4, 1]  # row 0: 5 positions on pages 2, 0; row 1: 2 positions, padded
    slots = [rows[0][1] * size + 1, rows[1][0] * size + 1]
    new_k = torch.randn(2, 2, 2, 5, generator=torch.Generator().manual_seed(2))
    new_v = torch.randn(2, 2, 2, 5, generator=torch.Generator().manual_seed(3))
    expected_k, expected_v = token_major(kv.k).clone(), token_major(kv.v).clone()
    for layer in range(2):
        expected_k[layer].view(-1, 2, 5)[slots] = new_k[layer]
        expected_v[layer].view(-1, 2, 5)[slots] = new_v[layer]
    span = 5
    step = StepKV(kv, torch.tensor(rows), span, torch.tensor(slots), torch.tensor(positions))
    for layer in range(2):
        keys, values = step.write_read(layer, new_k[layer], new_v[layer])
        assert keys.shape == values.shape == (2, 2, span, 5)
        for row, pages in enumerate(rows):
            want_k = expected_k[layer, pages].reshape(-1, 2, 5)[:span].transpose(0, 1)
            want_v = expected_v[layer, pages].reshape(-1, 2, 5)[:span].transpose(0, 1)
            n = positions[row] + 1  # what the row's mask lets it see
            assert torch.equal(keys[row, :, :n], want_k[:, :n])
            assert torch.equal(values[row, :, :n], want_v[:, :n])
    step.finish()
    assert torch.equal(token_major(kv.k), expected_k)
    assert torch.equal(token_major(kv.v), expected_v)


def test_the_mirror_holds_up_to_a_share_of_the_storage(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """Rows whose pages hold up to a quarter of the storage's bytes are gathered once for
    every layer and kept (a long conversation's history, on pages that are not one run);
    more are gathered per layer. The 32 MB floor is lowered so a small storage shows it."""
    monkeypatch.setattr("engine.kv_storage.GATHER_ALL_BYTES", 0)
    kv = KVStorage(num_layers=2, num_pages=16, page_size=3, num_kv_heads=2, head_dim=5)
    assert kv.mirror_bytes == kv.nbytes() // 4  # K and V of 4 of the 16 pages
    slot = torch.tensor([3 * 3 + 2])

    def gathered_once(pages: list[int]) -> bool:
        span = 3 * len(pages)
        step = StepKV(kv, torch.tensor([pages]), span, slot, torch.tensor([span - 1]))
        return step.layer_views() is not None

    assert gathered_once([5, 1, 9, 3])  # 4 scattered pages: the kept copy
    assert kv.mirrored
    assert not gathered_once([5, 1, 9, 7, 3])  # 5: each layer gathers its own
    assert not kv.mirrored  # the step writes page 3 in the storage: the copy is dropped


def test_step_kv_reads_consecutive_pages_in_place() -> None:
    kv = filled_storage()
    step = StepKV(kv, 1, 5, torch.tensor([2 * 3 + 1]), torch.tensor([4]))  # page 2, slot 1
    new = torch.full((1, 2, 5), 9.0)
    keys, values = step.write_read(1, new, new)
    assert keys.shape == (1, 2, 5, 5)
    assert keys.data_ptr() == kv.k[1, 0, 1].data_ptr()  # a view of the storage
    assert keys[0, 0].is_contiguous()  # a head's keys: one run
    k, v = token_major(kv.k), token_major(kv.v)
    assert bool((k[1, 2, 1] == 9.0).all()) and bool((keys[0, :, 4] == 9.0).all())
    assert torch.equal(values[0].transpose(0, 1), v[1, 1:3].reshape(-1, 2, 5)[:5])


def test_mirror_keeps_its_copy_between_steps_and_drops_it_on_outside_writes() -> None:
    """A step on pages that are not one run reads a copy of them that the next step reuses
    (copying only pages a row did not hold); a write to a held page by any other path (a
    prefill, a slot copy, an in-place step) makes the next step copy afresh, so a step
    never reads stale K/V."""
    kv = filled_storage()
    k, _ = kv.mirror(torch.tensor([[2, 0]]))
    assert torch.equal(mirrored_pages(k, 0, 2), kv.k[:, :, [2, 0]])
    first = k.data_ptr()
    kv.k[:, :, 3].fill_(5.0)  # page 3 joins below: copied then
    kv.k[:, :, 2].fill_(6.0)  # page 2 is held: a write nobody noted is not seen
    k, _ = kv.mirror(torch.tensor([[2, 0, 3]]))
    assert k.data_ptr() == first
    assert bool((mirrored_pages(k, 0, 3)[:, :, 2] == 5.0).all())
    assert not bool((mirrored_pages(k, 0, 3) == 6.0).any())  # (past them: anything)
    kv.note_writes([1])  # not held: the copy stays
    assert kv.mirrored
    kv.note_writes([0])  # held: the next call copies everything
    assert not kv.mirrored
    k, _ = kv.mirror(torch.tensor([[2, 0, 3]]))
    assert torch.equal(mirrored_pages(k, 0, 3), kv.k[:, :, [2, 0, 3]])
    kv.copy_slots(1, 3, 2)  # into a held page
    assert not kv.mirrored
    kv.mirror(torch.tensor([[2, 0]]))
    StepKV(kv, 1, 5, torch.tensor([2 * 3 + 1]), torch.tensor([4]))  # in place, into page 2
    assert not kv.mirrored
    # Two rows whose second grows a page: only that row's new page is copied.
    kv.mirror(torch.tensor([[1, 1], [0, 0]]))  # row 1 padded with its first page
    kv.k[:, :, 2].fill_(7.0)
    kv.k[:, :, 1].fill_(8.0)  # held, unnoted: not seen
    k, _ = kv.mirror(torch.tensor([[1, 1], [0, 2]]))
    assert bool((mirrored_pages(k, 1, 2)[:, :, 1] == 7.0).all())
    assert not bool((mirrored_pages(k, 0, 2) == 8.0).any())


def test_one_row_steps_on_scattered_pages_match_a_fresh_prefill(tiny_llama: Any) -> None:
    """Decode steps of one sequence on scattered pages (read through the kept copy), with
    its last tokens rewritten by a prefill midway (a barge-in's cut and re-extension), give
    the logits of a fresh prefill of the same tokens."""
    runner = runner_from_hf_model(tiny_llama, page_size=4, num_pages=32)
    fresh = runner_from_hf_model(tiny_llama, page_size=4, num_pages=32)
    ids = list(range(3, 40))
    table = [9, 2, 30, 5, 17, 11, 7, 21, 14, 1]
    runner.prefill(table, 0, ids[:10])
    for pos in range(10, 30):
        if pos == 20:  # cut back to 18 tokens and extended with others
            ids[18:20] = [60, 61]
            runner.prefill(table, 18, ids[18:20])
        ours = runner.decode([DecodeItem(table, pos, ids[pos])])
        want = fresh.prefill(list(range(8)), 0, ids[:pos + 1])  # in place, no copy
        assert float((ours - want).abs().max()) < 1e-4, pos
