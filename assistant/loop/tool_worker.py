"""Local tools in the loop: a closed reply's calls run, then the assistant answers.

A reply that calls tools is not spoken (`assistant.dialogue.live_turn`); once it is
closed in the history -- played to its end, never cut: a barge-in cut it to the words
heard, which hold no call -- :class:`ToolWorker` runs its calls one after the other
(`assistant.tools.run_tool`: bad arguments, an exception or a timeout become a result
the model is told about) and posts :class:`ToolsDone`; the router then starts the next
reply on those results, or, if the user has taken the floor meanwhile, records them
without a reply. Speech from the user cancels a running call (:meth:`ToolWorker.cancel`):
its result says so.

Speculation never runs a tool: a draft's calls stay on its fork (a draft is not a closed
reply), so a speculation that missed leaves nothing behind.

At most ``MAX_ROUNDS`` replies in a row may call tools; past that, the calls are not run
and the model is told to answer without them (no dead loop on a model that keeps
calling).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from assistant.dialogue.types import CallMade
from assistant.loop import event_log as log
from assistant.tools.options import ToolOptions
from assistant.tools.registry import ToolRegistry
from assistant.tools.runner import error_output as _error
from assistant.tools.runner import run_call
from assistant.tools.timers import TimerService
from audio.clock import Clock

__all__ = ["LocalTools", "LoopTime", "MAX_ROUNDS", "SayText", "ToolWorker", "ToolsDone"]

MAX_ROUNDS = 3
"""Replies in a row whose calls are run."""

_log = logging.getLogger(__name__)


class LoopTime:
    """Seconds on the conversation's clock, for its timers (bound when the conversation
    opens: a replay's virtual clock, the device clock live; monotonic time until then)."""

    def __init__(self) -> None:
        self._clock: Clock | None = None

    def bind(self, clock: Clock) -> None:
        self._clock = clock

    def __call__(self) -> float:
        clock = self._clock
        return time.monotonic() if clock is None else clock.now_samples() / clock.sample_rate


@dataclass(frozen=True)
class LocalTools:
    """The tools a conversation runs itself (``tools.enabled``), and how."""

    registry: ToolRegistry
    options: ToolOptions = ToolOptions()
    timers: TimerService | None = None
    """Its timers (``builtin:set_timer``), announced when they fire."""
    time: LoopTime | None = None
    """The timers' clock, bound to the conversation's when it opens."""


@dataclass(frozen=True)
class ToolsDone:
    """The calls of reply ``turn_id`` ran: their results ``(name, output)``, in order."""

    turn_id: int
    results: tuple[tuple[str, str], ...]
    respond: bool = True
    """False: record the results without a reply (cancelled, or too many rounds)."""


@dataclass(frozen=True)
class SayText:
    """The assistant should say ``text`` itself (a filler, a timer) once it may."""

    text: str
    filler: bool = False


