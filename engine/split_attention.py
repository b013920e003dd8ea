"""Batch-1 decode attention on a CPU, split over the K/V length when the threads would idle.

torch's CPU flash-attention kernel (what SDPA runs here) hands its threads one unit of
work per (batch row, head, block of query rows). A batch-1 decode step of a GQA model
folds its query heads into the query rows (see `engine.model`), so it has one unit per
K/V head: SmolLM2's 3 on 2 threads run as 2 + 1, one thread idle for a third of the
attention, which after a long history is most of the step. Split each head's keys and
values into two halves, run as a batch of 2, and there are 6 units: 3 + 3. The halves are
merged by their log-sum-exp, as flash-decoding (Dao et al., 2023) merges its splits:
``out = sum_i out_i * softmax_i(lse_i)``.

The halves are views (`torch.as_strided` over the same storage), not copies. An odd span
splits into two halves of ``(span + 1) // 2`` keys that share the middle one; the second
half's copy of it is masked out (`split_mask`). Under `MIN_SPAN` keys the merge's small
ops cost more than the balance gains; what it gains above that is measured in
bench/results/engine-amd-epyc-2c-avx512-bf16.md (`bench/bench_engine.py`, decode @ depth).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["MIN_SPAN", "split_half", "split_mask", "attend"]

MIN_SPAN = 1024
"""The least K/V length (keys per head) that is split."""


def split_half(batch: int, kv_heads: int, span: int, threads: int, *, device: torch.device,
               masked: bool) -> int:
    """The length of each half (0: no split) of a decode step's attention: one row on a
    CPU, attending to all of at least `MIN_SPAN` keys (`masked` False), where splitting
    keeps more of `threads` busy than `kv_heads` units of work do."""
    if batch != 1 or masked or device.type != "cpu" or span < MIN_SPAN or threads < 2:
        return 0
    return (span + 1) // 2 if _busy(2 * kv_heads, threads) > _busy(kv_heads, threads) else 0


def _busy(units: int, threads: int) -> float:
    """The share of `threads` busy while `units` equal pieces of work run on them."""
    rounds = -(-units // threads)
    return units / (rounds * threads)


def split_mask(span: int, half: int, dtype: torch.dtype, device: torch.device
               ) -> torch.Tensor | None:
    """The additive mask of a split step's halves, ``[2, 1, 1, half]``: None for an even
    span; for an odd one, the key both halves share is masked in the second."""
    if half == 0 or 2 * half == span:
        return None
    mask = torch.zeros(2, 1, 1, half, dtype=dtype, device=device)
    mask[1, :, :, 0] = float("-inf")
    return mask


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
           attn_mask: torch.Tensor | None, scale: float, half: int) -> torch.Tensor:
    """SDPA of ``[B, kv_heads, groups, D]`` queries over ``[B, kv_heads, span, D]`` keys and
    values; with `half` (from `split_half`; `attn_mask` then from `split_mask`) in two
    halves, merged. ``[B, kv_heads, groups, D]`` in q's dtype."""
    if half == 0:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=attn_mask,
                                              scale=scale)
    shift = keys.shape[2] - half  # where the second half starts
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q.expand(2, -1, -1, -1), _halves(keys, half, shift), _halves(values, half, shift),
        attn_mask=attn_mask, scale=scale)[:2]
    weights = torch.softmax(lse, 0).unsqueeze(-1)
    return (out * weights).sum(0, keepdim=True).to(q.dtype)


def _halves(x: torch.Tensor, half: int, shift: int) -> torch.Tensor:
    """``[1, H, span, D]`` -> ``[2, H, half, D]``: keys [0, half) and [shift, shift + half),
    views of the same storage."""
    _, heads, _, dim = x.shape
    stride = x.stride()
    return torch.as_strided(x, [2, heads, half, dim],
                            [shift * stride[2], stride[1], stride[2], stride[3]],
                            x.storage_offset())
