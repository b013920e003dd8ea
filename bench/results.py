"""A bench's results file: what it printed, on which machine, with which command.

Every bench script ends by calling :func:`write_results`, which replaces
``bench/results/<bench>.md`` with the run's tables under a header naming the machine (CPU
model, cores, the ISA extensions the engine's kernels care about, torch, GPU), how fast it
was at the end of the run (`host_speed`: the same kind of machine runs at other speeds on
other days), the date and the exact command line. ``docs/benchmarks.md`` links to these
files instead of copying their figures, so the figures in the repository are always the
last run's, with its machine.

A bench whose figures belong to the machine (the engine's: each CPU runs other kernels)
puts :meth:`Machine.slug` in its name, one file per kind of machine; the others keep one
file and the latest run. ``--no-write`` (:func:`add_no_write`) runs without writing.

:class:`Report` is how a script prints its final output: tables print as aligned text, as
before, and are kept as Markdown tables for the file.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

try:  # a bench script, with bench/ on the path
    import cpu_mask  # isort: skip
    import host_speed  # isort: skip
except ImportError:  # the tests, importing bench.results
    from bench import cpu_mask, host_speed  # isort: skip

__all__ = [
    "RESULTS_DIR", "Machine", "Report", "add_no_write", "capture", "fenced", "machine",
    "markdown_table", "percentile_ms", "render", "write_results",
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# /proc/cpuinfo flag -> the name the docs use, in the order they are listed.
_ISA_FLAGS = (
    ("avx2", "AVX2"), ("avx_vnni", "AVX-VNNI"), ("avx512f", "AVX-512"),
    ("avx512_vnni", "AVX512-VNNI"), ("avx512_bf16", "AVX512-BF16"), ("amx_tile", "AMX"),
    ("amx_int8", "AMX-INT8"), ("amx_bf16", "AMX-BF16"),
    # aarch64 ("Features" line)
    ("asimd", "NEON"), ("asimddp", "DOTPROD"), ("i8mm", "I8MM"), ("bf16", "BF16"),
    ("sve", "SVE"),
)
# The first of these the CPU has names its tier in a slug (what the engine's kernels use).
_TIERS = (("AMX", "amx"), ("AVX512-BF16", "avx512-bf16"), ("AVX-512", "avx512"),
          ("AVX2", "avx2"))


@dataclass(frozen=True)
class Machine:
    """The machine a run measured."""

    cpu: str
    """CPU model, as /proc/cpuinfo's ``model name`` (else the platform's processor)."""
    cores: int
    """Cores this process may run on (its affinity)."""
    arch: str
    """``x86_64``, ``aarch64``..."""
    isa: tuple[str, ...] = ()
    """The extensions the kernels care about that the CPU lists: ``AVX2``, ``AVX-512``,
    ``AVX512-VNNI``, ``AVX512-BF16``, ``AMX``... (listed is not always enabled: a virtual
    machine can list AMX and not enable it)."""
    torch: str | None = None
    """torch's version, None if it is not installed."""
    aten: str | None = None
    """The kernels torch's ATen dispatches to (``AVX512``, ``AVX2``...), if torch is loaded."""
    gpus: tuple[str, ...] = ()
    """CUDA devices torch sees (only asked when the run loaded torch)."""
    masked_as: str | None = None
    """The CPU the run pretended to be (`bench/cpu_mask.py`, ``--as-cpu``): `isa` is what
    the libraries saw, not what the CPU has."""

    def describe(self) -> str:
        """One line: CPU, cores, ISA, torch, GPU."""
        parts = [f"{self.cpu}, {self.cores} core{'s' if self.cores != 1 else ''} ({self.arch})",
                 ", ".join(self.isa) or "none of AVX2 / AVX-512 / VNNI / BF16 / AMX"]
        torch = "not installed" if self.torch is None else self.torch
        parts.append(f"torch {torch}" + (f" (ATen {self.aten} kernels)" if self.aten else ""))
        parts.append("GPU: " + (", ".join(self.gpus) or "none"))
        if self.masked_as:
            parts.append(f"run as an {self.masked_as.upper()} CPU: CPUID masked "
                         "(bench/cpu_mask.py), this CPU's clocks, caches and memory")
        return "; ".join(parts)

    def slug(self, *, gpu: bool = False) -> str:
        """A file-name part for per-machine results: ``amd-epyc-2c-avx2``,
        ``intel-xeon-2c-amx``; with ``gpu``, the first GPU's (``nvidia-h200``)."""
        if gpu and self.gpus:
            return _slug(self.gpus[0])
        tier = next((t for name, t in _TIERS if name in self.isa), self.arch)
        masked = f"-as-{self.masked_as}" if self.masked_as else ""
        return f"{_family(self.cpu)}-{self.cores}c-{_slug(tier)}{masked}"


