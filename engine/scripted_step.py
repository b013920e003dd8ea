"""The decode step's layer loop as TorchScript, for int4 weights and float16 copies on CPU.

At batch 1 a decode step on a CPU is mostly small calls: ~1,000 torch calls from Python per
step (norms, RoPE, K/V writes, attention, residual adds) around 121 int4 projections.
The same loop run by TorchScript's interpreter instead of Python is faster with
bitwise-identical logits: the same aten kernels in the same order, without Python
between them. Scripting takes a few milliseconds once.

Steps of as many rows as take the projections' float16 copies (AVX2 CPUs, see
`engine.weight_formats.dense_copy_for`), and every step of the ``bf16`` format (its
projections are those GEMMs), run a second scripted loop over fbgemm's packed float16
weights, float32 activations around the compute-dtype K/V as in the Python loop
(`engine.model_weights.ModelWeights.activation_dtype`): each Python call of an fbgemm op
goes through torch's Python op dispatch, which a small CPU pays for on every projection.

`torch.jit.script` is deprecated upstream in favour of `torch.compile`, which compiled
this step for ~2 minutes and ran it slower here; torch is pinned (2.13), and the engine
falls back to the Python loop (`engine.model.decode_one_token`) for anything this does not
cover: other weight formats, other devices, a batch that takes the dense prefill copy,
K/V gathered per layer, or a failure to script (logged once).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from engine.quantize import Int4Linear, Int8Linear, float16_gemm
from engine.split_attention import attend
from engine.weight_formats import DENSE_ROWS

__all__ = ["ScriptedLayers"]

log = logging.getLogger(__name__)


class ScriptedLayers:
    """Runs every layer of a decode step (see `engine.model.decode_one_token`) in one
    TorchScript call. Build with `ScriptedLayers.build`; call through `run`."""

    def __init__(self, module: Any | None, rows: int = DENSE_ROWS,
                 many: Any | None = None) -> None:
        self._module = module
        """The scripted `_Int4Layers` for steps of fewer than `rows` rows, if any: it holds
        the weights, so a call passes only the step's tensors (passing ~420 weight tensors
        converted them on every call: ~70 us of a ~6 ms step)."""
        self._rows = rows
        """Steps of fewer rows run the int4 loop; from this many, the projections' 16-bit
        copies."""
        self._many = many
        """The scripted `_Fp16Layers` for steps of `rows` rows or more, if the copies are
        float16 (or, with no int4 loop, for every step)."""

    @classmethod
    def build(cls, layers: Sequence[Any]) -> ScriptedLayers | None:
        """For `engine.model_weights.LayerWeights` whose projections are all CPU `Int4Linear`s of
        one group size (the int4 loop), or all float16-packed, alone or as the copies of
        int8/int4 linears (the float16 loop); None when neither, or when scripting fails."""
        linears = [lin for layer in layers for lin in
                   (layer.qkv, layer.o, layer.gate_up, layer.down)]
        if not linears:
            return None
        module = _script(_int4_layers(layers, linears))
        packs = _fp16_packs(layers)
        many = None if packs is None else _script(_Fp16Layers(*packs))
        if module is None and many is None:
            return None
        copies = [lin.dense_rows for lin in linears
                  if isinstance(lin, Int8Linear | Int4Linear) and lin.dense is not None]
        # Where the copies start; with none, the bf16 format's float16 GEMMs from one row.
        rows = min(copies, default=1 if many is not None else DENSE_ROWS)
        return cls(module, rows, many)

    def covers(self, batch: int) -> bool:
        """Whether a step of `batch` rows runs here: with the int4 loop, fewer rows than take
        the projections' 16-bit copies (see `engine.weight_formats.dense_rows_for`); with
        the float16 loop, those that do."""
        if batch < self._rows:
            return self._module is not None
        return self._many is not None

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            views: tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor,
                         list[torch.Tensor], list[torch.Tensor]],
            attn_mask: torch.Tensor | None, eps: torch.Tensor, *, heads: int, kv_heads: int,
            dim: int, groups: int, half: int = 0) -> torch.Tensor:
        """The residual stream after the last layer; `views` from `StepKV.layer_views`. A
        step `covers` said yes to; `half` as `engine.split_attention.attend` takes it."""
        module = self._module if x.shape[0] < self._rows else self._many
        assert module is not None
        result: torch.Tensor = module.forward(
            x, cos, sin, *views, attn_mask, eps, heads, kv_heads, dim, groups, dim ** -0.5,
            half)
        return result


def _script(module: torch.nn.Module | None) -> Any | None:
    """`module` scripted; None (logged) if TorchScript fails: the Python loop runs."""
    if module is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # see the module docstring
            return torch.jit.script(module)
    except Exception as exc:  # an unexpected TorchScript failure
        log.warning("decode step: TorchScript unavailable for %s (%s: %s); using the Python "
                    "loop", type(module).__name__, type(exc).__name__, exc)
        return None


def _int4_layers(layers: Sequence[Any], linears: list[Any]) -> _Int4Layers | None:
    if not all(isinstance(lin, Int4Linear) and lin.packed.device.type == "cpu"
               for lin in linears):
        return None
    groups = {lin.group for lin in linears}
    if len(groups) != 1:
        return None
    lists = _norms(layers)
    for name in ("qkv", "o", "gate_up", "down"):
        lins = [getattr(layer, name) for layer in layers]
        lists[f"{name}_w"] = [lin.packed for lin in lins]
        lists[f"{name}_sz"] = [lin.scales_and_zeros for lin in lins]
        lists[f"{name}_b"] = [lin.bias for lin in lins]
    return _Int4Layers(lists, groups.pop())


def _fp16_packs(layers: Sequence[Any]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]
                                                ] | None:
    """The float16 loop's norms and packed weights, and the biases, by projection; None
    unless every projection runs a float16 GEMM (`engine.quantize.float16_gemm`: its own,
    bias packed in, or an int8/int4 linear's copy, the linear keeping the bias)."""
    packs: dict[str, list[Any]] = _norms(layers)
    biases: dict[str, list[Any]] = {}
    for name in ("qkv", "o", "gate_up", "down"):
        for layer in layers:
            lin = getattr(layer, name)
            gemm = float16_gemm(lin)
            if gemm is None:
                return None
            packs.setdefault(name, []).append(gemm[0].packed)
            biases.setdefault(name, []).append(None if gemm[0] is lin else lin.bias)
    return packs, biases


def _norms(layers: Sequence[Any]) -> dict[str, list[Any]]:
    return {"attn_norm": [layer.attn_norm for layer in layers],
            "mlp_norm": [layer.mlp_norm for layer in layers]}


class _Int4Layers(torch.nn.Module):
    """Every layer's norms and int4 projections, as lists by kind, and the decode step's
    layer loop over them."""

    if TYPE_CHECKING:  # for mypy only: TorchScript cannot read postponed annotations here
        attn_norm: list[torch.Tensor]
        mlp_norm: list[torch.Tensor]
        qkv_w: list[torch.Tensor]
        qkv_sz: list[torch.Tensor]
        qkv_b: list[torch.Tensor | None]
        o_w: list[torch.Tensor]
        o_sz: list[torch.Tensor]
        o_b: list[torch.Tensor | None]
        gate_up_w: list[torch.Tensor]
        gate_up_sz: list[torch.Tensor]
        gate_up_b: list[torch.Tensor | None]
        down_w: list[torch.Tensor]
        down_sz: list[torch.Tensor]
        down_b: list[torch.Tensor | None]

    def __init__(self, lists: dict[str, list[Any]], group: int) -> None:
        super().__init__()
        for name, values in lists.items():  # biases may be None: typed for TorchScript
            kind = list[torch.Tensor | None] if name.endswith("_b") else list[torch.Tensor]
            setattr(self, name, torch.jit.Attribute(values, kind))
        self.group = group

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                k_dst: list[torch.Tensor], v_dst: list[torch.Tensor], slots: torch.Tensor,
                k_read: list[torch.Tensor], v_read: list[torch.Tensor],
                attn_mask: torch.Tensor | None, eps: torch.Tensor, heads: int, kv_heads: int,
                dim: int, groups: int, scale: float, half: int) -> torch.Tensor:
        # The same calls, in the same order, as the Python loop in
        # engine.model.decode_one_token (with _rms_norm, engine.rope.apply_rope, StepKV.write_read,
        # _mlp and Int4Linear.__call__ inlined), so the logits are bitwise the same.
        batch = x.shape[0]
        dtype = cos.dtype
        group = self.group
        for i in range(len(self.qkv_w)):
            h = _rms(x, self.attn_norm[i], eps, dtype)
            qkv = _linear(h, self.qkv_w[i], self.qkv_sz[i], self.qkv_b[i], group).view(
                batch, -1, dim)
            out = _attend(qkv, cos, sin, k_dst[i], v_dst[i], slots, k_read[i], v_read[i],
                          attn_mask, heads, kv_heads, dim, groups, scale, half)
            x = x + _linear(out, self.o_w[i], self.o_sz[i], self.o_b[i], group)
            gate_up = _linear(_rms(x, self.mlp_norm[i], eps, dtype), self.gate_up_w[i],
                              self.gate_up_sz[i], self.gate_up_b[i], group)
            gate, up = gate_up.chunk(2, dim=-1)
            x = x + _linear(F.silu(gate) * up, self.down_w[i], self.down_sz[i],
                            self.down_b[i], group)
        return x


