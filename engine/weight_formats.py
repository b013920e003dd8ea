"""Which weight format and which kernels each linear gets, by name and device.

The format names (`resolve_weight_format`; ``auto``: `auto_weight_format`), the compute
dtype a format implies (`compute_dtype_for`), the row counts where a quantized linear changes
kernel (`PREFILL_ROWS`, `DENSE_ROWS`, `FP16_ROWS`), and the per-device choices of extra
copies: a 16-bit one for many rows (`dense_copy_for`, `dense_rows_for`) and fbgemm's int8
one for the output projection (`vnni_int8_for`). The linears themselves and their
quantization are `engine.quantize`.
"""

from __future__ import annotations

from typing import Literal

import torch

from engine.cpu_features import cpu_features
from engine.errors import EngineError

__all__ = [
    "DENSE_ROWS",
    "FP16_ROWS",
    "PREFILL_ROWS",
    "WEIGHT_FORMATS",
    "DenseCopy",
    "DensePrefill",
    "WeightFormat",
    "auto_weight_format",
    "compute_dtype_for",
    "dense_copy_for",
    "dense_rows_for",
    "format_for_linear",
    "resolve_weight_format",
    "vnni_int8_for",
]

WeightFormat = Literal["fp32", "bf16", "int8", "int4"]
WEIGHT_FORMATS: tuple[WeightFormat, ...] = ("fp32", "bf16", "int8", "int4")
PREFILL_ROWS = 256
"""From this many rows on, quantized linears on CPU without a dense copy dequantize and use
the float32 GEMM: the int8/int4 kernels' cost grows with the rows, but below this they
stay faster than dequantizing (a user turn is tens of rows)."""
DENSE_ROWS = 16
"""From this many rows on, quantized linears with a dense bfloat16 copy use it: the int4
kernel's cost grows ~linearly with the rows, the AMX GEMM's hardly, but it streams 4x the
bytes, so below ~16 rows, with the weights out of cache, it is no faster."""
FP16_ROWS = 2
"""From this many rows on, quantized linears with a float16 copy (AVX2 CPUs, see
`dense_copy_for`) use it: on AVX2 the int4 kernel is compute-bound and its cost grows
with the rows, while fbgemm's float16 GEMM streams 16-bit weights at float32 speed, so
from two rows the copy wins; at one row they tie and the int4 weights read a quarter of
the bytes (`bench/bench_engine.py`)."""
DensePrefill = Literal["auto", "always", "never"]
"""Whether int8/int4 linears keep a 16-bit copy for many rows (see `dense_copy_for`):
auto = where one is measured faster; always; never."""
DenseCopy = Literal["bf16", "fp16"]
"""The kinds of copy: ``bf16``, a dense bfloat16 weight for oneDNN's GEMM (CPUs that
multiply bfloat16 in hardware); ``fp16``, the weight in fbgemm's packed float16 layout,
float32 activations (`engine.quantize.Fp16PackedLinear`; AVX2 CPUs)."""

_ALIASES: dict[str, WeightFormat] = {
    "fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16",
    "int8": "int8", "int4": "int4",
}


def resolve_weight_format(name: str, device: torch.device | str = "cpu") -> WeightFormat:
    """``fp32``/``float32``, ``bf16``/``bfloat16``, ``int8``, ``int4``; ``auto``: the
    default for `device` (`auto_weight_format`)."""
    if name.lower() == "auto":
        return auto_weight_format(device)
    try:
        return _ALIASES[name.lower()]
    except KeyError:
        raise EngineError(f"unknown weight format {name!r} "
                          f"(use auto or one of {', '.join(WEIGHT_FORMATS)})") from None


def auto_weight_format(device: torch.device | str = "cpu") -> WeightFormat:
    """The default format on `device`: ``bf16`` on CPUs where torch runs its AVX2 kernels
    (no AVX-512) and fbgemm is built in, the CPUs where int8/int4 keep a float16 copy
    (`dense_copy_for`); ``int4`` elsewhere (AVX-512 CPUs and GPUs).

    Why: on AVX2 CPUs the ``bf16`` format's fbgemm float16 GEMM decodes as fast as the int4
    kernel, and is closer to fp32, smaller (int4 keeps float16 copies there too) and
    quicker to load (`bench/bench_engine.py --formats int4,bf16`)."""
    return "bf16" if dense_copy_for("auto", device) == "fp16" else "int4"


