"""Run a bench on this machine as an AVX2-only CPU would run it: ``--as-cpu avx2``.

torch (ATen's kernel dispatch, fbgemm), oneDNN and ONNX Runtime's MLAS each ask the CPU
what it has with the CPUID instruction and pick their kernels by the answer. Environment
variables can hold the first three to AVX2 (``ATEN_CPU_CAPABILITY``,
``FBGEMM_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``: `make test-cpus`); nothing holds
MLAS, whose int4 ``MatMulNBits`` kernels issue #47 asks to measure on an AVX2 CPU, and a
llama.cpp built for AVX2 is what such a CPU's peer runs. ``cpuid_mask.c`` answers every
CPUID of the process itself with the AVX-512, VNNI, BF16 and AMX bits cleared (Linux's
CPUID faulting: ``cpuid_fault`` in /proc/cpuinfo), so every library sees the extensions of
an AMD Zen 3 and runs its AVX2 kernels.

What a mask cannot change is the machine under the kernels: its clocks, caches and memory
stay this CPU's. Figures from it are a proxy for an AVX2 machine's ratios (ours against a
peer's AVX2 build, one kernel against another), not that machine's speeds.

A bench calls :func:`add_argument` and, first thing after parsing, :func:`relaunch`: with
``--as-cpu`` it compiles ``cpuid_mask.c`` (once, with the system's C compiler, into the
user's cache) and replaces the process with the same command preloading it. In the masked
process :func:`masked` names the profile (`bench.results.machine` reads it for the
results' header and file name).

Run as a script it runs any command so (`make test-cpus` runs the engine's tests in it)::

    python bench/cpu_mask.py avx2 COMMAND [ARGS...]

where the mask cannot be had (another OS or architecture, no ``cpuid_fault``, no C
compiler) it says why and runs the command unmasked: the environment's limits
(``ATEN_CPU_CAPABILITY``...) still hold the libraries that read them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["HIDDEN_FLAGS", "PROFILES", "MaskUnavailable", "add_argument", "masked", "relaunch",
           "visible_flags"]

PROFILES = ("avx2",)
"""The CPUs a bench can pretend to be (one so far: what `cpuid_mask.c` hides)."""

HIDDEN_FLAGS = frozenset({
    "avx512f", "avx512dq", "avx512ifma", "avx512pf", "avx512er", "avx512cd", "avx512bw",
    "avx512vl", "avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bitalg",
    "avx512_vpopcntdq", "avx512_4vnniw", "avx512_4fmaps", "avx512_vp2intersect",
    "amx_bf16", "avx512_fp16", "amx_tile", "amx_int8", "avx_vnni", "avx512_bf16",
    "avx_ifma",
})
"""The /proc/cpuinfo flags of the CPUID bits `cpuid_mask.c` clears (the file lists them)."""

_ENV = "ASSISTANT_BENCH_CPU_MASK"
"""Set in the relaunched process: the profile in force (and a guard against relaunching)."""

_SOURCE = Path(__file__).resolve().parent / "cpuid_mask.c"


class MaskUnavailable(RuntimeError):
    """CPUID cannot be masked here; the message says why."""


def add_argument(parser: argparse.ArgumentParser) -> None:
    """``--as-cpu PROFILE``."""
    parser.add_argument(
        "--as-cpu", choices=PROFILES, default=None, metavar="|".join(PROFILES),
        help="run as an AVX2-only CPU would: every library's CPUID answers with AVX-512, "
        "VNNI, BF16 and AMX hidden (Linux x86-64 with cpuid_fault; needs a C compiler); "
        "see bench/cpu_mask.py")


def masked() -> str | None:
    """The profile this process runs under, None when unmasked."""
    return os.environ.get(_ENV) or None


def visible_flags(flags: set[str]) -> set[str]:
    """The /proc/cpuinfo ``flags`` as this process's libraries see them: without the hidden
    ones under a mask."""
    return flags - HIDDEN_FLAGS if masked() else flags


def relaunch(profile: str | None) -> None:
    """With a profile, replace this process with the same command under the mask (returns
    when already under it, or when `profile` is None)."""
    if profile is None or masked() == profile:
        return
    try:
        library = _compiled()
    except MaskUnavailable as e:
        raise SystemExit(f"--as-cpu {profile}: {e}") from None
    print(f"[cpu_mask] relaunching as an {profile.upper()} CPU ({library.name} preloaded)",
          file=sys.stderr, flush=True)
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]],
              _masked_env(profile, library))


def _masked_env(profile: str, library: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[_ENV] = profile
    env["LD_PRELOAD"] = " ".join(filter(None, (str(library), env.get("LD_PRELOAD"))))
    return env


def _compiled() -> Path:
    """``cpuid_mask.c`` built as a shared library, cached by its source's hash."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        raise MaskUnavailable("needs Linux on x86-64 (CPUID faulting)")
    if "cpuid_fault" not in _cpu_flags():
        raise MaskUnavailable("this CPU or hypervisor does not offer CPUID faulting (no "
                              "cpuid_fault in /proc/cpuinfo)")
    source = _SOURCE.read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    library = cache / "assistant" / "bench" / f"cpuid_mask-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if not library.exists():
        _build(library)
    # The kernel may still refuse (a hypervisor that lists cpuid_fault and does not do
    # it): the library then stops the process it is loaded into, so try it on one first.
    tried = subprocess.run([sys.executable, "-S", "-c", ""],
                           env={**os.environ, "LD_PRELOAD": str(library)},
                           capture_output=True, text=True)
    if tried.returncode != 0:
        raise MaskUnavailable(tried.stderr.strip() or f"{library.name} refused to load")
    return library


def _build(library: Path) -> None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise MaskUnavailable(f"needs a C compiler (cc or gcc, or CC=...) to build {_SOURCE.name}")
    partial = library.with_suffix(f".{os.getpid()}.tmp")
    try:
        library.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(partial),
                               str(_SOURCE), "-ldl"], capture_output=True, text=True)
        if done.returncode != 0:
            raise MaskUnavailable(f"{compiler} could not build {_SOURCE.name}:\n{done.stderr}")
        partial.replace(library)
    except OSError as e:
        raise MaskUnavailable(f"cannot build {_SOURCE.name} into {library.parent}: {e}") from e


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def main(argv: list[str]) -> None:
    """``cpu_mask.py PROFILE COMMAND [ARGS...]``: run COMMAND as a PROFILE CPU (unmasked, with
    a note, where that cannot be had)."""
    if len(argv) < 2 or argv[0] not in PROFILES:
        raise SystemExit(f"usage: cpu_mask.py {{{','.join(PROFILES)}}} COMMAND [ARGS...]")
    profile, command = argv[0], argv[1:]
    try:
        env = _masked_env(profile, _compiled())
        print(f"[cpu_mask] {shlex.join(command)}: CPUID answers as an {profile.upper()} CPU",
              file=sys.stderr, flush=True)
    except MaskUnavailable as e:
        env = dict(os.environ)
        print(f"[cpu_mask] CPUID not masked ({e}); running {shlex.join(command)} as it is",
              file=sys.stderr, flush=True)
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        raise SystemExit(f"cpu_mask.py: cannot run {command[0]}: {e}") from None


if __name__ == "__main__":
    main(sys.argv[1:])