class ToolWorker:
    """See the module docstring. Lives on the event loop; ``post`` hands
    :class:`ToolsDone` to the pipeline's inbox."""

    def __init__(self, tools: LocalTools | None, post: Callable[[Any], None],
                 emit: Callable[[log.Entry], None], now_ms: Callable[[], int]) -> None:
        self._tools = tools
        self._post = post
        self._emit = emit
        self._now_ms = now_ms
        self._task: asyncio.Task[None] | None = None
        self._running: tuple[int, tuple[CallMade, ...], list[tuple[str, str]]] | None = None
        self._rounds = 0
        self._idle: concurrent.futures.Future[None] | None = None
        self.filler_turn: int | None = None
        """The filler turn in flight: results wait for it to end (:meth:`defer`)."""
        self._deferred: ToolsDone | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def user_turn(self) -> None:
        """A reply to the user's own words started: tool rounds count afresh."""
        self._rounds = 0

    def said(self, turn_id: int) -> None:
        """The filler asked for is turn ``turn_id``."""
        self.filler_turn = turn_id

    def defer(self, done: ToolsDone) -> None:
        """Results came while the filler plays: answer once it has ended."""
        self._deferred = done

    def poll_timers(self, listening: bool) -> None:
        """Announce a timer that fired, once nobody holds the floor (call every frame)."""
        timers = None if self._tools is None else self._tools.timers
        if timers is None or not listening or self.busy or self.filler_turn is not None:
            return
        due = timers.pop_due()
        if due:
            for timer in due:
                self._post(SayText(timer.announcement))

    def turn_closed(self, turn_id: int, calls: tuple[CallMade, ...], error: str | None,
                    interrupted: bool) -> None:
        """A reply closed; run its calls if it made any (and was not cut)."""
        if turn_id == self.filler_turn:
            self.filler_turn = None
            deferred, self._deferred = self._deferred, None
            if deferred is not None:
                self._post(deferred)
            return
        if self._tools is None or interrupted or not (calls or error):
            return
        self._rounds += 1
        if self._rounds > MAX_ROUNDS + 1:
            _log.warning("reply %d calls tools again after %d rounds: not run", turn_id,
                         MAX_ROUNDS)
            self._post(ToolsDone(turn_id, tuple(
                (c.name, _error("not run: too many tool calls in a row")) for c in calls)
                or (("", _error("too many tool calls in a row")),), respond=False))
            return
        if self._rounds > MAX_ROUNDS:
            self._post(ToolsDone(turn_id, tuple(
                (c.name, _error("not run: too many tool calls in a row; answer the user "
                                "without tools")) for c in calls) or (("", _error(
                                    "too many tool calls in a row")),)))
            return
        if error is not None:  # then the reply holds no readable call
            self._post(ToolsDone(turn_id, (("", _error(
                f"the tool call could not be read: {error}")),)))
            return
        done: list[tuple[str, str]] = []
        self._running = (turn_id, calls, done)
        self._task = asyncio.get_running_loop().create_task(self._run(turn_id, calls, done),
                                                             name=f"tools-{turn_id}")
        self._task.add_done_callback(self._task_done)

    def cancel(self, reason: str) -> None:
        """Stop the running calls (the user spoke): the results say ``reason``, and no
        reply follows them."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            self._post(dataclasses.replace(deferred, respond=False))
        task, running = self._task, self._running
        if task is None or task.done() or running is None:
            return
        task.cancel()
        turn_id, calls, done = running
        self._running = None
        results = list(done)
        for call in calls[len(done):]:
            results.append((call.name, _error(f"cancelled: {reason}")))
            self._emit(log.ToolFinishedEntry(self._now_ms(), call.call_id, call.name, False,
                                             results[-1][1], cancelled=True))
        self._post(ToolsDone(turn_id, tuple(results), respond=False))

    def idle(self) -> concurrent.futures.Future[None]:
        """Done once no call runs (the pipeline settles on it, as on its workers)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.busy:
            future.set_result(None)
        else:
            self._idle = future
        return future

    def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._running = None

    async def _run(self, turn_id: int, calls: tuple[CallMade, ...],
                   done: list[tuple[str, str]]) -> None:
        assert self._tools is not None
        registry, options = self._tools.registry, self._tools.options
        filler = options.filler_text
        for call in calls:
            self._emit(log.ToolStartedEntry(self._now_ms(), call.call_id, call.name))
            running = asyncio.ensure_future(
                run_call(registry, call.name, call.arguments, timeout_s=options.timeout_s))
            try:
                if filler:  # one short filler while a slow tool runs
                    finished, _ = await asyncio.wait({running},
                                                     timeout=options.filler_after_ms / 1000)
                    if not finished:
                        self._post(SayText(filler, filler=True))
                        filler = ""
                result = await running
            finally:
                running.cancel()
            self._emit(log.ToolFinishedEntry(self._now_ms(), call.call_id, call.name,
                                             result.ok, result.output))
            done.append((call.name, result.output))
        self._running = None
        self._post(ToolsDone(turn_id, tuple(done)))

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            _log.error("running tools failed", exc_info=task.exception())
            running, self._running = self._running, None
            if running is not None:  # the model is told, the conversation goes on
                turn_id, calls, done = running
                self._post(ToolsDone(turn_id, (*done, *(
                    (c.name, _error("the tool could not be run")) for c in calls[len(done):]))))
        idle, self._idle = self._idle, None
        if idle is not None and not idle.done():
            idle.set_result(None)