def machine() -> Machine:
    """This machine, read now: /proc/cpuinfo, the process's affinity, torch if loaded."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() not in fields:  # the first processor's
                fields[key.strip()] = value.strip()
    flags = cpu_mask.visible_flags(set((fields.get("flags") or fields.get("Features") or "").split()))
    cpu = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        torch_version: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    aten, gpus = None, ()
    torch: Any = sys.modules.get("torch")  # never imported here: a run without it has no GPU
    if torch is not None:
        aten = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            gpus = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return Machine(cpu=cpu, cores=cores, arch=platform.machine(),
                   isa=tuple(name for flag, name in _ISA_FLAGS if flag in flags),
                   torch=torch_version, aten=aten, gpus=gpus, masked_as=cpu_mask.masked())


def render(bench: str, tables: str | Sequence[str], *, command: Sequence[str] | str,
           host: Machine | str, date: datetime | str, notes: str = "",
           speed: host_speed.HostSpeed | None = None) -> str:
    """A results file's text. ``host`` and ``date`` may be given as text (a seeded file
    states the machine as it was described); ``speed``: how fast the host was, if
    measured (`bench/host_speed.py`)."""
    blocks = [tables] if isinstance(tables, str) else list(tables)
    cmd = command if isinstance(command, str) else shlex.join(command)
    when = date if isinstance(date, str) else date.astimezone(UTC).strftime(
        "%Y-%m-%d %H:%M UTC")
    where = host if isinstance(host, str) else host.describe()
    lines = [
        f"# Results: {bench}", "",
        "Written by the bench at the end of its run (`bench/results.py`); the next run "
        "replaces it. What the bench measures: [docs/benchmarks.md](../../docs/benchmarks.md).",
        "",
        f"- machine: {where}",
        *([f"- host speed at the end of the run: {speed.describe()} (`bench/host_speed.py`)"]
          if speed is not None else []),
        f"- date: {when}",
        f"- command: {_code(cmd)}",
        "",
        *("\n\n".join(b.strip("\n") for b in blocks if b.strip())).split("\n"),
    ]
    if notes.strip():
        lines += ["", "## Notes", "", notes.strip("\n")]
    return "\n".join(lines).rstrip() + "\n"


def write_results(bench: str, tables: str | Sequence[str], *, command: Sequence[str] | str,
                  notes: str = "", root: Path | None = None, host: Machine | None = None,
                  date: datetime | None = None,
                  speed: host_speed.HostSpeed | None = None) -> Path:
    """Replace ``<root>/<bench>.md`` (root: ``bench/results``) with this run's ``tables``
    (Markdown blocks: tables, text, :func:`fenced` output) under the machine, how fast it
    was, the date and ``command`` (``sys.orig_argv`` for the exact command line); a run as
    another CPU (`cpu_mask`) writes ``<bench>-as-<cpu>.md``. Returns the path.

    ``host`` None: this machine, and its speed measured now (`host_speed.measure`, ~0.5
    s) unless ``speed`` is given; a ``host`` given is described as it is, with ``speed``
    only if given."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", bench):
        raise ValueError(f"bench name {bench!r}: lowercase letters, digits, '.' and '-' only")
    if host is None:
        host = machine()
        speed = speed or host_speed.measure()
    if host.masked_as and not bench.endswith(f"-as-{host.masked_as}"):
        bench += f"-as-{host.masked_as}"  # a masked run never replaces the machine's own
    path = (root or RESULTS_DIR) / f"{bench}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render(bench, tables, command=command, host=host,
                  date=date or datetime.now(UTC), notes=notes, speed=speed)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    print(f"results: {_shown(path)}", file=sys.stderr)
    return path


