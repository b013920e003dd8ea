"""A small Llama-family forward (RMSNorm, RoPE, GQA attention, SwiGLU) over paged K/V.

Shaped after gpt-fast's ``model.py``: the whole model is a handful of functions over plain
tensors, with K/V written by position and two small entry points, `prefill` (one or more
sequences' new tokens, one forward) and `decode_one_token` (B sequences, one token each, one
batched forward).
Numerics follow transformers' Llama/Qwen2 modelling code (fp32 RMSNorm and RoPE tables),
so fp32 logits match it to float rounding.

Paging (after vLLM's paged attention, done here with a gather): every new token's K/V is
written to its flat slot ``page * page_size + offset`` of the layer's storage; attention
then gathers the whole pages holding positions [0, S) of each sequence into a dense
``[B, S]`` block (one page-row copy per page), with a boolean mask for causality, padding
and sliding windows. One sequence whose pages are consecutive (a fresh sequence's are,
while the block pool still has never-used pages, handed out in ascending order) is read
in place: a view of the storage, no copy. A decode step sets this up once for all layers
(`engine.kv_storage.StepKV`, which gathers every layer's pages at once when they are few).
Projections are `engine.quantize.Linear`s in any weight format.
GQA without repeating K/V: the ``groups`` query heads that share a K/V head are folded into
the query-length axis, so SDPA sees ``[B, kv_heads, groups * T, head_dim]`` queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from engine.kv_storage import KVStorage, StepKV
from engine.model_config import ModelConfig
from engine.model_weights import LayerWeights, ModelWeights
from engine.quantize import Fp16PackedLinear
from engine.rope import apply_rope
from engine.scripted_step import ScriptedLayers
from engine.split_attention import attend, split_half, split_mask

__all__ = ["PrefillPart", "decode_one_token", "prefill"]


class PrefillPart(NamedTuple):
    """One sequence's tokens in a prefill forward (see `prefill`)."""

    rows: slice
    """Its rows of the forward's flat token axis."""
    read_pages: torch.Tensor | int
    """``[P]`` page ids holding its positions 0 .. span-1, or the first of P consecutive
    pages that hold them (read in place)."""
    span: int
    """Its last position + 1 (the new tokens included)."""
    mask: torch.Tensor | None
    """bool ``[T, span]``, True where its query t may attend key s, or None for "all"."""


def prefill(cfg: ModelConfig, w: ModelWeights, kv: KVStorage, token_ids: torch.Tensor,
            positions: torch.Tensor, write_slots: torch.Tensor,
            parts: Sequence[PrefillPart], *, all_logits: bool = False) -> torch.Tensor:
    """New tokens of one or more sequences in one forward.

    token_ids, positions, write_slots: ``[N]``, the sequences' new tokens one after the
    other, each sequence's rows named by its `PrefillPart`. The projections and the MLP run
    once over all N rows (where several short prompts gain most: one call of many rows
    instead of many of few); attention runs per part over its own pages. Returns logits of
    every row ``[N, vocab]`` if all_logits, else of each part's last row ``[parts, vocab]``,
    in the compute dtype.
    """
    hidden = _forward(cfg, w, kv, token_ids, positions, write_slots, parts)
    if not all_logits:
        last = [part.rows.stop - 1 for part in parts]
        hidden = hidden[last[0]:last[0] + 1] if len(last) == 1 else hidden[last]
    return _logits(cfg, w, hidden)


