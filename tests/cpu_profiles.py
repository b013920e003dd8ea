"""CPUs the engine's kernel choices differ on, and a way for a test to pretend one.

The engine reads the CPU through `engine.cpu_features.cpu_features`, which asks torch each
time; :func:`pretend_cpu` patches those torch queries, so every choice made while it is in
force (`engine.weight_formats`: the default format, the 16-bit copies, the VNNI output
projection) and every expectation a test computes from the same functions follow the
pretended CPU. Tests whose outcome depends on the CPU take the ``each_cpu`` fixture
(`tests/conftest.py`) and run once per profile here, whatever machine runs them; ``pytest
--cpu NAME`` pretends one profile for the whole session.

What a pretence cannot change is which instructions the kernels execute: on a CPU without
VNNI, fbgemm's int8 products saturate in 16 bits. `make test-cpus` runs the engine's tests
with the kernels themselves limited to AVX2 (``ATEN_CPU_CAPABILITY``,
``FBGEMM_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``) on a machine that has more.
"""

from __future__ import annotations

import functools

import pytest
import torch

from engine.cpu_features import CpuFeatures, cpu_features
from engine.quantize import fbgemm_int8
from engine.weight_quant import quantize_linear

__all__ = ["CPU_PROFILES", "fbgemm_int8_saturates", "pretend_cpu", "profile_skip_reason"]

CPU_PROFILES: dict[str, CpuFeatures] = {
    # AMD Zen 2/3, Intel Haswell to Comet Lake: float16 copies in fbgemm's layout.
    "avx2": CpuFeatures(capability="AVX2", amx=False, avx512_bf16=False, vnni=False,
                        fbgemm=True),
    # Intel Cascade Lake, Ice Lake: int8 VNNI, no bfloat16 in hardware: no copy at all.
    "avx512-vnni": CpuFeatures(capability="AVX512", amx=False, avx512_bf16=False, vnni=True,
                               fbgemm=True),
    # AMD Zen 4/5: bfloat16 copies and the VNNI output projection.
    "avx512-bf16": CpuFeatures(capability="AVX512", amx=False, avx512_bf16=True, vnni=True,
                               fbgemm=True),
    # Intel Sapphire Rapids on: as Zen 4, with AMX tiles.
    "amx": CpuFeatures(capability="AVX512", amx=True, avx512_bf16=True, vnni=True,
                       fbgemm=True),
}


def profile_skip_reason(cpu: CpuFeatures) -> str | None:
    """Why `cpu` cannot be pretended here, if it cannot: fbgemm is part of the torch build
    (a property torch does not let us patch), not a CPU query."""
    if cpu.fbgemm and not cpu_features().fbgemm:
        return "this torch build has no fbgemm"
    return None


def pretend_cpu(monkeypatch: pytest.MonkeyPatch, cpu: CpuFeatures) -> None:
    """Make torch report `cpu` (undone with `monkeypatch`)."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: cpu.capability)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: cpu.amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: cpu.avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_vnni_supported", lambda: cpu.vnni)


@functools.cache
def fbgemm_int8_saturates() -> bool:
    """Whether fbgemm's dynamic int8 linear saturates uint8 x int8 pair sums in 16 bits
    here, asked of the kernel itself: so on CPUs without VNNI, and with its kernels limited
    to AVX2 on one with it. A pretended VNNI CPU's output projection computes wrongly then,
    so a test checks the choices made for it but not its numbers."""
    if not cpu_features().fbgemm:
        return True
    tensors = quantize_linear(torch.ones(8, 64), "int8")  # int8 weights of 127
    assert tensors is not None
    # Activations of 255 after quantization: each pair sums to 64,770, past int16.
    out = torch.ops.quantized.linear_dynamic(torch.ones(1, 64), fbgemm_int8(tensors))
    return not torch.allclose(out, torch.full_like(out, 64.0), rtol=1e-3)
