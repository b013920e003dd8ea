"""Weight quantization: a float ``[out, in]`` weight to device-independent int8 / int4
tensors and back.

- ``int8``: per-output-channel symmetric, ``w = q * scale`` with ``q`` in [-127, 127].
- ``int4``: group-wise asymmetric over `INT4_GROUP` inputs, ``w = q * scale + min`` with
  ``q`` in [0, 15] (the layout of llama.cpp's Q4_1), two values per byte.

These tensors are what `engine.weight_cache` stores and what `engine.quantize` packs
into a device's `Linear`; nothing here depends on a device or a kernel.
"""

from __future__ import annotations

import torch

from engine.weight_formats import WeightFormat

__all__ = ["INT4_GROUP", "QuantizedTensors", "dequantize", "int4_values", "quantize_linear",
           "unpack_nibbles"]

INT4_GROUP = 32
"""Inputs per int4 scale/min group (llama.cpp's Q4 block size)."""

QuantizedTensors = dict[str, torch.Tensor]
"""Device-independent quantized values of one weight (see `quantize_linear`)."""


def quantize_linear(weight: torch.Tensor, fmt: WeightFormat) -> QuantizedTensors | None:
    """Quantize a float ``[out, in]`` weight (computed in float32 on its device).

    int8: ``{"q": int8 [out, in], "scale": f32 [out]}``. int4: ``{"nibbles": uint8
    [out, in / 2] (even input index in the low nibble), "scale": f32 [in / G, out],
    "min": f32 [in / G, out]}``. None for the dense formats, and for int4 when `in` is
    not a multiple of `INT4_GROUP` (such a weight falls back to int8: see
    `engine.quantize.linear_from_quantized`)."""
    w = weight.detach().float()
    if fmt == "int8":
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
        return {"q": q, "scale": scale}
    if fmt == "int4":
        out_features, in_features = w.shape
        if in_features % INT4_GROUP:
            return quantize_linear(weight, "int8")
        groups = w.view(out_features, in_features // INT4_GROUP, INT4_GROUP)
        low = groups.amin(dim=-1)
        high = groups.amax(dim=-1)
        scale = ((high - low) / 15.0).clamp(min=1e-12)
        q = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15)
        q = q.to(torch.uint8).view(out_features, in_features)
        nibbles = q[:, 0::2] | (q[:, 1::2] << 4)
        return {"nibbles": nibbles.contiguous(), "scale": scale.t().contiguous(),
                "min": low.t().contiguous()}
    return None


def dequantize(tensors: QuantizedTensors) -> torch.Tensor:
    """float32 ``[out, in]`` from `quantize_linear`'s tensors."""
    if "q" in tensors:
        return tensors["q"].float() * tensors["scale"].float()[:, None]
    return int4_values(tensors["nibbles"], tensors["scale"].t().float()[..., None],
                       tensors["min"].t().float()[..., None])


def unpack_nibbles(nibbles: torch.Tensor) -> torch.Tensor:
    """uint8 ``[out, in / 2]`` (even input index in the low nibble) -> ``[out, in]``."""
    return torch.stack([nibbles & 0xF, nibbles >> 4], dim=-1).view(nibbles.shape[0], -1)


def int4_values(nibbles: torch.Tensor, scale: torch.Tensor, low: torch.Tensor
                ) -> torch.Tensor:
    """float32 ``[out, in]``: ``q * scale + min`` per group, with `scale` and `low` float32
    ``[out, in / group, 1]``."""
    out_features, groups = nibbles.shape[0], scale.shape[1]
    q = unpack_nibbles(nibbles).view(out_features, groups, -1)
    return torch.addcmul(low, q.float(), scale).reshape(out_features, -1)