class _Fp16Layers(torch.nn.Module):
    """Every layer's norms and float16-packed projections (fbgemm), and the decode step's
    layer loop over them in float32 activations."""

    if TYPE_CHECKING:
        attn_norm: list[torch.Tensor]
        mlp_norm: list[torch.Tensor]
        qkv: list[Any]
        o: list[Any]
        gate_up: list[Any]
        down: list[Any]
        qkv_b: list[torch.Tensor | None]
        o_b: list[torch.Tensor | None]
        gate_up_b: list[torch.Tensor | None]
        down_b: list[torch.Tensor | None]

    def __init__(self, lists: dict[str, list[Any]], biases: dict[str, list[Any]]) -> None:
        super().__init__()
        packs = list[torch.classes.quantized.LinearPackedParamsBase]  # type: ignore[name-defined]
        for name, values in lists.items():
            kind = list[torch.Tensor] if name.endswith("_norm") else packs
            setattr(self, name, torch.jit.Attribute(values, kind))
        for name, values in biases.items():
            setattr(self, f"{name}_b", torch.jit.Attribute(values, list[torch.Tensor | None]))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                k_dst: list[torch.Tensor], v_dst: list[torch.Tensor], slots: torch.Tensor,
                k_read: list[torch.Tensor], v_read: list[torch.Tensor],
                attn_mask: torch.Tensor | None, eps: torch.Tensor, heads: int, kv_heads: int,
                dim: int, groups: int, scale: float, half: int) -> torch.Tensor:
        # The Python loop of engine.model.decode_one_token with float32 activations
        # (Fp16PackedLinear.__call__ and the quantized linears' copy path inlined), the
        # same calls in the same order: bitwise the same logits.
        batch = x.shape[0]
        f32 = torch.float32
        for i in range(len(self.qkv)):
            qkv = _fp16(_rms(x, self.attn_norm[i], eps, f32), self.qkv[i], self.qkv_b[i]
                        ).view(batch, -1, dim)
            out = _attend(qkv, cos, sin, k_dst[i], v_dst[i], slots, k_read[i], v_read[i],
                          attn_mask, heads, kv_heads, dim, groups, scale, half)
            x = x + _fp16(out, self.o[i], self.o_b[i])
            gate_up = _fp16(_rms(x, self.mlp_norm[i], eps, f32), self.gate_up[i],
                            self.gate_up_b[i])
            gate, up = gate_up.chunk(2, dim=-1)
            x = x + _fp16(F.silu(gate) * up, self.down[i], self.down_b[i])
        return x


