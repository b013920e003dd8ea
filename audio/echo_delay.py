"""Where the assistant's echo sits in the microphone, measured from the audio itself.

AEC3 cancels an echo that comes between about 0 and 400 ms after the reference it is
fed; an echo that comes before its reference is not cancelled at all. The reference is
placed by the times the devices report (:class:`audio.echo.EchoReference`), and those
can be wrong by more than the canceller's lead: a host API that reports a latency it
does not have, a microphone stream anchored late, a loopback whose latency drifts. Then
the whole reply leaks through and interrupts itself.

:class:`EchoDelayEstimator` measures the lag directly, by generalised cross-correlation
with phase transform (GCC-PHAT; Knapp and Carter, 1976) between the raw microphone and
the reference, over short windows while the far end plays: ``mic[t] ~ ref(t - lag)``.
The phase transform whitens both spectra, so a speech echo gives a sharp peak at its
delay whatever its level, and uncorrelated sound (the user, room noise) gives none. A
lag is reported once it is sure: one strong peak, or two agreeing weaker ones. A maximum
on the edge of the searched lags is no peak: the echo may lie beyond it (a path slower
than ``max_lag_ms``, or a loopback rebuffering under load), and moving the reference
there would misplace it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from audio.vad import frame_energy_dbfs

__all__ = ["EchoDelay", "EchoDelayEstimator", "phat", "holds_echo"]


@dataclass(frozen=True)
class EchoDelay:
    """One measurement: the echo comes ``lag_ms`` after its reference (negative: before)."""

    lag_ms: float
    strength: float
    """The PHAT peak, 0..1 (an exact delayed copy gives 1)."""


class Reference(Protocol):
    """The far end on the mic's timeline (:class:`audio.echo.EchoReference`)."""

    sample_rate: int

    def get(self, start: int, n: int) -> npt.NDArray[np.float32]: ...


class EchoDelayEstimator:
    """Measures the echo's lag from raw mic audio and the far-end reference.

    :meth:`push` takes the raw microphone in order (as it arrives, before any echo
    processing); every ``hop_ms`` it correlates the last ``window_ms`` with the
    reference over lags ``min_lag_ms .. max_lag_ms``, if the far end played in that
    span. It returns an :class:`EchoDelay` when a peak inside that range (not within
    ``edge_ms`` of its ends) reaches ``sure_strength``, or when two windows in a row
    agree within 2 ms at ``min_strength`` or more.
    """

    def __init__(
        self,
        reference: Reference,
        *,
        window_ms: int = 300,
        hop_ms: int = 150,
        min_lag_ms: int = -250,
        max_lag_ms: int = 800,
        min_strength: float = 0.15,
        sure_strength: float = 0.35,
        edge_ms: float = 2.0,
        active_floor_dbfs: float = -60.0,
    ) -> None:
        self.reference = reference
        rate = reference.sample_rate
        self._rate = rate
        self._window = rate * window_ms // 1000
        self._hop = rate * hop_ms // 1000
        self._min_lag = rate * min_lag_ms // 1000
        self._max_lag = rate * max_lag_ms // 1000
        self.min_strength = min_strength
        self.sure_strength = sure_strength
        self._edge = int(round(rate * edge_ms / 1000))
        self.active_floor_dbfs = active_floor_dbfs
        span = self._window + self._max_lag - self._min_lag
        self._fft = 1 << int(np.ceil(np.log2(span + self._window)))
        self._mic = np.zeros(0, np.float32)
        self._mic_end = 0  # mic-timeline sample after the last one pushed
        self._next_at = 0  # mic end at which the next window is measured
        self._previous: EchoDelay | None = None
        self.measured = 0
        """Windows in which the far end played (correlated unless the mic was silent)."""

    def push(self, mic: npt.NDArray[np.float32], start: int) -> EchoDelay | None:
        """Raw mic samples from ``start``; a confirmed lag when a window makes one."""
        pcm = np.asarray(mic, np.float32)
        if self._mic.size and start != self._mic_end:  # a hole: start over
            self._mic = np.zeros(0, np.float32)
            self._previous = None
            self._next_at = 0
        self._mic = np.concatenate([self._mic, pcm])[-self._window :]
        self._mic_end = start + pcm.size
        if self._mic.size < self._window or self._mic_end < self._next_at:
            return None
        self._next_at = self._mic_end + self._hop
        return self._measure()

    def _measure(self) -> EchoDelay | None:
        end = self._mic_end
        # reference(t - lag) for t in the window, lag from max_lag down to min_lag
        ref = self.reference.get(end - self._window - self._max_lag,
                                 self._window + self._max_lag - self._min_lag)
        if frame_energy_dbfs(ref[: self._window + self._max_lag]) < self.active_floor_dbfs:
            return None  # nothing played that could echo in this window
        self.measured += 1
        if frame_energy_dbfs(self._mic) < self.active_floor_dbfs:
            self._previous = None
            return None
        corr = phat(self._mic, ref, self._max_lag - self._min_lag + 1, self._fft)
        # corr[s] pairs mic[t] with ref[t + s], which is reference(t - (max_lag - s)).
        s = int(np.argmax(corr))
        strength = float(corr[s])
        if s < self._edge or s >= corr.size - self._edge:
            self._previous = None  # the peak may lie beyond the range: not located
            return None
        now = EchoDelay((self._max_lag - s) * 1000.0 / self._rate, strength)
        previous, self._previous = self._previous, now if strength >= self.min_strength else None
        if strength >= self.sure_strength:
            return now
        if (previous is not None and strength >= self.min_strength
                and abs(previous.lag_ms - now.lag_ms) <= 2.0):
            return now
        return None


