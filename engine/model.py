"""A small Llama-family forward (RMSNorm, RoPE, GQA attention, SwiGLU) over paged K/V.

Shaped after gpt-fast's ``model.py``: the whole model is a handful of functions over plain
tensors, with K/V written by position and two small entry points, `prefill` (one sequence,
T new tokens) and `decode_one_token` (B sequences, one token each, one batched forward).
Numerics follow transformers' Llama/Qwen2 modelling code (fp32 RMSNorm and RoPE tables),
so fp32 logits match it to float rounding.

Paging (after vLLM's paged attention, done here with a gather): every new token's K/V is
written to its flat slot ``page * page_size + offset`` of the layer's storage; attention
then gathers the slots of positions [0, S) of each sequence into a dense ``[B, S]`` block,
with a boolean mask for causality, padding and sliding windows.
GQA without repeating K/V: the ``groups`` query heads that share a K/V head are folded into
the query-length axis, so SDPA sees ``[B, kv_heads, groups * T, head_dim]`` queries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.errors import UnsupportedModelError
from engine.kv_storage import KVStorage
from engine.model_config import ModelConfig

__all__ = [
    "LayerWeights",
    "Linear",
    "ModelWeights",
    "decode_one_token",
    "prefill",
    "rope_inv_freq",
    "weights_from_state_dict",
]


@dataclass(frozen=True)
class Linear:
    """A projection ``y = x W^T + b`` with its weight in the faster layout for the device."""

    weight: torch.Tensor
    """``[out, in]``, or ``[in, out]`` when `input_major`."""
    bias: torch.Tensor | None
    input_major: bool

    @classmethod
    def build(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
        """On CPU, a one-token matmul against a wide ``[in, out]`` weight streams memory
        faster than the ``[out, in]`` dot-product form (measured ~1.3-2x for out >= in with
        torch's CPU BLAS; the reverse for tall weights), so wide weights are stored
        transposed there. Other devices keep transformers' layout."""
        out_features, in_features = weight.shape
        if weight.device.type == "cpu" and out_features >= in_features:
            return cls(weight.t().contiguous(), bias, input_major=True)
        return cls(weight.contiguous(), bias, input_major=False)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_major:
            return F.linear(x, self.weight, self.bias)
        y = torch.matmul(x, self.weight)
        return y if self.bias is None else y + self.bias


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: torch.Tensor
    qkv: Linear
    """Q, K and V projections stacked on the output axis: ``(H + 2 * KV) * D`` outputs."""
    o: Linear
    mlp_norm: torch.Tensor
    gate_up: Linear
    """Gate and up projections stacked on the output axis: ``2 * intermediate`` outputs."""
    down: Linear


@dataclass(frozen=True)
class ModelWeights:
    embed: torch.Tensor
    """``[vocab, hidden]`` (possibly a transposed view of `lm_head`'s storage when tied)."""
    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor
    lm_head: Linear
    inv_freq: torch.Tensor
    """float32 ``[head_dim // 2]`` RoPE inverse frequencies (scaling already applied)."""


def weights_from_state_dict(cfg: ModelConfig, state: Mapping[str, torch.Tensor], *,
                            device: torch.device | str, dtype: torch.dtype) -> ModelWeights:
    """Take the weights of a transformers ``*ForCausalLM`` state dict (fused copies)."""

    def get(name: str) -> torch.Tensor:
        if name not in state:
            raise UnsupportedModelError(
                f"model_type {cfg.model_type!r}: weight {name!r} missing from the checkpoint"
            )
        return state[name].detach().to(device=device, dtype=dtype)

    def maybe(name: str, present: bool) -> torch.Tensor | None:
        return get(name) if present else None

    def cat(names: list[str]) -> torch.Tensor:
        return torch.cat([get(n) for n in names], dim=0)

    def cat_bias(weight_names: list[str], present: bool) -> torch.Tensor | None:
        return cat([n.replace(".weight", ".bias") for n in weight_names]) if present else None

    layers = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        qkv = [p + f"self_attn.{x}_proj.weight" for x in "qkv"]
        gate_up = [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]
        layers.append(LayerWeights(
            attn_norm=get(p + "input_layernorm.weight"),
            qkv=Linear.build(cat(qkv), cat_bias(qkv, cfg.qkv_bias)),
            o=Linear.build(get(p + "self_attn.o_proj.weight"),
                           maybe(p + "self_attn.o_proj.bias", cfg.o_bias)),
            mlp_norm=get(p + "post_attention_layernorm.weight"),
            gate_up=Linear.build(cat(gate_up), cat_bias(gate_up, cfg.mlp_bias)),
            down=Linear.build(get(p + "mlp.down_proj.weight"),
                              maybe(p + "mlp.down_proj.bias", cfg.mlp_bias)),
        ))
    embed = get("model.embed_tokens.weight")
    tied = cfg.tie_word_embeddings or "lm_head.weight" not in state
    lm_head = Linear.build(embed if tied else get("lm_head.weight"), None)
    if tied and lm_head.input_major:
        embed = lm_head.weight.t()  # one copy of the matrix serves both
    return ModelWeights(
        embed=embed,
        layers=tuple(layers),
        norm=get("model.norm.weight"),
        lm_head=lm_head,
        inv_freq=rope_inv_freq(cfg).to(device),
    )


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """float32 inverse frequencies, as transformers' rope init functions compute them."""
    dim = cfg.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    inv_freq = 1.0 / (cfg.rope_theta ** exponents)
    scaling = cfg.rope_scaling
    if scaling is None:
        return inv_freq
    if scaling.kind == "linear":
        return inv_freq / scaling.factor
    # llama3 (Llama 3.1): long wavelengths slowed by `factor`, short ones kept, a smooth
    # ramp between (after transformers' _compute_llama3_parameters).
    old_len = scaling.original_max_position_embeddings
    low_wavelen = old_len / scaling.low_freq_factor
    high_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * torch.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor)
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def prefill(cfg: ModelConfig, w: ModelWeights, kv: KVStorage, token_ids: torch.Tensor,
            positions: torch.Tensor, write_slots: torch.Tensor, read_slots: torch.Tensor,
            mask: torch.Tensor | None, *, all_logits: bool = False) -> torch.Tensor:
    """One sequence, T new tokens.

    token_ids, positions, write_slots: ``[T]``; read_slots: ``[S]`` flat slots of positions
    0 .. S-1 (S = last position + 1, the new tokens' slots included); mask: bool ``[T, S]``,
    True where query t may attend key s, or None for "all". Returns logits ``[T, vocab]``
    if all_logits else ``[1, vocab]``, in the compute dtype.
    """
    hidden = _forward(cfg, w, kv, token_ids[None], positions[None], write_slots,
                      read_slots[None], None if mask is None else mask[None, None])
    hidden = hidden[0] if all_logits else hidden[0, -1:]
    return _logits(cfg, w, hidden)


