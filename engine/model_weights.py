"""The model's weights as the forward takes them (`ModelWeights`, `LayerWeights`), built from
a transformers state dict in any weight format (`weights_from_state_dict`): projections
fused (Q/K/V in one, gate/up in one, see `fused_linears`) and made `engine.quantize.Linear`s
of the format, norms in float32, RoPE's tables (`engine.rope`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from engine.errors import UnsupportedModelError
from engine.model_config import ModelConfig
from engine.quantize import (
    DenseLinear,
    Linear,
    bf16_linear,
    bf16_packs_float16,
    float16_gemm,
    linear_from_quantized,
)
from engine.rope import RopeTables, rope_inv_freq
from engine.weight_formats import (
    DenseCopy,
    WeightFormat,
    dense_rows_for,
    format_for_linear,
    vnni_int8_for,
)
from engine.weight_quant import QuantizedTensors, quantize_linear

__all__ = ["LayerWeights", "ModelWeights", "fused_linears", "weights_from_state_dict"]


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: torch.Tensor
    """float32 ``[hidden]``, as are `mlp_norm` and the final `norm`."""
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
    rope: RopeTables
    """RoPE's cos / sin by position (inverse frequencies from `rope_inv_freq`)."""
    eps: torch.Tensor
    """The norms' epsilon, a 0-dim float32 tensor (as `engine.model`'s RMSNorm takes it)."""
    float32_from: int | None = None
    """From how many rows every layer projection is fbgemm's float16 GEMM (float32 in and
    out: `engine.quantize.Fp16PackedLinear` copies), if it ever is."""

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype: linears' inputs and outputs, attention and K/V."""
        return self.embed.dtype

    def activation_dtype(self, rows: int) -> torch.dtype:
        """The dtype of a forward's activations over `rows` rows: float32 where every
        projection takes and returns float32 there (`float32_from`), the compute dtype
        otherwise. K/V and attention stay in the compute dtype. Rounding to bfloat16
        between float32 GEMMs would only add conversions (~12 per layer)."""
        if self.float32_from is not None and rows >= self.float32_from:
            return torch.float32
        return self.dtype


def fused_linears(cfg: ModelConfig, state: Mapping[str, torch.Tensor]
                  ) -> Iterator[tuple[str, torch.Tensor, torch.Tensor | None]]:
    """(name, ``[out, in]`` weight, bias) of every projection in the fused layout, in the
    checkpoint's precision: ``layers.{i}.qkv|o|gate_up|down`` and ``lm_head``."""

    def get(name: str) -> torch.Tensor:
        if name not in state:
            raise UnsupportedModelError(
                f"model_type {cfg.model_type!r}: weight {name!r} missing from the checkpoint"
            )
        return state[name].detach()

    def cat(names: list[str], present: bool = True) -> torch.Tensor | None:
        return torch.cat([get(n) for n in names], dim=0) if present else None

    def bias_of(names: list[str], present: bool) -> torch.Tensor | None:
        return cat([n.replace(".weight", ".bias") for n in names], present)

    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        qkv = [p + f"self_attn.{x}_proj.weight" for x in "qkv"]
        o = [p + "self_attn.o_proj.weight"]
        gate_up = [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]
        down = [p + "mlp.down_proj.weight"]
        for name, names, bias in ((f"layers.{i}.qkv", qkv, cfg.qkv_bias),
                                  (f"layers.{i}.o", o, cfg.o_bias),
                                  (f"layers.{i}.gate_up", gate_up, cfg.mlp_bias),
                                  (f"layers.{i}.down", down, cfg.mlp_bias)):
            weight = cat(names)
            assert weight is not None
            yield name, weight, bias_of(names, bias)
    tied = cfg.tie_word_embeddings or "lm_head.weight" not in state
    yield "lm_head", get("model.embed_tokens.weight" if tied else "lm_head.weight"), None