def decode_one_token(cfg: ModelConfig, w: ModelWeights, kv: KVStorage,
                     token_ids: torch.Tensor, positions: torch.Tensor,
                     write_slots: torch.Tensor, read_pages: torch.Tensor | int, span: int,
                     mask: torch.Tensor | None, scripted: ScriptedLayers | None = None, *,
                     static: bool = False) -> torch.Tensor:
    """B sequences, one new token each, one batched forward.

    token_ids, positions, write_slots: ``[B]``; read_pages: ``[B, P]`` page ids holding
    positions 0 .. span-1 of each sequence (rows padded with any valid page), or for
    B = 1 the first of P consecutive pages that hold them (read in place); mask: bool
    ``[B, span]`` (True = attend), or None when every row attends to all span positions.
    Returns logits ``[B, vocab]`` in the compute dtype (float32 from an output projection
    with a VNNI copy, see `engine.weight_formats.vnni_int8_for`).

    Activations are ``[B, features]`` (no length axis) and every layer-independent piece
    (RoPE tables, K/V views, see `StepKV`) is set up once per step: at batch 1 the step's
    small ops, not the projections, are what this function can save. `scripted` runs the
    same layer loop in TorchScript where it covers the step (see `engine.scripted_step`).
    `static`: every layer gathers its pages from `read_pages` (a tensor) and nothing is
    read back to the host, so the step's work depends on its shapes alone (a CUDA graph's,
    `engine.graph_decode`; the caller notes the written pages, see `StepKV`).
    """
    batch = token_ids.shape[0]
    dtype = w.dtype
    heads, kv_heads, dim, groups = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.kv_groups
    rotated = heads + kv_heads
    x = w.embed.index_select(0, token_ids).float()  # the float32 residual stream
    cos, sin = w.rope.lookup(positions, span)  # [B, 1, head_dim]
    step = StepKV(kv, read_pages, span, write_slots, positions, per_layer=static)
    attn_mask = None if mask is None else _additive(mask[:, None, None, :], dtype)
    half = split_half(batch, kv_heads, span, torch.get_num_threads(), device=x.device,
                      masked=mask is not None)
    if half:
        attn_mask = split_mask(span, half, dtype, x.device)
    eps, scale = w.eps, dim ** -0.5
    views = step.layer_views() if scripted is not None and scripted.covers(batch) else None
    if scripted is not None and views is not None:
        x = scripted.run(x, cos, sin, views, attn_mask, eps, heads=heads, kv_heads=kv_heads,
                         dim=dim, groups=groups, half=half)
        step.finish()
        return _logits(cfg, w, x)
    act = w.activation_dtype(batch)
    cast = act != dtype  # float32 activations around the compute-dtype K/V and attention
    for index, layer in enumerate(w.layers):
        qkv = layer.qkv(_rms_norm(x, layer.attn_norm, eps, act)).view(batch, -1, dim)
        qk = apply_rope(qkv[:, :rotated], cos, sin)  # Q and K heads in one pass
        v = qkv[:, rotated:]
        if cast:
            qk, v = qk.to(dtype), v.to(dtype)
        keys, values = step.write_read(index, qk[:, heads:], v)
        # [B, H, D] -> [B, KV, groups, D]: query head h uses K/V head h // groups.
        out = attend(qk[:, :heads].view(batch, kv_heads, groups, dim), keys, values,
                     attn_mask, scale, half).reshape(batch, heads * dim)
        x = x + layer.o(out.to(act) if cast else out)
        x = x + _mlp(layer, _rms_norm(x, layer.mlp_norm, eps, act))
    step.finish()
    return _logits(cfg, w, x)


def _forward(cfg: ModelConfig, w: ModelWeights, kv: KVStorage, token_ids: torch.Tensor,
             positions: torch.Tensor, write_slots: torch.Tensor,
             parts: Sequence[PrefillPart]) -> torch.Tensor:
    """token_ids/positions/write_slots ``[N]``, `parts` as in `prefill`. Returns final
    hidden states ``[N, hidden]``."""
    dtype = w.dtype
    # The residual stream stays in float32 whatever the compute dtype (as llama.cpp
    # keeps it): the norms read it directly and the branches' outputs add into it.
    x = F.embedding(token_ids, w.embed).float()
    cos, sin = w.rope.lookup(positions, max(part.span for part in parts))  # [N, 1, head_dim]
    if cfg.kv_groups > 1:  # query rows are (group, t) after folding the groups in
        parts = [part._replace(mask=part.mask.repeat(cfg.kv_groups, 1))
                 if part.mask is not None and part.rows.stop - part.rows.start > 1 else part
                 for part in parts]
    eps = w.eps
    act = w.activation_dtype(token_ids.shape[0])
    for index, layer in enumerate(w.layers):
        h = _rms_norm(x, layer.attn_norm, eps, act)
        x = x + _attention(cfg, layer, h, cos, sin, kv, index, write_slots, parts, dtype)
        h = _rms_norm(x, layer.mlp_norm, eps, act)
        x = x + _mlp(layer, h)
    return x


