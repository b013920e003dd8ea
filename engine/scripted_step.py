"""The decode step's layer loop as TorchScript, for int4 weights on CPU.

At batch 1 a decode step on a CPU is mostly small calls: ~1,000 torch calls from Python per
step (norms, RoPE, K/V writes, attention, residual adds) around 121 int4 projections.
Measured on a 2-core EPYC (SmolLM2-135M, int4, one process, rounds alternating), the same
loop run by TorchScript's interpreter instead of Python takes a step from 6.54 to 5.62 ms
at batch 1 and from 15.7 to 15.0 ms at batch 8, with bitwise-identical logits: the same
aten kernels in the same order, without Python between them. Scripting takes ~12 ms
once.

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

from engine.quantize import Int4Linear
from engine.weight_formats import DENSE_ROWS

__all__ = ["ScriptedLayers"]

log = logging.getLogger(__name__)


class ScriptedLayers:
    """Runs every layer of a decode step (see `engine.model.decode_one_token`) in one
    TorchScript call. Build with `ScriptedLayers.build`; call through `run`."""

    def __init__(self, module: Any, rows: int = DENSE_ROWS) -> None:
        self._module = module
        """The scripted `_Int4Layers`: it holds the weights, so a call passes only the
        step's tensors (passing ~420 weight tensors converted them on every call: ~70 us
        of a ~6 ms step)."""
        self._rows = rows
        """Steps of fewer rows run here; from this many, the projections' 16-bit copies."""

    @classmethod
    def build(cls, layers: Sequence[Any]) -> ScriptedLayers | None:
        """For `engine.model.LayerWeights` whose projections are all CPU `Int4Linear`s of
        one group size; None otherwise, or when scripting fails."""
        linears = [lin for layer in layers for lin in
                   (layer.qkv, layer.o, layer.gate_up, layer.down)]
        if not linears or not all(isinstance(lin, Int4Linear) and lin.packed.device.type == "cpu"
                                  for lin in linears):
            return None
        groups = {lin.group for lin in linears}
        if len(groups) != 1:
            return None
        lists = {"attn_norm": [layer.attn_norm for layer in layers],
                 "mlp_norm": [layer.mlp_norm for layer in layers]}
        for name in ("qkv", "o", "gate_up", "down"):
            lins = [getattr(layer, name) for layer in layers]
            lists[f"{name}_w"] = [lin.packed for lin in lins]
            lists[f"{name}_sz"] = [lin.scales_and_zeros for lin in lins]
            lists[f"{name}_b"] = [lin.bias for lin in lins]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # see the module docstring
                module = torch.jit.script(_Int4Layers(lists, groups.pop()))
        except Exception as exc:  # an unexpected TorchScript failure: the Python loop runs
            log.warning("decode step: TorchScript unavailable (%s: %s); using the Python loop",
                        type(exc).__name__, exc)
            return None
        copies = [lin.dense_rows for lin in linears if lin.dense is not None]
        return cls(module, min(copies, default=DENSE_ROWS))

    def covers(self, batch: int) -> bool:
        """Whether a step of `batch` rows runs here: fewer rows than take the projections'
        16-bit copies (see `engine.weight_formats.dense_rows_for`), which this does not
        call."""
        return batch < self._rows

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            views: tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor,
                         list[torch.Tensor], list[torch.Tensor]],
            attn_mask: torch.Tensor | None, eps: torch.Tensor, *, heads: int, kv_heads: int,
            dim: int, groups: int) -> torch.Tensor:
        """The residual stream after the last layer; `views` from `StepKV.layer_views`."""
        result: torch.Tensor = self._module.forward(
            x, cos, sin, *views, attn_mask, eps, heads, kv_heads, dim, groups, dim ** -0.5)
        return result


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
                dim: int, groups: int, scale: float) -> torch.Tensor:
        # The same calls, in the same order, as the Python loop in
        # engine.model.decode_one_token (with _rms_norm, _apply_rope, StepKV.write_read,
        # _mlp and Int4Linear.__call__ inlined), so the logits are bitwise the same.
        batch = x.shape[0]
        dtype = cos.dtype
        rotated = heads + kv_heads
        group = self.group
        for i in range(len(self.qkv_w)):
            h = _rms(x, self.attn_norm[i], eps, dtype)
            qkv = _linear(h, self.qkv_w[i], self.qkv_sz[i], self.qkv_b[i], group).view(
                batch, -1, dim)
            rot = qkv[:, :rotated]
            qk = torch.addcmul(rot * cos, rot.roll(dim // 2, -1), sin)
            k_dst[i].index_copy_(1, slots, qk[:, heads:].transpose(0, 1))
            v_dst[i].index_copy_(1, slots, qkv[:, rotated:].transpose(0, 1))
            out = F.scaled_dot_product_attention(
                qk[:, :heads].view(batch, kv_heads, groups, dim), k_read[i], v_read[i],
                attn_mask=attn_mask, scale=scale)
            x = x + _linear(out.reshape(batch, heads * dim), self.o_w[i], self.o_sz[i],
                            self.o_b[i], group)
            gate_up = _linear(_rms(x, self.mlp_norm[i], eps, dtype), self.gate_up_w[i],
                              self.gate_up_sz[i], self.gate_up_b[i], group)
            gate, up = gate_up.chunk(2, dim=-1)
            x = x + _linear(F.silu(gate) * up, self.down_w[i], self.down_sz[i],
                            self.down_b[i], group)
        return x


# Helpers of `_Int4Layers.forward` (scripted with it).

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