def add_no_write(parser: argparse.ArgumentParser) -> None:
    """The ``--no-write`` flag every bench takes (``args.no_write``)."""
    parser.add_argument("--no-write", action="store_true",
                        help="do not write bench/results/ (by default a run replaces its file)")


def markdown_table(headers: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table (``|`` in a cell escaped)."""
    def row(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ")
                                 for c in cells) + " |"
    return "\n".join([row(headers), "|" + "---|" * len(headers), *(row(r) for r in rows)])


def percentile_ms(values: Sequence[float], q: float) -> str:
    """The q-th percentile of ``values`` (`assistant.loop.metrics.percentile`) in whole ms;
    ``-`` when there are none."""
    from assistant.loop.metrics import percentile

    p = percentile(values, q)
    return "-" if p is None else f"{p:.0f}"


def fenced(text: str) -> str:
    """``text`` as a fenced block, for output that is not Markdown (aligned columns)."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}text\n{text.strip(chr(10))}\n{fence}"


class Report:
    """A bench's final output: printed as it always was, and kept as Markdown blocks.

    ``table`` prints aligned text (``assistant.replay.report.format_table``) and keeps a
    Markdown table; ``line`` prints text and keeps each line as a paragraph (rows of a
    Markdown table printed line by line stay one table); ``pre`` prints text and keeps it
    fenced (or as the Markdown given).
    """

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out
        self._blocks: list[str] = []
        self._lines: list[str] = []

    @property
    def blocks(self) -> list[str]:
        self._flush()
        return list(self._blocks)

    def table(self, headers: Sequence[Any], rows: Sequence[Sequence[Any]]) -> None:
        from assistant.replay.report import format_table

        self._print(format_table(headers, rows))
        self._keep(markdown_table(headers, rows))

    def line(self, text: str = "") -> None:
        self._print(text)
        for one in text.split("\n"):
            if one.lstrip().startswith("|"):
                self._lines.append(one)  # a Markdown table printed row by row
            else:
                self._flush()
                if one.strip():
                    self._blocks.append(one)  # a paragraph: printed lines stay lines

    def pre(self, text: str, markdown: str | None = None) -> None:
        self._print(text)
        self._keep(fenced(text) if markdown is None else markdown)

    def _keep(self, block: str) -> None:
        self._flush()
        if block.strip():
            self._blocks.append(block)

    def _flush(self) -> None:
        if self._lines:
            self._blocks.append("\n".join(self._lines))
            self._lines = []

    def _print(self, text: str) -> None:
        print(text, file=self._out or sys.stdout, flush=True)


@contextlib.contextmanager
def capture() -> Iterator[io.StringIO]:
    """Everything printed to stdout inside, still printed, and kept in the yielded buffer."""
    kept = io.StringIO()
    real = sys.stdout

    class _Tee(io.TextIOBase):
        def write(self, s: str) -> int:
            kept.write(s)
            return real.write(s)

        def flush(self) -> None:
            real.flush()

    with contextlib.redirect_stdout(_Tee()):
        yield kept


def _family(cpu: str) -> str:
    """``amd-epyc`` from ``AMD EPYC 7B13 64-Core Processor``, ``intel-xeon`` from
    ``Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz``."""
    text = re.sub(r"\((R|TM|tm|r)\)|@.*$", " ", cpu)
    words = [w for w in text.split()
             if not re.fullmatch(r"(?i)cpu|processor|\d+-core|[\d.]+ghz", w)]
    return _slug(" ".join(words[:2]) or "cpu")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "unknown"


def _code(text: str) -> str:
    ticks = "`"
    while ticks in text:
        ticks += "`"
    pad = " " if ticks != "`" else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
