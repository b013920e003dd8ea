"""Batch-1 decode attention split over the K/V length (`engine.split_attention`): when it
splits, that the halves are views whose merge is the attention, and that a decode step with
it gives the logits of one without (and the same, bit for bit, in TorchScript)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from engine import split_attention
from engine.split_attention import MIN_SPAN, attend, split_half, split_mask
from tests.engine.test_scripted_step import decode_both, runners

CPU = torch.device("cpu")


@pytest.mark.parametrize(("batch", "kv_heads", "span", "threads", "device", "masked", "half"), [
    (1, 3, 2000, 2, "cpu", False, 1000),   # SmolLM2 on 2 threads: 2 + 1 -> 3 + 3
    (1, 3, 2001, 2, "cpu", False, 1001),   # odd: two halves sharing the middle key
    (1, 3, 2000, 3, "cpu", False, 0),      # one head per thread already
    (1, 3, 2000, 7, "cpu", False, 1000),   # 3 of 7 busy -> 6 of 7
    (1, 2, 2000, 2, "cpu", False, 0),
    (1, 3, 2000, 1, "cpu", False, 0),      # one thread: the merge would only cost
    (1, 3, MIN_SPAN - 1, 2, "cpu", False, 0),  # too short to pay for the merge
    (2, 3, 2000, 2, "cpu", False, 0),      # a batch has units enough
    (1, 3, 2000, 2, "cpu", True, 0),       # a mask (a sliding window) is not split
    (1, 3, 2000, 2, "meta", False, 0),     # not a CPU
])
def test_which_steps_split(batch: int, kv_heads: int, span: int, threads: int, device: str,
                           masked: bool, half: int) -> None:
    assert split_half(batch, kv_heads, span, threads, device=torch.device(device),
                      masked=masked) == half


@pytest.mark.parametrize("span", [1024, 1025, 2000, 3001])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_merged_halves_are_the_attention(span: int, dtype: torch.dtype) -> None:
    torch.manual_seed(span)
    # Heads on consecutive storage as the K/V pages are, read as [1, heads, span, dim] views.
    store_k = torch.randn(3, span + 40, 64).to(dtype)
    store_v = torch.randn(3, span + 40, 64).to(dtype)
    keys, values = store_k[None, :, :span], store_v[None, :, :span]
    q = torch.randn(1, 3, 3, 64).to(dtype)
    half = split_half(1, 3, span, 2, device=CPU, masked=False)
    assert half == (span + 1) // 2
    mask = split_mask(span, half, dtype, CPU)
    assert (mask is None) == (span % 2 == 0)
    out = attend(q, keys, values, mask, 0.125, half)
    want = F.scaled_dot_product_attention(q.double(), keys.double(), values.double(),
                                          scale=0.125)
    assert out.shape == q.shape and out.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 4e-3
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=0)
    # Unsplit SDPA in this dtype is no closer than that.
    plain = attend(q, keys, values, None, 0.125, 0)
    assert (plain.double() - want).abs().max() < tol
    # The halves are views of the storage: nothing was copied.
    halves = split_attention._halves(keys, half, span - half)
    assert halves.untyped_storage().data_ptr() == store_k.untyped_storage().data_ptr()
    assert torch.equal(halves[1, :, -1], keys[0, :, span - 1])


@pytest.fixture
def four_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Steps split from 8 keys on, with 4 threads for the tiny models' 2 K/V heads."""
    monkeypatch.setattr(split_attention, "MIN_SPAN", 8)
    threads = torch.get_num_threads()
    torch.set_num_threads(4)
    yield
    torch.set_num_threads(threads)


def test_a_split_decode_step_gives_the_logits_of_an_unsplit_one(
        tiny_llama: Any, four_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    split_runner, plain_runner = runners(tiny_llama, "fp32")
    steps = []
    real_attend = split_attention.attend

    def spy(*args: Any) -> torch.Tensor:
        steps.append(args[-1])
        return real_attend(*args)

    monkeypatch.setattr("engine.model.attend", spy)
    prompt = list(range(3, 40))
    table = list(range(0, 12))  # consecutive pages: read in place
    logits = decode_both(split_runner, plain_runner, [prompt], [table], steps=5)
    split = [a for a, _ in logits]
    assert steps and all(half > 0 for half in steps)  # every layer of every step split
    # The same steps with the split off (a single thread).
    torch.set_num_threads(1)
    fresh, _ = runners(tiny_llama, "fp32")
    steps.clear()
    unsplit = [a for a, _ in decode_both(fresh, plain_runner, [prompt], [table], steps=5)]
    assert steps and not any(steps)
    for a, b in zip(split, unsplit, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_a_split_step_is_bit_for_bit_the_same_in_torchscript(
        tiny_llama: Any, four_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    halves: list[int] = []
    real_half = split_attention.split_half

    def spy(*args: Any, **kwargs: Any) -> int:
        halves.append(real_half(*args, **kwargs))
        return halves[-1]

    monkeypatch.setattr("engine.model.split_half", spy)
    scripted, plain = runners(tiny_llama, "int4")
    assert scripted.scripted is not None
    for a, b in decode_both(scripted, plain, [list(range(3, 40))], [list(range(0, 12))],
                            steps=5):
        assert torch.equal(a, b)
    assert len(halves) == 10 and all(halves)  # both runners' steps split
