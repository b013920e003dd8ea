"""Weight formats for the model's linear layers: dense fp32 / bf16, weight-only int8 and int4.

Every format is a small callable `Linear` built from a full-precision ``[out, in]`` weight.
All use kernels that ship with torch (no C++ of ours):

- ``bf16``: the weights rounded to bfloat16. On CPU they are held as float16 in fbgemm's
  packed layout (``quantized::linear_dynamic_fp16``, float32 activations): every bfloat16
  weight of a normal model is exact in float16 (its 8 mantissa bits fit in 11; magnitudes
  between 6e-5 and 65504), and the kernel streams 16-bit weights at float32 speed, where
  torch's own bfloat16 CPU GEMM is slower than float32 on CPUs without AVX512-BF16
  (`bench/bench_engine.py` compares them). Other devices use plain bfloat16 weights and
  activations.

- ``int8``: per-output-channel symmetric int8 weights, ``aten._weight_int8pack_mm`` on CPU
  (fast with bfloat16 activations, far slower with float32 ones, so quantized formats
  compute in bfloat16). Other devices dequantise in ``F.linear`` (gpt-fast's form). On
  CPUs with AVX512-VNNI the int8 output projection (``lm_head``) also keeps fbgemm's packed
  copy for decode steps, whose kernel quantizes the activations too
  (`engine.weight_formats.vnni_int8_for`).
- ``int4``: group-wise asymmetric 4-bit weights (``q * scale + min`` per group of
  `engine.weight_quant.INT4_GROUP` inputs, the layout of llama.cpp's Q4_1),
  ``aten._weight_int4pack_mm_for_cpu`` on CPU and the tinygemm ``aten._weight_int4pack_mm``
  on CUDA.

On CPUs that multiply bfloat16 matrices in hardware (AMX or AVX512-BF16), the quantized
formats also keep a dense bfloat16 copy of each weight for calls of `DENSE_ROWS` rows or
more -- prefill chunks, user turns, large decode batches -- where oneDNN's bfloat16 GEMM
beats the quantized kernels, whose cost grows with the rows; on AVX2 CPUs a float16 copy in
fbgemm's packed layout (`Fp16PackedLinear`) from `FP16_ROWS` rows, and for every call of
the output projection (`engine.weight_formats.dense_copy_for`; +2 bytes per weight).

Which format and kernel each projection gets on a device is `engine.weight_formats`.

Quantization is split from packing: `engine.weight_quant.quantize_linear` returns
device-independent tensors (int8 values, or int4 nibbles two per byte, plus scales) that
`engine.weight_cache` stores; `Linear`s are built from those here, on the target device
(`linear_from_quantized`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engine.errors import EngineError
from engine.weight_formats import DENSE_ROWS, PREFILL_ROWS, DenseCopy
from engine.weight_quant import QuantizedTensors, dequantize, int4_values, unpack_nibbles

__all__ = [
    "DenseLinear",
    "Fp16PackedLinear",
    "Int4Linear",
    "Int8Linear",
    "Linear",
    "bf16_linear",
    "bf16_packs_float16",
    "fbgemm_int8",
    "float16_gemm",
    "linear_from_quantized",
    "tinygemm_inner_k_tiles",
]


class Linear:
    """``y = x W^T + b``; subclasses hold the weight in one format."""

    in_features: int
    out_features: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def nbytes(self) -> int:
        """Bytes a forward reads for the weight (scales included)."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class DenseLinear(Linear):
    """A plain float weight in the faster layout for the device and dtype."""

    weight: torch.Tensor
    """``[out, in]``, or ``[in, out]`` when `input_major`."""
    bias: torch.Tensor | None
    input_major: bool

    @classmethod
    def build(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> DenseLinear:
        """On CPU in float32, a one-token matmul against a wide ``[in, out]`` weight streams
        memory faster than the ``[out, in]`` dot-product form (for out >= in), so wide
        fp32 weights are stored transposed there. bfloat16 must keep ``[out, in]``: its
        ``[in, out]`` CPU matmul is an order of magnitude slower."""
        out_features, in_features = weight.shape
        if (weight.device.type == "cpu" and weight.dtype == torch.float32
                and out_features >= in_features):
            return cls(weight.t().contiguous(), bias, input_major=True)
        return cls(weight.contiguous(), bias, input_major=False)

    @property
    def in_features(self) -> int:  # type: ignore[override]
        return int(self.weight.shape[0 if self.input_major else 1])

    @property
    def out_features(self) -> int:  # type: ignore[override]
        return int(self.weight.shape[1 if self.input_major else 0])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_major:
            return F.linear(x, self.weight, self.bias)
        y = torch.matmul(x, self.weight)
        return y if self.bias is None else y + self.bias

    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()


@dataclass(frozen=True, eq=False)
class Fp16PackedLinear(Linear):
    """A 16-bit weight in fbgemm's packed float16 layout (CPU); float32 out, float32 in
    (other float inputs are converted)."""

    packed: torch.ScriptObject
    """fbgemm's prepacked weight and float32 bias (opaque)."""
    in_features: int  # type: ignore[misc]
    out_features: int  # type: ignore[misc]

    @classmethod
    def build(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> Fp16PackedLinear:
        """From a float ``[out, in]`` weight whose values float16 holds (bfloat16-rounded
        ones do, see the module docstring)."""
        out_features, in_features = weight.shape
        packed = torch.ops.quantized.linear_prepack_fp16(
            weight.float().contiguous(), None if bias is None else bias.float())
        return cls(packed, int(in_features), int(out_features))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:  # the kernel takes rows: [..., in] -> [rows, in]
            return self(x.reshape(-1, x.shape[-1])).view(*x.shape[:-1], self.out_features)
        return torch.ops.quantized.linear_dynamic_fp16(x.float(), self.packed)

    def nbytes(self) -> int:
        return 2 * self.in_features * self.out_features


def bf16_packs_float16(weights: Iterable[torch.Tensor], device: torch.device) -> bool:
    """Whether the ``bf16`` format packs a model's linears, `weights`, for fbgemm's float16
    kernel on `device`: on CPU, where float16 holds every one of them rounded to bfloat16.
    All or none: packed linears take and return float32, dense bfloat16 ones bfloat16, and
    one model's activations are of one dtype (`engine.model_weights.ModelWeights.activation_dtype`;
    a model with both failed on its first step)."""
    return device.type == "cpu" and all(
        _fits_float16(weight.detach().to(torch.bfloat16)) for weight in weights)


def bf16_linear(weight: torch.Tensor, bias: torch.Tensor | None, *, device: torch.device,
                packed: bool) -> Linear:
    """The ``bf16`` format's linear: `weight` rounded to bfloat16, packed for fbgemm's
    float16 kernel if `packed` (see `bf16_packs_float16`), else dense bfloat16."""
    rounded = weight.detach().to(device=device, dtype=torch.bfloat16)
    if packed:
        return Fp16PackedLinear.build(rounded, bias)
    return DenseLinear.build(rounded, None if bias is None else bias.to(device=device,
                                                                        dtype=torch.bfloat16))


@dataclass(frozen=True, eq=False)
class Int8Linear(Linear):
    weight: torch.Tensor
    """int8 ``[out, in]``."""
    scales: torch.Tensor
    """``[out]`` in the activation dtype: w = q * scale."""
    bias: torch.Tensor | None
    dense: Linear | None = None
    """The dequantized weight in 16 bits (see `dense_copy_for`), for calls of `dense_rows`
    rows or more."""
    dense_rows: int = DENSE_ROWS
    vnni: Any = None
    """fbgemm's packed copy of `weight` (see `vnni_int8_for`), for calls of fewer than
    `DENSE_ROWS` rows; they return float32."""

    @property
    def in_features(self) -> int:  # type: ignore[override]
        return int(self.weight.shape[1])

    @property
    def out_features(self) -> int:  # type: ignore[override]
        return int(self.weight.shape[0])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:  # the kernels take rows: [..., in] -> [rows, in]
            return self(x.reshape(-1, x.shape[-1])).view(*x.shape[:-1], self.out_features)
        if self.vnni is not None and x.shape[0] < self.dense_rows:
            # float32 out, as the kernel computes it: the one linear with this copy is the
            # output projection, whose logits the runner returns in float32 (rounding them
            # to bfloat16 on the way would cost two conversions and the logits' precision).
            y = torch.ops.quantized.linear_dynamic(x.float(), self.vnni)
        elif self.dense is not None and x.shape[0] >= self.dense_rows:
            y = _copy_matmul(x, self.dense)
        elif self.weight.device.type != "cpu":
            y = F.linear(x, self.weight.to(x.dtype)) * self.scales
        elif x.shape[0] >= PREFILL_ROWS:
            # Many rows (a long prefill chunk): dequantizing once and using the float32
            # BLAS GEMM beats the int8 kernel, whose strength is the one-row GEMV.
            weight = self.weight.float() * self.scales.float()[:, None]
            y = F.linear(x.float(), weight).to(x.dtype)
        else:
            y = torch.ops.aten._weight_int8pack_mm(x, self.weight, self.scales)
        return y if self.bias is None else y + self.bias

    def nbytes(self) -> int:
        return self.weight.numel() + self.scales.numel() * self.scales.element_size()


@dataclass(frozen=True, eq=False)
class Int4Linear(Linear):
    packed: torch.Tensor
    """The device kernel's packed layout (opaque)."""
    scales_and_zeros: torch.Tensor
    """``[in / group, out, 2]`` in the activation dtype: w = (q - 8) * scale + zero."""
    group: int
    in_features: int  # type: ignore[misc]
    out_features: int  # type: ignore[misc]
    bias: torch.Tensor | None
    nibbles: torch.Tensor | None = None
    """CPU without `dense` only: the weight's int4 nibbles, for the float32 prefill path
    (+0.5 byte/weight)."""
    scale_min: torch.Tensor | None = None
    """float32 ``[2, out, in / group, 1]``: scale and min for that path."""
    dense: Linear | None = None
    """The dequantized weight in 16 bits (see `dense_copy_for`), for calls of `dense_rows`
    rows or more."""
    dense_rows: int = DENSE_ROWS

    def dequantized(self) -> torch.Tensor:
        """float32 ``[out, in]`` (needs `nibbles`)."""
        assert self.nibbles is not None and self.scale_min is not None
        scale, low = self.scale_min
        return int4_values(self.nibbles, scale, low)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:  # the kernels take rows: [..., in] -> [rows, in]
            return self(x.reshape(-1, x.shape[-1])).view(*x.shape[:-1], self.out_features)
        if self.dense is not None and x.shape[0] >= self.dense_rows:
            y = _copy_matmul(x, self.dense)
        elif self.packed.device.type != "cpu":
            y = torch.ops.aten._weight_int4pack_mm(x, self.packed, self.group,
                                                   self.scales_and_zeros)
        elif self.nibbles is not None and x.shape[0] >= PREFILL_ROWS:
            # Prefill: as for int8, one dequantization and the float32 BLAS GEMM.
            y = F.linear(x.float(), self.dequantized()).to(x.dtype)
        else:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, self.group,
                                                           self.scales_and_zeros)
        return y if self.bias is None else y + self.bias

    def nbytes(self) -> int:
        return (self.out_features * self.in_features // 2
                + self.scales_and_zeros.numel() * self.scales_and_zeros.element_size())


def tinygemm_inner_k_tiles(in_features: int) -> int:
    """How many 16-wide k-tiles CUDA's tinygemm int4 layout packs together for a weight of
    `in_features` inputs: 8 (16-byte loads, gpt-fast's choice) where they divide the inputs,
    else 4 or 2 (the kernel's layout needs ``in_features % (16 * tiles) == 0``: SmolLM2's 576
    inputs take 4)."""
    for tiles in (8, 4, 2):
        if in_features % (16 * tiles) == 0:
            return tiles
    raise EngineError(f"int4 on CUDA needs a multiple of 32 inputs, got {in_features}")


def fbgemm_int8(tensors: QuantizedTensors) -> Any:
    """fbgemm's packed form of an int8 weight (``quantized::linear_prepack`` takes a
    per-channel quantized tensor: the same int8 values and scales, zero points 0)."""
    q, scale = tensors["q"].cpu(), tensors["scale"].cpu().double()
    with warnings.catch_warnings():  # torch 2.13 warns that quantized tensors are deprecated
        warnings.simplefilter("ignore", UserWarning)
        weight = torch._make_per_channel_quantized_tensor(
            q, scale, torch.zeros(scale.shape, dtype=torch.long), 0)
        return torch.ops.quantized.linear_prepack(weight, None)


def float16_gemm(linear: Linear) -> tuple[Fp16PackedLinear, int] | None:
    """The fbgemm float16 GEMM `linear` runs and from how many rows: an `Fp16PackedLinear`
    is one from the first row (its bias packed in); an int8/int4 linear's float16 copy
    from its `dense_rows` (the linear adds the bias). None if it runs none."""
    if isinstance(linear, Fp16PackedLinear):
        return linear, 1
    if isinstance(linear, Int8Linear | Int4Linear) and isinstance(linear.dense,
                                                                   Fp16PackedLinear):
        return linear.dense, linear.dense_rows
    return None


def _fits_float16(weight: torch.Tensor) -> bool:
    """Whether float16 holds `weight`'s magnitudes (for fbgemm's float16 packing)."""
    return float(weight.abs().max()) <= torch.finfo(torch.float16).max


def _copy_matmul(x: torch.Tensor, copy: Linear) -> torch.Tensor:
    """`copy` (bfloat16 `DenseLinear` or float16 `Fp16PackedLinear`) applied to `x`, in
    `x`'s dtype."""
    if isinstance(copy, DenseLinear):
        return F.linear(x.to(copy.weight.dtype), copy.weight).to(x.dtype)
    return copy(x).to(x.dtype)


def _dense_copy(tensors: QuantizedTensors, kind: DenseCopy, device: torch.device) -> Linear:
    """The dequantized weight as a copy of `kind` (no bias: the quantized linear adds it)."""
    weight = dequantize(tensors).to(device)
    if kind == "fp16" and _fits_float16(weight):
        return Fp16PackedLinear.build(weight, None)
    return DenseLinear(weight.to(torch.bfloat16).contiguous(), None, input_major=False)


def linear_from_quantized(tensors: QuantizedTensors, bias: torch.Tensor | None, *,
                          device: torch.device, dtype: torch.dtype,
                          dense: DenseCopy | None = None, dense_rows: int = DENSE_ROWS,
                          vnni: bool = False) -> Linear:
    """A `Linear` on `device` computing in `dtype` from the tensors of
    `engine.weight_quant.quantize_linear`; `dense` also keeps a 16-bit copy of that kind
    for calls of `dense_rows` rows or more (see `dense_copy_for`; a float16 copy for every
    call is the linear itself, returning float32); `vnni` an int8 weight's fbgemm copy for
    few rows on CPU (see `vnni_int8_for`)."""
    if dense == "fp16" and dense_rows <= 1:
        weight = dequantize(tensors).to(device)
        if _fits_float16(weight):
            return Fp16PackedLinear.build(weight, bias)
    bias = None if bias is None else bias.to(device=device, dtype=dtype)
    copy = None if dense is None else _dense_copy(tensors, dense, device)
    if "q" in tensors:
        return Int8Linear(tensors["q"].to(device), tensors["scale"].to(device=device,
                                                                       dtype=dtype), bias,
                          dense=copy, dense_rows=dense_rows,
                          vnni=fbgemm_int8(tensors) if vnni else None)
    nibbles, scale, low = tensors["nibbles"], tensors["scale"], tensors["min"]
    out_features, half = nibbles.shape
    in_features = 2 * half
    group = in_features // scale.shape[0]
    zeros = low + 8.0 * scale  # the kernels' form: (q - 8) * scale + zero
    scales_and_zeros = torch.stack([scale, zeros], dim=-1).to(device=device, dtype=dtype)
    if device.type == "cpu":
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            unpack_nibbles(nibbles).to(torch.int32), 1)
        fp32_prefill = copy is None  # without the copy, many rows dequantize (float32)
        return Int4Linear(packed, scales_and_zeros.contiguous(), group, in_features,
                          out_features, bias,
                          nibbles=nibbles.contiguous() if fp32_prefill else None,
                          scale_min=torch.stack([scale.t(), low.t()]).float()[..., None]
                          .contiguous() if fp32_prefill else None,
                          dense=copy, dense_rows=dense_rows)
    swapped = ((nibbles & 0xF) << 4) | (nibbles >> 4)  # tinygemm wants the high nibble first
    packed = torch.ops.aten._convert_weight_to_int4pack(swapped.to(device),
                                                         tinygemm_inner_k_tiles(in_features))
    return Int4Linear(packed, scales_and_zeros.contiguous(), group, in_features,
                      out_features, bias, dense=copy, dense_rows=dense_rows)
