"""How fast this host is right now, in three figures a results file can carry.

The same code on the same kind of machine (a 2-core virtual machine) has measured far apart
on different days, and the results files could only say "this host is slower today"
without a figure to show it. These three are the costs the benches are made of, each
measured in a fraction of a second:

- **Python**: nanoseconds per step of a small interpreted loop. Batch-1 decode, the event
  loop and every per-frame path are mostly calls from Python.
- **Memory read**: GB/s of one core summing an array far larger than the caches (numpy,
  one thread). Batch-1 decode streams the weights once per token.
- **First touch**: microseconds per 4 KiB page written for the first time in fresh
  anonymous memory (a page fault and the zeroing behind it), cheap on bare metal and
  many times dearer in a virtual machine that backs guest memory lazily or shadows its
  page tables; model loading (hundreds of MB of new tensors) pays it.

Each figure is the best of a few tries, so a busy moment weighs less than a quiet one.
"""

from __future__ import annotations

import mmap
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["HostSpeed", "measure"]

_PAGE = 4096


@dataclass(frozen=True)
class HostSpeed:
    """This host's speed at one moment (see the module docstring)."""

    python_ns: float
    """Nanoseconds per step of an interpreted loop (lower is faster)."""
    memory_gb_s: float
    """One core reading memory, GB/s."""
    first_touch_us: float
    """Microseconds per 4 KiB page of fresh memory written the first time."""

    def describe(self) -> str:
        return (f"Python {self.python_ns:.0f} ns a loop step, memory read "
                f"{self.memory_gb_s:.1f} GB/s on one core, first touch of memory "
                f"{self.first_touch_us:.1f} us per 4 KiB page")


def measure(*, tries: int = 3, memory_mib: int = 128, touch_mib: int = 32) -> HostSpeed:
    """The three figures, best of ``tries`` each (~0.5 s in all on a 2-core VM)."""
    if tries < 1 or memory_mib < 1 or touch_mib < 1:
        raise ValueError("tries, memory_mib and touch_mib must be >= 1")
    return HostSpeed(python_ns=min(_python_ns() for _ in range(tries)),
                     memory_gb_s=_memory_gb_s(memory_mib, tries),
                     first_touch_us=min(_first_touch_us(touch_mib) for _ in range(tries)))


def _python_ns(steps: int = 200_000) -> float:
    total = 0
    start = time.perf_counter_ns()
    for i in range(steps):
        total += i & 7
    return (time.perf_counter_ns() - start) / steps


def _memory_gb_s(mib: int, tries: int) -> float:
    data = np.ones(mib << 18, dtype=np.float32)  # mib MiB, touched before it is timed
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return data.nbytes / best / 1e9


def _first_touch_us(mib: int) -> float:
    # Private anonymous memory, as the heap and the engine's KV pool are (Python's default
    # anonymous map is shared memory, whose faults take another path): zero-filled by the
    # kernel on the first write to each page, and not made of transparent huge pages
    # unless asked (the kernel's "madvise" setting).
    private = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}
    region = mmap.mmap(-1, mib << 20, **private)
    try:
        view = np.frombuffer(region, dtype=np.uint8)
        start = time.perf_counter()
        view[::_PAGE] = 1
        elapsed = time.perf_counter() - start
        pages = view[::_PAGE].size
        del view  # the buffer is exported while a view holds it
    finally:
        region.close()
    return elapsed / pages * 1e6