def weights_from_state_dict(cfg: ModelConfig, state: Mapping[str, torch.Tensor], *,
                            device: torch.device | str, dtype: torch.dtype,
                            fmt: WeightFormat | None = None,
                            quantized: Mapping[str, QuantizedTensors] | None = None,
                            dense: DenseCopy | None = None) -> ModelWeights:
    """Take the weights of a transformers ``*ForCausalLM`` state dict (fused copies).

    `dtype` is the compute (activation and K/V) dtype. `fmt` ``int8``/``int4`` quantizes
    the projections, using the ready `quantized` tensors by `fused_linears` name where
    given (see `engine.weight_cache`); ``bf16`` rounds them to bfloat16 (see
    `engine.quantize.bf16_linear`; the embedding table too); otherwise the projections are
    dense in `dtype`. `dense`: int8/int4 linears also keep a 16-bit copy of that kind for
    many rows (see `engine.weight_formats.dense_copy_for`). The embedding table is in
    `dtype`, the norms in float32."""
    dev = torch.device(device)

    def get(name: str, as_dtype: torch.dtype = dtype) -> torch.Tensor:
        if name not in state:
            raise UnsupportedModelError(
                f"model_type {cfg.model_type!r}: weight {name!r} missing from the checkpoint"
            )
        return state[name].detach().to(device=dev, dtype=as_dtype)

    def get_f32(name: str) -> torch.Tensor:  # the norms: as loaded, not rounded to dtype
        return get(name, torch.float32)

    linears: dict[str, Linear] = {}
    packed = fmt == "bf16" and bf16_packs_float16(
        (weight for _, weight, _ in fused_linears(cfg, state)), dev)
    for name, weight, bias in fused_linears(cfg, state):
        if fmt in ("int8", "int4"):
            tensors = (quantized or {}).get(name) or quantize_linear(
                weight, format_for_linear(name, fmt))
            assert tensors is not None
            linears[name] = linear_from_quantized(tensors, bias, device=dev, dtype=dtype,
                                                  dense=dense,
                                                  dense_rows=dense_rows_for(name, dense),
                                                  vnni=vnni_int8_for(name, fmt, dev))
        elif fmt == "bf16":
            linears[name] = bf16_linear(weight, bias, device=dev, packed=packed)
        else:
            linears[name] = DenseLinear.build(
                weight.to(device=dev, dtype=dtype),
                None if bias is None else bias.to(device=dev, dtype=dtype))
    layers = tuple(LayerWeights(
        attn_norm=get_f32(f"model.layers.{i}.input_layernorm.weight"),
        qkv=linears[f"layers.{i}.qkv"],
        o=linears[f"layers.{i}.o"],
        mlp_norm=get_f32(f"model.layers.{i}.post_attention_layernorm.weight"),
        gate_up=linears[f"layers.{i}.gate_up"],
        down=linears[f"layers.{i}.down"],
    ) for i in range(cfg.num_layers))
    lm_head = linears["lm_head"]
    tied = cfg.tie_word_embeddings or "lm_head.weight" not in state
    embed: torch.Tensor | None = None
    if tied and isinstance(lm_head, DenseLinear):  # one copy of the matrix serves both
        embed = lm_head.weight.t() if lm_head.input_major else lm_head.weight
    if embed is None:
        embed = get("model.embed_tokens.weight")
        if fmt == "bf16":
            embed = embed.to(torch.bfloat16).to(dtype)
    return ModelWeights(
        embed=embed,
        layers=layers,
        norm=get_f32("model.norm.weight"),
        lm_head=lm_head,
        rope=RopeTables(rope_inv_freq(cfg).to(dev), dtype),
        eps=torch.full((), cfg.rms_norm_eps, dtype=torch.float32, device=dev),
        float32_from=_float32_from(layers),
    )


def _float32_from(layers: Sequence[LayerWeights]) -> int | None:
    """See `ModelWeights.float32_from`."""
    gemms = [float16_gemm(linear) for layer in layers
             for linear in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    if not gemms or any(gemm is None for gemm in gemms):
        return None
    return max(gemm[1] for gemm in gemms if gemm is not None)
