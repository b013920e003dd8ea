"""KV storage slot copies and the paged runner's input checks."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.errors import EngineError
from engine.kv_storage import KVStorage
from engine.loader import runner_from_hf_model
from engine.runner import DecodeItem


def filled_storage() -> KVStorage:
    kv = KVStorage(num_layers=2, num_pages=4, page_size=3, num_kv_heads=2, head_dim=5)
    kv.k.copy_(torch.randn(kv.k.shape, generator=torch.Generator().manual_seed(0)))
    kv.v.copy_(torch.randn(kv.v.shape, generator=torch.Generator().manual_seed(1)))
    return kv


def test_copy_slots_copies_prefix_of_page_in_every_layer() -> None:
    kv = filled_storage()
    before_k, before_v = kv.k.clone(), kv.v.clone()
    kv.copy_slots(1, 3, 2)
    assert torch.equal(kv.k[:, 3, :2], before_k[:, 1, :2])
    assert torch.equal(kv.v[:, 3, :2], before_v[:, 1, :2])
    assert torch.equal(kv.k[:, 3, 2:], before_k[:, 3, 2:])  # rest of the page untouched
    untouched = [0, 1, 2]
    assert torch.equal(kv.k[:, untouched], before_k[:, untouched])


def test_flat_layer_view_addresses_page_slots() -> None:
    kv = filled_storage()
    k_flat, v_flat = kv.layer(1)
    assert torch.equal(k_flat[2 * 3 + 1], kv.k[1, 2, 1])
    v_flat[5].fill_(7.0)  # writes go through to page 1, slot 2
    assert bool((kv.v[1, 1, 2] == 7.0).all())


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
