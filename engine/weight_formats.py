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
the float32 GEMM. The int8/int4 kernels' cost grows with the rows (measured on 2 AVX2
cores: at 44 rows, a user turn, they are 3-5x faster than dequantizing; even at 256)."""
DENSE_ROWS = 16
"""From this many rows on, quantized linears with a dense bfloat16 copy use it. Measured on
2 AMX cores with SmolLM2-135M: the int4 kernel's cost grows ~linearly with the rows (the
MLP's 1536x576: 0.05 ms at 1 row, 0.37 at 16, 8.9 at 512), the AMX GEMM's hardly (1.3 ms
at 512) but it streams 4x the bytes, so below ~16 rows, with the model's weights out of
cache, it is no faster (8 concurrent decode: 111 vs 112 tok/s at 8 rows)."""
FP16_ROWS = 2
"""From this many rows on, quantized linears with a float16 copy (AVX2 CPUs, see
`dense_copy_for`) use it. Measured on a 2-core AMD EPYC with AVX2 and no AVX-512, all 30
layers of SmolLM2-135M (cold in cache): the int4 kernel took 11.1 ms at 1 row, 22.9 at 4,
37.9 at 8 and 219 at 44 (2 threads); fbgemm's float16 GEMM 13.5, 16.0, 25.3 and 89.4 ms.
Whole decode steps, both loops in TorchScript (`engine.scripted_step`), median of 5
alternating rounds: 2 rows 21.0 -> 18.7 ms and 3 rows 25.3 -> 22.8 with the copy from 2
rows instead of 4 (another run: 25.2 -> 20.2, 26.5 -> 23.3); at 1 row the int4 loop and
the float16 loop tie (19.9 vs 20.1 ms), and the int4 weights read a quarter of the bytes."""
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
    (`dense_copy_for`); ``int4`` elsewhere (AVX-512 CPUs, where it decoded 1.7-2.3x faster
    than fp32, and GPUs).

    On the AVX2 EPYC the ``bf16`` format's fbgemm float16 GEMM is as fast as the int4
    kernel and better in every other way (`bench/bench_engine.py --formats int4,bf16
    --no-transformers --repeat 3`, SmolLM2-135M, one run per thread count): decode 61.6 vs
    63.7 tok/s on 2 threads and 41.9 vs 39.0 on 1 (the loop's setting on 2 cores), after a
    2,000-token history 40.5 vs 40.9 and 28.0 vs 26.0, 8 concurrent 212.5 vs 188.1 and
    131.0 vs 130.1; perplexity -0.10% vs +0.08% against fp32, 16/20 vs 10/20 greedy
    continuations identical to fp32's, teacher-forced top-1 99.2% vs 97.7%; 269 vs 335 MB
    of linears (int4 keeps its float16 copies too); `Engine.load` 3.5 s vs 4.8 s (13.3 s the
    first time, quantizing)."""
    return "bf16" if dense_copy_for("auto", device) == "fp16" else "int4"


def compute_dtype_for(fmt: WeightFormat, device: torch.device | str = "cpu") -> torch.dtype:
    """The compute dtype of a format on a device (K/V, attention, the embedding table):
    float32 for fp32, bfloat16 otherwise (the int8/int4 kernels' fast path). The ``bf16``
    format on CPU multiplies in fbgemm's float16 GEMM with float32 activations between its
    projections (`engine.model_weights.ModelWeights.activation_dtype`), and keeps its K/V in
    bfloat16 like the quantized formats: half the pool's bytes of float32 K/V, at the same
    speed (`bench/bench_engine.py --formats bf16` on the AVX2 EPYC, two runs each: decode
    51.8/54.5 vs 52.2/51.2 tok/s, 8 concurrent 154.6/170.0 vs 166.2/157.5, decode @ 2,000
    30.2/29.0 vs 30.3/32.8) and perplexity -0.10% against fp32 (was -0.06%)."""
    if fmt == "fp32":
        return torch.float32
    return torch.bfloat16


def dense_copy_for(mode: DensePrefill, device: torch.device | str = "cpu") -> DenseCopy | None:
    """Which 16-bit copy quantized linears on `device` keep under `mode`, if any. auto:
    ``bf16`` on CPUs that multiply bfloat16 in hardware, with AMX tiles or AVX512-BF16
    (measured on both: prefill 512 ~2.8x faster); ``fp16`` on CPUs where torch runs its
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
    projection (``lm_head``), whose float16 GEMM beats the int8 kernel from one row on (SmolLM2's
    49,152 x 576 on the AVX2 EPYC: 2.0 vs 3.3 ms at one row, 5.7 vs 10.2 at eight) and
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
    float and is compute-bound. Measured on a 2-core EPYC for SmolLM2's 49,152 x 576
    ``lm_head`` (two copies alternating, more than the L3 holds): one row 0.39 vs 0.93 ms,
    eight rows 0.67 vs 1.94 ms; with the cache flushed, one row is memory-bound and they
    tie. Against float32 logits over 3,000 positions of `engine.quality.fixed_text`: top-1
    98.2% (98.6% for the bfloat16 kernel), perplexity +0.18% (+0.27%). Not for the other
    layers: their inputs have larger outliers, and the int8 format decoding with it lost
    1.4% perplexity (1.0% without) and 3 points of top-1. Without VNNI, fbgemm's uint8 x
    int8 products saturate in 16 bits, so other CPUs keep the bfloat16 kernel."""
    if name != "lm_head" or fmt not in ("int8", "int4") or torch.device(device).type != "cpu":
        return False
    cpu = cpu_features()
    return cpu.vnni and cpu.fbgemm


def format_for_linear(name: str, fmt: WeightFormat) -> WeightFormat:
    """The format one projection gets under model format `fmt`: int4 keeps the output
    projection (``lm_head``, often the tied embedding table) in int8, as llama.cpp's Q4
    types keep ``output.weight`` at higher precision; in int4 it costs ~3% perplexity on
    SmolLM2 for ~1 ms per token."""
    return "int8" if fmt == "int4" and name == "lm_head" else fmt