def compute_dtype_for(fmt: WeightFormat, device: torch.device | str = "cpu") -> torch.dtype:
    """The compute dtype of a format on a device (K/V, attention, the embedding table):
    float32 for fp32, bfloat16 otherwise (the int8/int4 kernels' fast path). The ``bf16``
    format on CPU multiplies in fbgemm's float16 GEMM with float32 activations between its
    projections (`engine.model_weights.ModelWeights.activation_dtype`), and keeps its K/V in
    bfloat16 like the quantized formats: half the pool's bytes of float32 K/V, at the same
    speed and quality (`bench/bench_engine.py --formats bf16`)."""
    if fmt == "fp32":
        return torch.float32
    return torch.bfloat16


def dense_copy_for(mode: DensePrefill, device: torch.device | str = "cpu") -> DenseCopy | None:
    """Which 16-bit copy quantized linears on `device` keep under `mode`, if any. auto:
    ``bf16`` on CPUs that multiply bfloat16 in hardware, with AMX tiles or AVX512-BF16
    (prefill several times faster); ``fp16`` on CPUs where torch runs its
    AVX2 kernels (no AVX-512) and fbgemm is built in: there torch's bfloat16 GEMM is slower
    than float32 and its int4 kernel, compute-bound, grows ~linearly with the rows, while
    fbgemm's float16 GEMM streams 16-bit weights at float32 speed (`FP16_ROWS`); none
    elsewhere (CUDA's tinygemm is untested against a copy). always: auto's kind, else
    ``bf16``."""
    if mode == "never":
        return None
    auto: DenseCopy | None = None
    if torch.device(device).type == "cpu":
        cpu = cpu_features()
        if cpu.bf16_in_hardware:
            auto = "bf16"
        elif cpu.capability == "AVX2" and cpu.fbgemm:
            auto = "fp16"
    return auto if auto is not None or mode == "auto" else "bf16"


def dense_rows_for(name: str, kind: DenseCopy | None) -> int:
    """From how many rows projection `name` uses its copy of `kind`: `DENSE_ROWS` for
    bfloat16 (and without a copy); `FP16_ROWS` for float16, and every call for the output
    projection (``lm_head``), whose float16 GEMM beats the int8 kernel from one row on and
    reads float32 activations, so the int8 weight is not kept."""
    if kind != "fp16":
        return DENSE_ROWS
    return 1 if name == "lm_head" else FP16_ROWS


def vnni_int8_for(name: str, fmt: WeightFormat, device: torch.device | str = "cpu") -> bool:
    """Whether projection `name`, in format `fmt` on `device`, also keeps fbgemm's packed
    int8 copy for calls of few rows: the int8 output projection (``lm_head``, int8 under
    both quantized formats) on CPUs with AVX512-VNNI.

    ``quantized::linear_dynamic`` quantizes each call's activations to uint8 (one scale per
    call) and multiplies with VNNI int8 dot products, as llama.cpp's Q8_0 matmul does
    (activations in blocks of 32 there); ``_weight_int8pack_mm`` converts every weight to
    float and is compute-bound, so the VNNI copy is faster once the weight is in cache,
    at the bfloat16 kernel's quality for the output projection. Not for the other layers:
    their inputs have larger outliers, and int8 activations cost them measurable perplexity
    and top-1. Without VNNI, fbgemm's uint8 x int8 products saturate in 16 bits, so other
    CPUs keep the bfloat16 kernel."""
    if name != "lm_head" or fmt not in ("int8", "int4") or torch.device(device).type != "cpu":
        return False
    cpu = cpu_features()
    return cpu.vnni and cpu.fbgemm


def format_for_linear(name: str, fmt: WeightFormat) -> WeightFormat:
    """The format one projection gets under model format `fmt`: int4 keeps the output
    projection (``lm_head``, often the tied embedding table) in int8, as llama.cpp's Q4
    types keep ``output.weight`` at higher precision (in int4 it costs several percent of
    perplexity on a small model for little speed)."""
    return "int8" if fmt == "int4" and name == "lm_head" else fmt
