"""Helpers for the live-audio tests: the assistant as a child process on the virtual
audio server, and what the bus recording shows (who spoke when)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from audio.virtual_server import BUS_RATE

MIC, SPEAKER = 0, 1
"""Columns of the bus recording."""

WINDOW_MS = 10


@contextlib.contextmanager
def _sigint_not_ignored() -> Iterator[None]:
    """Start children with SIGINT as a terminal's Ctrl-C finds it. A shell without job
    control starts a background command (``bash .ci/run &``) with SIGINT ignored, every
    process under it inherits that, and Python then leaves SIGINT ignored: a child
    ``assistant say`` would play to its end through the tests' Ctrl-C and exit 0. A
    handler set here (not SIG_IGN) becomes the default in a child at exec."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class AssistantProcess:
    """``python -m assistant ARGS`` with its output in files (read while it runs)."""

    def __init__(self, args: Sequence[str], env: dict[str, str], directory: Path) -> None:
        self.out_path = directory / "stdout.txt"
        self.err_path = directory / "stderr.txt"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err, \
                _sigint_not_ignored():
            self.proc = subprocess.Popen([sys.executable, "-m", "assistant", *args], env=env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    @property
    def stdout(self) -> str:
        # The terminal view redraws its status line with "\r\x1b[2K": keep finished lines.
        text = self.out_path.read_bytes().decode(errors="replace")
        return text.replace("\r", "\n").replace("\x1b[2K", "")

    @property
    def stderr(self) -> str:
        return self.err_path.read_bytes().decode(errors="replace")

    def wait_for(self, what: str, ready: Callable[[], bool], timeout_s: float) -> None:
        """Poll until ``ready()``; fail (and stop the process) on exit or timeout."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"assistant exited ({self.proc.returncode}) before {what}"
                                     f"\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"no {what} within {timeout_s:.0f} s\nstdout:\n"
                                     f"{self.stdout}\nstderr:\n{self.stderr}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGINT, timeout_s: float = 60.0) -> int:
        """Send ``sig`` and wait for the exit status (a hang is killed and fails)."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"assistant did not exit within {timeout_s:.0f} s of "
                                 f"{signal.Signals(sig).name}\nstderr:\n{self.stderr}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def lines(self, prefix: str) -> list[str]:
        return [line.strip() for line in self.stdout.splitlines()
                if line.strip().startswith(prefix)]


def foreign_stderr(stderr: str, ours: Callable[[str], bool]) -> list[str]:
    """Lines of ``stderr`` that are not our own one-line messages."""
    return [line for line in stderr.splitlines() if line.strip() and not ours(line.strip())]


def active(channel: npt.NDArray[np.float32], threshold: float = 3e-3) -> npt.NDArray[np.bool_]:
    """Per 10 ms window of ``channel``: is anything audible (RMS above ``threshold``)?"""
    n = BUS_RATE * WINDOW_MS // 1000
    usable = channel[: channel.size // n * n].reshape(-1, n)
    rms = np.sqrt(np.mean(np.square(usable, dtype=np.float64), axis=1))
    return np.asarray(rms > threshold)


def segments(channel: npt.NDArray[np.float32], merge_ms: int = 700,
             min_ms: int = 100) -> list[tuple[float, float]]:
    """Stretches of sound in ``channel`` as (start, end) seconds, gaps under
    ``merge_ms`` merged, blips under ``min_ms`` dropped."""
    on = active(channel)
    out: list[tuple[int, int]] = []
    i = 0
    while i < on.size:
        if not on[i]:
            i += 1
            continue
        j = i
        while j < on.size and on[j]:
            j += 1
        if out and (i - out[-1][1]) * WINDOW_MS < merge_ms:
            out[-1] = (out[-1][0], j)
        else:
            out.append((i, j))
        i = j
    return [(a * WINDOW_MS / 1000, b * WINDOW_MS / 1000) for a, b in out
            if (b - a) * WINDOW_MS >= min_ms]


def audible_between(channel: npt.NDArray[np.float32], start_s: float, end_s: float) -> float:
    """Seconds of sound in ``channel`` between two times."""
    on = active(channel)
    lo, hi = int(start_s * 1000 / WINDOW_MS), int(end_s * 1000 / WINDOW_MS)
    return float(on[max(0, lo): max(0, hi)].sum()) * WINDOW_MS / 1000


def find_clip(channel: npt.NDArray[np.float32], clip: npt.NDArray[np.float32],
              start_s: float, search_s: float) -> float:
    """Where (seconds) ``clip`` (at the bus rate) begins in ``channel``, searched from
    ``start_s`` for ``search_s``: the peak of their cross-correlation (by FFT), which
    finds a recording under other sound on the same channel."""
    lo = max(0, int(start_s * BUS_RATE))
    seg = channel[lo: lo + int(search_s * BUS_RATE) + clip.size].astype(np.float64)
    size = 1 << (seg.size + clip.size - 1).bit_length()
    corr = np.fft.irfft(np.fft.rfft(seg, size) * np.conj(np.fft.rfft(clip.astype(np.float64), size)), size)
    return (lo + int(np.argmax(corr[: max(1, seg.size - clip.size + 1)]))) / BUS_RATE
