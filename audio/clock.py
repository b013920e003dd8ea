"""Injected clocks: time as an integer count of samples.

Every chunk, event and playback position in the audio package is stamped in samples on
one monotonic clock that is passed in, never read from the wall inside logic:

- :class:`VirtualClock` only moves when told to (``advance`` / ``wait_until``), so replay
  and tests run as fast as the CPU allows and are fully deterministic.
- :class:`DeviceClock` follows a real monotonic time source (by default
  ``time.monotonic``, which is also what PortAudio's stream time uses on Linux); its
  ``wait_until`` sleeps.

Both expose ``samples_at(seconds)`` so that device callbacks can map PortAudio's
``inputBufferAdcTime`` / ``outputBufferDacTime`` onto the same sample timeline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "VirtualClock", "DeviceClock", "convert_samples"]


def convert_samples(samples: int, from_rate: int, to_rate: int) -> int:
    """Convert a sample count between rates, rounding down (exact integer arithmetic)."""
    if from_rate == to_rate:
        return int(samples)
    return (int(samples) * int(to_rate)) // int(from_rate)


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock counted in samples at ``sample_rate``."""

    @property
    def sample_rate(self) -> int:
        """Hz; one clock tick is one sample at this rate."""
        ...

    def now_samples(self) -> int:
        """Current time in samples since the clock's origin."""
        ...

    def wait_until(self, sample: int) -> None:
        """Return once ``now_samples() >= sample`` (a virtual clock jumps there)."""
        ...

    def samples_at(self, seconds: float) -> int:
        """Map a time in the clock's own time base (seconds) to samples."""
        ...

    def subscribe(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(now_samples)`` whenever a virtual clock moves.

        Returns an unsubscribe function. A device clock moves continuously and never
        calls back; consumers must read ``now_samples()`` when they need it.
        """
        ...


class VirtualClock:
    """A clock that advances only by explicit steps, in samples.

    Thread-safe: a source thread may advance it while a sink reads it. Subscribers are
    called after each move, outside the lock, from the thread that moved the clock.
    """

    def __init__(self, sample_rate: int = 16000, start_sample: int = 0) -> None:
        if sample_rate <= 0:
            raise ValueError(f"clock sample_rate must be positive, got {sample_rate}")
        if start_sample < 0:
            raise ValueError(f"clock start_sample must be >= 0, got {start_sample}")
        self._rate = int(sample_rate)
        self._now = int(start_sample)
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[int], None]] = []

    @property
    def sample_rate(self) -> int:
        return self._rate

    def now_samples(self) -> int:
        with self._lock:
            return self._now

    def advance(self, samples: int) -> int:
        """Move forward by ``samples`` (>= 0); returns the new time."""
        if samples < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {samples})")
        with self._lock:
            self._now += int(samples)
            now = self._now
            subscribers = list(self._subscribers)
        for callback in subscribers:
            callback(now)
        return now

    def wait_until(self, sample: int) -> None:
        """Jump forward to ``sample`` at once (no-op if already there or past it)."""
        with self._lock:
            delta = int(sample) - self._now
        if delta > 0:
            self.advance(delta)

    def samples_at(self, seconds: float) -> int:
        return int(round(seconds * self._rate))

    def subscribe(self, callback: Callable[[int], None]) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe


class DeviceClock:
    """Real time from a monotonic source, counted in samples since construction.

    ``time_fn`` returns seconds on a monotonic time base (default ``time.monotonic``);
    ``sleep_fn`` sleeps. Both are injectable so that tests can drive this clock too.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        time_fn: Callable[[], float] | None = None,
        sleep_fn: Callable[[float], None] | None = None,
    ) -> None:
        if sample_rate <= 0:
            raise ValueError(f"clock sample_rate must be positive, got {sample_rate}")
        self._rate = int(sample_rate)
        self._time_fn = time_fn if time_fn is not None else time.monotonic
        self._sleep_fn = sleep_fn if sleep_fn is not None else time.sleep
        self._origin_s = self._time_fn()

    @property
    def sample_rate(self) -> int:
        return self._rate

    @property
    def origin_s(self) -> float:
        """The time-base reading (seconds) that is sample 0."""
        return self._origin_s

    def now_seconds(self) -> float:
        """The current reading of the time base, in seconds (not relative to origin)."""
        return self._time_fn()

    def now_samples(self) -> int:
        return self.samples_at(self._time_fn())

    def samples_at(self, seconds: float) -> int:
        return int(round((seconds - self._origin_s) * self._rate))

    def wait_until(self, sample: int) -> None:
        # Sleep in bounded steps: time.sleep can wake early or late; re-check each time.
        while True:
            remaining = (int(sample) - self.now_samples()) / self._rate
            if remaining <= 0:
                return
            self._sleep_fn(min(remaining, 0.05))

    def subscribe(self, callback: Callable[[int], None]) -> Callable[[], None]:
        def unsubscribe() -> None:
            return None

        return unsubscribe
