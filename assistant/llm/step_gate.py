"""Let a reply's first audio be made ahead of the engine's next decode step.

On a CPU the engine shares its cores with Piper. When a reply's first clause is
synthesised, nothing is playing yet: the listener waits for exactly that synthesis, while
the decode steps running beside it only make text that is spoken a second or more later.
On two cores, with the engine decoding beside it, Piper took 87-109 ms for the 16-character
first clause in the real-time loop, against ~45 ms alone (`bench/bench_loop.py`'s
waterfall, and a scratch timeline of the demo conversation).

A :class:`StepGate` is held (:meth:`StepGate.hold`) around such urgent work on any thread;
the engine host calls :meth:`StepGate.wait` before each step, which returns at once when
nothing holds the gate, and otherwise when the holds are released or ``max_hold_s`` has
passed (a synthesis that hangs cannot starve the engine). Commands are not gated (a
barge-in's cut runs between steps as ever), only steps: a command that arrives while
the engine waits ends the wait (:meth:`StepGate.wait`'s ``wake``, :meth:`StepGate.nudge`).
Before, it waited with the step: in a daemon, where one session's first clause after
another can hold the gate, a session's turn start (or a barge-in's cut) could wait up to
250 ms behind them. The work is the same; only its order changes.

A hold may also follow a state (:meth:`StepGate.set_held`): the talk loop holds the gate
while a reply is paused by speech over it, so the speech's transcript, which decides
whether the cut stands, is not decoded beside the reply's tokens ahead of playback
(`assistant.loop.types.PipelineOptions.pause_priority`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Iterator

__all__ = ["StepGate"]


class StepGate:
    """Holds the engine's steps while urgent work runs (see the module docstring)."""

    def __init__(self, max_hold_s: float = 0.25) -> None:
        if max_hold_s <= 0:
            raise ValueError(f"max_hold_s must be > 0, got {max_hold_s}")
        self.max_hold_s = max_hold_s
        self._cond = threading.Condition()
        self._holds = 0
        self._reasons: set[Hashable] = set()
        self._waiting = 0
        self.waited_s = 0.0
        """Time the engine spent waiting at the gate, in all."""

    @property
    def held(self) -> bool:
        with self._cond:
            return self._holds > 0

    @property
    def waiting(self) -> int:
        """How many threads are blocked in :meth:`wait` now."""
        with self._cond:
            return self._waiting

    def set_held(self, reason: Hashable, held: bool) -> None:
        """Hold the gate for ``reason`` (any key: the holder itself, say) until called
        again with ``held`` false: for a hold that follows a state rather than a block
        of code. Idempotent per reason."""
        with self._cond:
            if held == (reason in self._reasons):
                return
            if held:
                self._reasons.add(reason)
                self._holds += 1
                return
            self._reasons.discard(reason)
            self._release()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Engine steps wait (up to ``max_hold_s``) while this block runs. Re-entrant and
        shared: several holders may hold at once."""
        with self._cond:
            self._holds += 1
        try:
            yield
        finally:
            with self._cond:
                self._release()

    def nudge(self) -> None:
        """Something a waiting engine's ``wake`` reads has changed: read it again."""
        with self._cond:
            self._cond.notify_all()

    def _release(self) -> None:
        """One hold ends (called holding the condition's lock)."""
        self._holds -= 1
        if self._holds == 0:
            self._cond.notify_all()

    def wait(self, wake: Callable[[], bool] | None = None, since: float | None = None
             ) -> float:
        """Block while the gate is held, at most ``max_hold_s`` after ``since`` (a
        ``time.monotonic()``; default now: a step that already waited, then let commands
        run, waits only for the rest), or until ``wake()`` is true (read at the start
        and at each :meth:`nudge`; it must not block); the seconds waited."""
        def woken() -> bool:
            return wake is not None and wake()

        with self._cond:
            if self._holds == 0 or woken():
                return 0.0
            start = time.monotonic()
            deadline = (start if since is None else since) + self.max_hold_s
            self._waiting += 1
            try:
                while self._holds > 0 and not woken():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            finally:
                self._waiting -= 1
            waited = time.monotonic() - start
            self.waited_s += waited
            return waited