# Helpers of `_Int4Layers.forward` and `_Fp16Layers.forward` (scripted with them).

def _attend(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_dst: torch.Tensor,
            v_dst: torch.Tensor, slots: torch.Tensor, k_read: torch.Tensor,
            v_read: torch.Tensor, attn_mask: torch.Tensor | None, heads: int, kv_heads: int,
            dim: int, groups: int, scale: float, half: int) -> torch.Tensor:
    """One layer's RoPE, K/V write and attention from its ``[B, heads + 2 * kv_heads, D]``
    projections; ``[B, heads * D]`` in qkv's dtype. K/V and attention are in the compute
    dtype (cos's): float32 activations (the float16 loop) are converted around them."""
    batch = qkv.shape[0]
    dtype = cos.dtype
    rotated = heads + kv_heads
    rot = qkv[:, :rotated]
    qk = torch.addcmul(rot * cos, rot.roll(dim // 2, -1), sin)
    v = qkv[:, rotated:]
    cast = qk.dtype != dtype
    if cast:
        qk, v = qk.to(dtype), v.to(dtype)
    k_dst.index_copy_(1, slots, qk[:, heads:].transpose(0, 1))
    v_dst.index_copy_(1, slots, v.transpose(0, 1))
    out = attend(qk[:, :heads].view(batch, kv_heads, groups, dim), k_read, v_read,
                 attn_mask, scale, half).reshape(batch, heads * dim)
    return out.to(qkv.dtype) if cast else out


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: torch.Tensor, dtype: torch.dtype
         ) -> torch.Tensor:
    norm = torch.linalg.vector_norm(x, 2.0, [-1], True)
    scale = torch.rsqrt(torch.addcmul(eps, norm, norm, value=1.0 / x.shape[-1]))
    return torch.mul(x, scale).mul_(weight).to(dtype)


def _linear(x: torch.Tensor, packed: torch.Tensor, scales_and_zeros: torch.Tensor,
            bias: torch.Tensor | None, group: int) -> torch.Tensor:
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group, scales_and_zeros)
    if bias is not None:
        y = y + bias
    return y


def _fp16(x: torch.Tensor,
          packed: torch.classes.quantized.LinearPackedParamsBase,  # type: ignore[name-defined]
          bias: torch.Tensor | None) -> torch.Tensor:
    y = torch.ops.quantized.linear_dynamic_fp16(x, packed)
    if bias is not None:
        y = y + bias
    return y