def _attention(cfg: ModelConfig, layer: LayerWeights, h: torch.Tensor, cos: torch.Tensor,
               sin: torch.Tensor, kv: KVStorage, index: int, write_slots: torch.Tensor,
               parts: Sequence[PrefillPart], dtype: torch.dtype) -> torch.Tensor:
    """`h` in the activation dtype; K/V and attention in the compute `dtype`."""
    rows = h.shape[0]
    heads, kv_heads, dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    qkv = layer.qkv(h).view(rows, heads + 2 * kv_heads, dim)
    qk = apply_rope(qkv[:, :heads + kv_heads], cos, sin)  # Q and K heads in one pass
    v = qkv[:, heads + kv_heads:]
    if h.dtype != dtype:
        qk, v = qk.to(dtype), v.to(dtype)
    k_store, v_store = kv.layer(index)
    k_store.index_copy_(1, write_slots, qk[:, heads:].transpose(0, 1))
    v_store.index_copy_(1, write_slots, v.transpose(0, 1))
    k_pages, v_pages = kv.layer_pages(index)
    outs = [_part_attention(cfg, qk[part.rows, :heads], k_pages, v_pages, part)
            for part in parts]
    return layer.o((outs[0] if len(outs) == 1 else torch.cat(outs)).to(h.dtype))


def _part_attention(cfg: ModelConfig, q: torch.Tensor, k_pages: torch.Tensor,
                    v_pages: torch.Tensor, part: PrefillPart) -> torch.Tensor:
    """Queries ``[T, heads, head_dim]`` of one part over its pages; ``[T, heads * dim]``."""
    length = q.shape[0]
    heads, kv_heads, dim, groups = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.kv_groups
    read = part.read_pages
    if isinstance(read, int):  # consecutive pages: a view, no copy
        end = read + (part.span + k_pages.shape[2] - 1) // k_pages.shape[2]
        k_run, v_run = k_pages[:, read:end], v_pages[:, read:end]
    else:
        # Whole pages are gathered (page-sized rows copy faster than slot-sized ones).
        k_run, v_run = k_pages.index_select(1, read), v_pages.index_select(1, read)
    # Keys past `span` in the last page are sliced off: [1, KV, span, D].
    keys = k_run.view(kv_heads, -1, dim)[None, :, :part.span]
    values = v_run.view(kv_heads, -1, dim)[None, :, :part.span]
    # [T, H, D] -> [1, KV, groups * T, D]: query head h uses K/V head h // groups.
    q = q.transpose(0, 1).reshape(1, kv_heads, groups * length, dim)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=part.mask,
                                         scale=dim ** -0.5)
    return out.reshape(heads, length, dim).transpose(0, 1).reshape(length, heads * dim)


def _mlp(layer: LayerWeights, h: torch.Tensor) -> torch.Tensor:
    gate, up = layer.gate_up(h).chunk(2, dim=-1)
    return layer.down(F.silu(gate) * up)


def _logits(cfg: ModelConfig, w: ModelWeights, hidden: torch.Tensor) -> torch.Tensor:
    # A float16 output projection multiplies float32 activations: none rounded on the way.
    dtype = torch.float32 if isinstance(w.lm_head, Fp16PackedLinear) else w.dtype
    return w.lm_head(_rms_norm(hidden, w.norm, w.eps, dtype))


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean attention mask (True = attend) as the additive one SDPA makes of it (0 and
    -inf in the compute dtype), made once per step instead of in each layer's SDPA call:
    the same values, so the same results."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        mask.logical_not(), float("-inf"))


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: torch.Tensor, dtype: torch.dtype
              ) -> torch.Tensor:
    """transformers' RMSNorm, ``x * rsqrt(mean(x^2) + eps) * weight``, of the float32
    residual stream `x` with the float32 `weight`, rounded to the compute `dtype`; `eps`
    is a 0-dim float32 tensor on x's device. The mean of squares comes from one vector-norm
    reduction: five single-kernel ops, where torch.rms_norm's CPU composite runs ~15
    (slower at one row, and a decode step has 61 norms). (transformers rounds
    before the weight in lower precisions; rounding once, after it, is closer to float32.)"""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    scale = torch.rsqrt(torch.addcmul(eps, norm, norm, value=1.0 / x.shape[-1]))
    y = torch.mul(x, scale).mul_(weight)
    return y if dtype == torch.float32 else y.to(dtype)