def phat(mic: npt.NDArray[np.float32], ref: npt.NDArray[np.float32], lags: int,
         fft: int = 0) -> npt.NDArray[np.float64]:
    """GCC-PHAT of ``mic`` against ``ref`` (which starts ``lags - 1`` samples of lag
    before the mic and covers it): element ``s`` pairs ``mic[t]`` with ``ref[t + s]``.
    ``fft``: the transform's size (0: the next power of two over both)."""
    n = fft or 1 << int(np.ceil(np.log2(mic.size + ref.size)))
    cross = np.conj(np.fft.rfft(mic, n)) * np.fft.rfft(ref, n)
    cross /= np.abs(cross) + 1e-12
    return np.asarray(np.fft.irfft(cross, n)[:lags], np.float64)


def holds_echo(mic: npt.NDArray[np.float32], start: int, reference: Reference,
               max_lag_ms: int, *, min_lag_ms: int = 0, strength: float = 0.15,
               window_ms: int = 300, active_floor_dbfs: float = -60.0) -> bool:
    """Whether raw mic samples from ``start`` may hold the far end's echo: in any
    ``window_ms`` of them (half a window apart; all of them if shorter) the far end played
    within ``max_lag_ms`` before, and the GCC-PHAT peak between the two, at a lag of
    ``min_lag_ms .. max_lag_ms``, reaches ``strength`` (:class:`EchoDelayEstimator`'s
    least, 0.15). The user's own voice does not correlate with the reply: a sound it does
    not explain is theirs. Each window is asked alone because a louder voice over the
    echo whitens it away: a weak echo before the user spoke, correlated together with
    their words, stays under the bar (tests/assistant/test_listener_hidden_onset.py)."""
    rate = reference.sample_rate
    lo, hi = rate * min_lag_ms // 1000, rate * max_lag_ms // 1000
    window = min(mic.size, rate * window_ms // 1000)
    if window == 0:
        return False
    last = mic.size - window
    for at in sorted({*range(0, last + 1, max(1, window // 2)), last}):
        part = np.asarray(mic[at: at + window], np.float32)
        ref = reference.get(start + at - hi, window + hi - lo)
        if frame_energy_dbfs(ref) < active_floor_dbfs or frame_energy_dbfs(part) < active_floor_dbfs:
            continue  # nothing played that could echo here, or nothing heard
        if float(np.max(phat(part, ref, hi - lo + 1))) >= strength:
            return True
    return False
