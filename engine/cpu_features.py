"""What this CPU offers the engine's kernels, read from torch in one place.

Every choice the engine makes by CPU (the default weight format, the 16-bit copies of
quantized weights, fbgemm's int8 output projection: `engine.weight_formats`) reads
:func:`cpu_features`, so a test that pretends a CPU (by patching the torch queries this
reads) changes every such choice at once, and a test's expectation computed from the same
function agrees with what the engine did.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["CpuFeatures", "cpu_features"]


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU facts the engine's kernel choices depend on."""

    capability: str
    """The kernels torch's ATen dispatches to: ``"AVX2"``, ``"AVX512"``, ``"DEFAULT"``...
    (``torch.backends.cpu.get_cpu_capability()``; lowered by ``ATEN_CPU_CAPABILITY``)."""
    amx: bool
    """AMX tiles: bfloat16 and int8 matrix multiplies in hardware (Sapphire Rapids on)."""
    avx512_bf16: bool
    """AVX512-BF16 dot products (Cooper Lake, AMD Zen 4 on)."""
    vnni: bool
    """AVX512-VNNI int8 dot products without 16-bit saturation (Cascade Lake, Zen 4 on)."""
    fbgemm: bool
    """fbgemm is built into torch (its float16 GEMM, its dynamic int8 linear)."""

    @property
    def bf16_in_hardware(self) -> bool:
        """Whether the CPU multiplies bfloat16 matrices in hardware (AMX or AVX512-BF16)."""
        return self.amx or self.avx512_bf16

    def describe(self) -> str:
        """One line for logs: ``AVX512 + AMX + AVX512-BF16 + VNNI, fbgemm``."""
        extras = [name for name, has in (("AMX", self.amx), ("AVX512-BF16", self.avx512_bf16),
                                         ("VNNI", self.vnni)) if has]
        return " + ".join([self.capability, *extras]) + (", fbgemm" if self.fbgemm else "")


def cpu_features() -> CpuFeatures:
    """This CPU, as torch reports it now (read at every call: cheap, and patchable)."""
    return CpuFeatures(
        capability=torch.backends.cpu.get_cpu_capability(),
        amx=bool(torch.cpu._is_amx_tile_supported()),
        avx512_bf16=bool(torch.cpu._is_avx512_bf16_supported()),
        vnni=bool(torch.cpu._is_vnni_supported()),
        fbgemm="fbgemm" in torch.backends.quantized.supported_engines,
    )
