"""bench/cpu_mask.py: ``--as-cpu avx2`` runs a bench with every library's CPUID answers
masked, so torch, oneDNN and ONNX Runtime pick an AVX2 CPU's kernels, and its results say
so and go to their own file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import cpu_mask
from bench.results import Machine, machine, write_results

ROOT = Path(__file__).resolve().parent.parent
EPYC = dict(cpu="AMD EPYC", cores=2, arch="x86_64", torch="2.13.0")

PROBE = """
import faulthandler, json, sys
sys.path.insert(0, "bench")
import cpu_mask
cpu_mask.relaunch(sys.argv[1] if len(sys.argv) > 1 else None)
faulthandler.enable()  # a SIGSEGV handler of the program's own, as pytest installs
import torch, onnxruntime
from results import machine
torch.softmax(torch.randn(4, 64), -1)  # SLEEF asks CPUID only now, under that handler
host = machine()
print(json.dumps({"aten": torch.backends.cpu.get_cpu_capability(),
                  "vnni": torch.cpu._is_vnni_supported(),
                  "bf16": torch.cpu._is_avx512_bf16_supported(),
                  "masked": cpu_mask.masked(), "isa": list(host.isa), "slug": host.slug(),
                  "sum": float(torch.arange(10.0).sum())}))
"""


def _has_cpuid_faulting() -> bool:
    return (sys.platform == "linux" and "cpuid_fault" in cpu_mask._cpu_flags()
            and (shutil.which("cc") or shutil.which("gcc")) is not None)


def test_a_masked_machine_lists_what_the_libraries_saw_and_names_its_own_file() -> None:
    real = Machine(**EPYC, isa=("AVX2", "AVX-512", "AVX512-VNNI", "AVX512-BF16"))
    as_avx2 = Machine(**EPYC, isa=("AVX2",), aten="AVX2", masked_as="avx2")
    assert real.slug() == "amd-epyc-2c-avx512-bf16"
    assert as_avx2.slug() == "amd-epyc-2c-avx2-as-avx2"  # never a real AVX2 machine's file
    assert "CPUID masked" in as_avx2.describe() and "CPUID" not in real.describe()


def test_a_masked_run_never_replaces_the_machines_own_results(tmp_path: Path) -> None:
    as_avx2 = Machine(**EPYC, isa=("AVX2",), aten="AVX2", masked_as="avx2")
    loop = write_results("loop-human", "| a |", command="bench_loop.py --human --as-cpu avx2",
                         root=tmp_path, host=as_avx2)
    engine = write_results(f"engine-{as_avx2.slug()}", "| a |", command="bench_engine.py",
                           root=tmp_path, host=as_avx2)
    assert [loop.name, engine.name] == ["loop-human-as-avx2.md",
                                        "engine-amd-epyc-2c-avx2-as-avx2.md"]
    assert "CPUID masked" in loop.read_text()


def test_the_flags_hidden_are_the_ones_the_c_file_clears() -> None:
    source = (ROOT / "bench" / "cpuid_mask.c").read_text()
    for named in ("AVX512F 16", "VNNI 11", "AMX-TILE 24", "AVX-VNNI 4",
                  "AVX512_BF16 5"):
        assert named in source
    assert {"avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile"} <= cpu_mask.HIDDEN_FLAGS
    assert "avx2" not in cpu_mask.HIDDEN_FLAGS and "fma" not in cpu_mask.HIDDEN_FLAGS


def test_unmasked_runs_name_the_machine_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSISTANT_BENCH_CPU_MASK", raising=False)
    assert cpu_mask.masked() is None
    assert machine().masked_as is None
    cpu_mask.relaunch(None)  # returns: nothing to mask


@pytest.mark.skipif(not _has_cpuid_faulting(),
                    reason="needs Linux x86-64 with cpuid_fault and a C compiler")
def test_relaunched_under_the_mask_torch_runs_its_avx2_kernels(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path), "HOME": str(tmp_path)}
    runs = {}
    for args in ([], ["avx2"]):
        done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        runs[bool(args)] = json.loads(done.stdout.strip().splitlines()[-1])
    masked = runs[True]
    assert masked["masked"] == "avx2"
    assert masked["aten"] == "AVX2" and not masked["vnni"] and not masked["bf16"]
    assert masked["isa"] == ["AVX2"] and masked["slug"].endswith("-as-avx2")
    assert masked["sum"] == 45.0  # the process computes as before
    assert list(tmp_path.glob("assistant/bench/cpuid_mask-*.so"))  # built once, cached
    if "AVX-512" in runs[False]["isa"]:  # the mask changed what torch saw
        assert runs[False]["aten"] == "AVX512"


CRASH = """
import ctypes, faulthandler, sys
sys.path.insert(0, "bench")
import cpu_mask
cpu_mask.relaunch("avx2")
faulthandler.enable()
import torch
print(torch.backends.cpu.get_cpu_capability(), flush=True)
ctypes.string_at(0)  # a real SIGSEGV
"""


@pytest.mark.skipif(not _has_cpuid_faulting(),
                    reason="needs Linux x86-64 with cpuid_fault and a C compiler")
def test_a_real_crash_under_the_mask_still_reaches_the_programs_handler(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", CRASH], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "AVX2"
    assert done.returncode == -11  # SIGSEGV, as without the mask
    assert "Fatal Python error: Segmentation fault" in done.stderr  # faulthandler's report


def test_where_the_mask_cannot_be_had_the_command_runs_as_it_is(tmp_path: Path) -> None:
    """`make test-cpus` runs in `cpu_mask.py`: a machine that cannot mask CPUID (here: no
    cache to build into) still runs the tests, unmasked, and says so."""
    env = {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": "/proc/nonexistent",
           "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "bench/cpu_mask.py", "avx2", sys.executable, "-c",
         "import os; print(os.environ.get('ASSISTANT_BENCH_CPU_MASK'))"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
    assert "CPUID not masked" in done.stderr
    usage = subprocess.run([sys.executable, "bench/cpu_mask.py", "avx512"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode != 0 and "usage" in usage.stderr
