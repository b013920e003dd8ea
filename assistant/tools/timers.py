"""Timers that speak when they fire: the state behind the ``set_timer`` tool.

`TimerService` is one conversation's timers on an injected monotonic clock (seconds).
Its core is synchronous: `start`, `cancel`, and `pop_due(now_s)`, which a loop that
owns its clock (replay's virtual one, say) calls as its time moves. For live use,
`fired()` is the async shell: an iterator that waits, on the event loop, for the next
timer due and yields it. Either way the loop says `Timer.announcement` when one fires.

`start` and `cancel` may be called from any thread (a tool may run in a worker thread);
`fired()` is consumed on one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

__all__ = ["MAX_TIMER_S", "Timer", "TimerService"]

MAX_TIMER_S = 24 * 3600.0
"""Longest timer, in seconds (a service may set less)."""


@dataclass(frozen=True)
class Timer:
    """One timer."""

    timer_id: int
    """Unique within its service, from 1."""
    label: str
    """What it is for ("pasta"); may be empty."""
    seconds: float
    """The duration that was asked for, in seconds."""
    due_s: float
    """When it fires, on the service's clock, in seconds."""

    @property
    def announcement(self) -> str:
        """What the assistant says when it fires."""
        return f"Your timer for {self.label} is done." if self.label else "Your timer is done."


class TimerService:
    """The pending timers of one conversation.

    `clock` gives monotonic seconds (the loop's clock, injected). At most `max_timers`
    are pending; a timer lasts at most `max_seconds`.
    """

    def __init__(self, clock: Callable[[], float], *, max_timers: int = 16,
                 max_seconds: float = MAX_TIMER_S) -> None:
        self._clock = clock
        self._max_timers = max_timers
        self.max_seconds = max_seconds
        self._lock = threading.Lock()
        self._pending: dict[int, Timer] = {}
        self._next_id = 1
        self._wakeup: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def start(self, seconds: float, label: str = "") -> Timer:
        """A new timer due `seconds` from now; `ValueError` for a duration out of range
        or too many pending timers."""
        if not 0 < seconds <= self.max_seconds:
            raise ValueError(f"a timer lasts more than 0 and at most {self.max_seconds:g} s, "
                             f"not {seconds:g}")
        with self._lock:
            if len(self._pending) >= self._max_timers:
                raise ValueError(f"too many timers running (at most {self._max_timers})")
            timer = Timer(timer_id=self._next_id, label=label.strip(), seconds=float(seconds),
                          due_s=self._clock() + seconds)
            self._next_id += 1
            self._pending[timer.timer_id] = timer
        self._wake()
        return timer

    def cancel(self, timer_id: int) -> bool:
        """Drop a pending timer; False if there is none by that id (idempotent)."""
        with self._lock:
            found = self._pending.pop(timer_id, None) is not None
        if found:
            self._wake()
        return found

    def pending(self) -> tuple[Timer, ...]:
        """Pending timers, soonest first."""
        with self._lock:
            return tuple(sorted(self._pending.values(), key=lambda t: (t.due_s, t.timer_id)))

    def next_due_s(self) -> float | None:
        """When the soonest pending timer fires (None: no timer pending)."""
        soonest = self.pending()
        return soonest[0].due_s if soonest else None

    def pop_due(self, now_s: float | None = None) -> list[Timer]:
        """Remove and return the timers due at `now_s` (default: the clock), soonest first."""
        now = self._clock() if now_s is None else now_s
        with self._lock:
            due = sorted((t for t in self._pending.values() if t.due_s <= now),
                         key=lambda t: (t.due_s, t.timer_id))
            for timer in due:
                del self._pending[timer.timer_id]
        return due

    async def fired(self) -> AsyncIterator[Timer]:
        """Yield each timer as it fires, for as long as it is iterated (cancel the task
        iterating it to stop). Sleeps until the soonest timer is due; a timer started or
        cancelled meanwhile wakes it to look again."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        with self._lock:
            if self._wakeup is not None:
                raise RuntimeError("fired() is already being iterated")
            self._wakeup = (loop, event)
        try:
            while True:
                event.clear()  # before looking: a start from here on wakes the wait
                for timer in self.pop_due():
                    yield timer
                due = self.next_due_s()
                wait = None if due is None else max(0.0, due - self._clock())
                with contextlib.suppress(asyncio.TimeoutError):  # the soonest is due
                    await asyncio.wait_for(event.wait(), timeout=wait)
        finally:
            with self._lock:
                self._wakeup = None

    def _wake(self) -> None:
        with self._lock:
            wakeup = self._wakeup
        if wakeup is not None:
            loop, event = wakeup
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting
                loop.call_soon_threadsafe(event.set)
