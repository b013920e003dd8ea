"""bench/results.py: a bench's results file names the machine, the date, the command, and
holds the tables the run printed."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.host_speed import HostSpeed, measure
from bench.results import (
    RESULTS_DIR,
    Machine,
    Report,
    capture,
    fenced,
    machine,
    markdown_table,
    write_results,
)

ROOT = Path(__file__).resolve().parent.parent
XEON = Machine(cpu="Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", cores=2, arch="x86_64",
               isa=("AVX2", "AVX-512", "AVX512-VNNI", "AVX512-BF16", "AMX"), torch="2.13.0",
               aten="AVX512")
WHEN = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)


def test_the_file_holds_machine_date_command_and_tables(tmp_path: Path) -> None:
    table = markdown_table(["mode", "p50 ms"], [["tentative", 301], ["immediate", 201]])
    path = write_results("loop-interruptions", [table, "one more line"],
                         command=[".venv/bin/python", "bench/bench_loop.py", "--interruptions",
                                  "--compare", "echo.gate_stands_down=false"],
                         notes="a note", root=tmp_path, host=XEON, date=WHEN)
    assert path == tmp_path / "loop-interruptions.md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# Results: loop-interruptions\n")
    assert ("- machine: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, 2 cores (x86_64); "
            "AVX2, AVX-512, AVX512-VNNI, AVX512-BF16, AMX; torch 2.13.0 (ATen AVX512 kernels); "
            "GPU: none\n") in text
    assert "- date: 2026-12-05 09:30 UTC\n" in text
    assert ("- command: `.venv/bin/python bench/bench_loop.py --interruptions --compare "
            "echo.gate_stands_down=false`\n") in text
    assert "| mode | p50 ms |\n|---|---|\n| tentative | 301 |\n| immediate | 201 |\n" in text
    assert "\n\none more line\n" in text
    assert text.endswith("## Notes\n\na note\n")


def test_a_second_run_replaces_the_first(tmp_path: Path) -> None:
    write_results("echo", "| a |\n|---|\n| 1 |", command="python bench/bench_echo.py",
                  root=tmp_path, host=XEON, date=WHEN)
    write_results("echo", "| a |\n|---|\n| 2 |", command="python bench/bench_echo.py --gate",
                  root=tmp_path, host=XEON, date=WHEN)
    text = (tmp_path / "echo.md").read_text(encoding="utf-8")
    assert "| 2 |" in text and "| 1 |" not in text and "--gate" in text
    assert [p.name for p in tmp_path.iterdir()] == ["echo.md"]  # no temporary left


def test_bench_names_are_file_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_results("../docs/benchmarks", "x", command="x", root=tmp_path, host=XEON)


def test_slugs_name_the_kind_of_machine() -> None:
    assert XEON.slug() == "intel-xeon-2c-amx"
    epyc = Machine(cpu="AMD EPYC 7B13 64-Core Processor", cores=2, arch="x86_64",
                   isa=("AVX2",))
    assert epyc.slug() == "amd-epyc-2c-avx2"
    zen4 = Machine(cpu="AMD EPYC 9B14 96-Core Processor", cores=2, arch="x86_64",
                   isa=("AVX2", "AVX-512", "AVX512-VNNI", "AVX512-BF16"))
    assert zen4.slug() == "amd-epyc-2c-avx512-bf16"
    arm = Machine(cpu="aarch64", cores=8, arch="aarch64", isa=("NEON",))
    assert arm.slug() == "aarch64-8c-aarch64"
    gpu = Machine(cpu="AMD EPYC 9654", cores=16, arch="x86_64", isa=("AVX2",),
                  gpus=("NVIDIA H200",))
    assert gpu.slug(gpu=True) == "nvidia-h200"
    assert "GPU: NVIDIA H200" in gpu.describe()


def test_a_run_on_this_machine_says_how_fast_it_was(tmp_path: Path) -> None:
    path = write_results("echo", "| a |\n|---|\n| 1 |", command="x", root=tmp_path)
    line = next(x for x in path.read_text(encoding="utf-8").splitlines()
                if x.startswith("- host speed"))
    assert re.fullmatch(r"- host speed at the end of the run: Python \d+ ns a loop step, "
                        r"memory read \d+\.\d GB/s on one core, first touch of memory "
                        r"\d+\.\d us per 4 KiB page \(`bench/host_speed.py`\)", line), line


def test_a_described_machine_gets_the_speed_it_is_given_or_none(tmp_path: Path) -> None:
    none = write_results("echo", "x", command="x", root=tmp_path, host=XEON, date=WHEN)
    assert "host speed" not in none.read_text(encoding="utf-8")
    given = write_results("echo", "x", command="x", root=tmp_path, host=XEON, date=WHEN,
                          speed=HostSpeed(python_ns=31.4, memory_gb_s=12.25,
                                          first_touch_us=16.04))
    assert ("- machine: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, 2 cores (x86_64); "
            "AVX2, AVX-512, AVX512-VNNI, AVX512-BF16, AMX; torch 2.13.0 (ATen AVX512 kernels); "
            "GPU: none\n- host speed at the end of the run: Python 31 ns a loop step, memory "
            "read 12.2 GB/s on one core, first touch of memory 16.0 us per 4 KiB page "
            "(`bench/host_speed.py`)\n- date: 2026-12-05 09:30 UTC\n"
            ) in given.read_text(encoding="utf-8")


def test_host_speed_figures_are_of_this_host() -> None:
    speed = measure(tries=1, memory_mib=64, touch_mib=8)
    # Wide bounds, any CPU of the last decade under any load: each figure is a real
    # measurement (not NaN, not zero, not off by a unit's factor of 1000).
    assert 1 < speed.python_ns < 2_000
    assert 0.2 < speed.memory_gb_s < 2_000
    assert 0.01 < speed.first_touch_us < 5_000
    with pytest.raises(ValueError):
        measure(tries=0)


def test_this_machine_is_read() -> None:
    here = machine()
    assert here.cores >= 1 and here.cpu and here.arch
    assert re.fullmatch(r"[a-z0-9.-]+", here.slug())
    if "avx2" in Path("/proc/cpuinfo").read_text(errors="replace").split():
        assert "AVX2" in here.isa


def test_report_prints_as_before_and_keeps_markdown() -> None:
    from assistant.replay.report import format_table

    out = io.StringIO()
    report = Report(out)
    report.line("interruptions over a reply (virtual clock)")
    report.table(["mode", "false stops"], [["immediate", "18/21"], ["tentative", "1/21"]])
    report.line("\nfirst line\nsecond line")
    report.line("| echo | heard |")
    report.line("|---|---|")
    report.line("| none | 180 ms |")
    report.pre("turn prompt\n   1     42")
    assert out.getvalue() == (
        "interruptions over a reply (virtual clock)\n"
        + format_table(["mode", "false stops"], [["immediate", "18/21"], ["tentative", "1/21"]])
        + "\n\nfirst line\nsecond line\n| echo | heard |\n|---|---|\n| none | 180 ms |\n"
        "turn prompt\n   1     42\n")
    assert report.blocks == [
        "interruptions over a reply (virtual clock)",
        "| mode | false stops |\n|---|---|\n| immediate | 18/21 |\n| tentative | 1/21 |",
        "first line", "second line",
        "| echo | heard |\n|---|---|\n| none | 180 ms |",
        "```text\nturn prompt\n   1     42\n```",
    ]


def test_cells_and_fences_are_escaped() -> None:
    assert markdown_table(["a"], [["x | y"]]) == "| a |\n|---|\n| x \\| y |"
    assert fenced("has ``` inside") == "````text\nhas ``` inside\n````"


def test_capture_tees_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    with capture() as printed:
        print("ratios: 0.94x")
    assert printed.getvalue() == "ratios: 0.94x\n"
    assert capsys.readouterr().out == "ratios: 0.94x\n"


def test_seeded_results_have_the_header() -> None:
    files = sorted(RESULTS_DIR.glob("*.md"))
    assert files, "bench/results/ is seeded"
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert text.startswith(f"# Results: {path.stem}\n"), path.name
        for field in ("- machine: ", "- date: ", "- command: "):
            assert f"\n{field}" in text, f"{path.name}: no {field.strip()}"


BENCHES = ("bench_asr.py", "bench_audio.py", "bench_echo.py", "bench_engine.py",
           "bench_first_barge_in.py", "bench_interrupt_words.py", "bench_live.py",
           "bench_loop.py", "bench_serve.py", "bench_turns.py", "bench_vllm.py")


@pytest.mark.parametrize("script", BENCHES)
def test_every_bench_can_skip_writing(script: str) -> None:
    text = (ROOT / "bench" / script).read_text(encoding="utf-8")
    assert "add_no_write(" in text and "write_results(" in text, script


def test_a_bench_script_imports_the_writer() -> None:
    """As the scripts run it (``bench/`` first on the path), ``--help`` names the flag."""
    done = subprocess.run([sys.executable, "bench/bench_echo.py", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)
    assert "--no-write" in done.stdout