def decode_one_token(cfg: ModelConfig, w: ModelWeights, kv: KVStorage,
                     token_ids: torch.Tensor, positions: torch.Tensor,
                     write_slots: torch.Tensor, read_slots: torch.Tensor,
                     mask: torch.Tensor | None) -> torch.Tensor:
    """B sequences, one new token each, one batched forward.

    token_ids, positions, write_slots: ``[B]``; read_slots: ``[B, S]`` flat slots of
    positions 0 .. S-1 of each sequence (padded rows point at any finite slot); mask: bool
    ``[B, S]`` (True = attend), or None when every row attends to all S. Returns logits
    ``[B, vocab]`` in the compute dtype.
    """
    hidden = _forward(cfg, w, kv, token_ids[:, None], positions[:, None], write_slots,
                      read_slots, None if mask is None else mask[:, None, None, :])
    return _logits(cfg, w, hidden[:, 0])


def _forward(cfg: ModelConfig, w: ModelWeights, kv: KVStorage, token_ids: torch.Tensor,
             positions: torch.Tensor, write_slots: torch.Tensor, read_slots: torch.Tensor,
             mask: torch.Tensor | None) -> torch.Tensor:
    """token_ids/positions ``[B, T]``, write_slots ``[B*T]``, read_slots ``[B, S]``,
    mask ``[B, 1, T, S]`` or None. Returns final hidden states ``[B, T, hidden]``."""
    length = token_ids.shape[1]
    x = F.embedding(token_ids, w.embed)
    cos, sin = _rope_tables(w.inv_freq, positions, x.dtype)
    if mask is not None and length > 1 and cfg.kv_groups > 1:
        # Query rows are (group, t) after folding the groups into the length axis.
        mask = mask.repeat(1, 1, cfg.kv_groups, 1)
    flat_read = read_slots.reshape(-1)
    for index, layer in enumerate(w.layers):
        k_store, v_store = kv.layer(index)
        h = _rms_norm(x, layer.attn_norm, cfg.rms_norm_eps)
        x = x + _attention(cfg, layer, h, cos, sin, k_store, v_store, write_slots,
                           flat_read, read_slots.shape[1], mask)
        h = _rms_norm(x, layer.mlp_norm, cfg.rms_norm_eps)
        x = x + _mlp(layer, h)
    return x


def _attention(cfg: ModelConfig, layer: LayerWeights, h: torch.Tensor, cos: torch.Tensor,
               sin: torch.Tensor, k_store: torch.Tensor, v_store: torch.Tensor,
               write_slots: torch.Tensor, flat_read: torch.Tensor, span: int,
               mask: torch.Tensor | None) -> torch.Tensor:
    batch, length, _ = h.shape
    heads, kv_heads, dim, groups = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.kv_groups
    qkv = layer.qkv(h)
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q = _apply_rope(q.view(batch, length, heads, dim), cos, sin)
    k = _apply_rope(k.view(batch, length, kv_heads, dim), cos, sin)
    k_store.index_copy_(0, write_slots, k.reshape(batch * length, kv_heads, dim))
    v_store.index_copy_(0, write_slots, v.reshape(batch * length, kv_heads, dim))
    keys = k_store.index_select(0, flat_read).view(batch, span, kv_heads, dim).transpose(1, 2)
    values = v_store.index_select(0, flat_read).view(batch, span, kv_heads, dim).transpose(1, 2)
    # [B, T, H, D] -> [B, KV, groups * T, D]: query head h uses K/V head h // groups.
    q = q.transpose(1, 2).reshape(batch, kv_heads, groups * length, dim)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=dim ** -0.5)
    out = out.reshape(batch, heads, length, dim).transpose(1, 2).reshape(batch, length, heads * dim)
    return layer.o(out)


def _mlp(layer: LayerWeights, h: torch.Tensor) -> torch.Tensor:
    gate, up = layer.gate_up(h).chunk(2, dim=-1)
    return layer.down(F.silu(gate) * up)


def _logits(cfg: ModelConfig, w: ModelWeights, hidden: torch.Tensor) -> torch.Tensor:
    return w.lm_head(_rms_norm(hidden, w.norm, cfg.rms_norm_eps))


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def _rope_tables(inv_freq: torch.Tensor, positions: torch.Tensor,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin ``[B, T, 1, head_dim]`` computed in float32, then cast."""
    freqs = positions[..., None].float() * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
