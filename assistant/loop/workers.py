"""Off-loop model work: one thread per model, commands in, outputs posted back.

Blocking model calls never run on the event loop. Each :class:`Worker` owns a thread
and three queues, served in order: *control* (cancel, cut: overtakes everything),
*normal*, then *low* (speculative work). Between commands a worker may do background
steps (the engine's decode steps, an ASR partial re-decode). Outputs go through
``post``, which the pipeline binds to ``loop.call_soon_threadsafe``.

For deterministic replay on a virtual clock, :meth:`Worker.idle` returns a future that
completes once the worker has nothing queued and no background work: "compute takes
zero virtual time" is implemented by waiting for every worker to be idle before the
clock moves. Outputs posted before that point are already queued on the loop.

A worker may be *held* (:meth:`Worker.hold`): it then runs control commands only, and
counts as idle with its other work waiting, so that another worker's urgent work gets
the CPU (two cores: Piper synthesising ahead of a paused reply doubled the decode of
the speech over it).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Command", "Worker", "WorkerFailed", "Post"]

Command = Callable[[], None]
Post = Callable[[Any], None]
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerFailed:
    """A command or background step raised; the pipeline decides what to do."""

    worker: str
    error: BaseException


class Worker:
    """A thread running commands and background steps (see the module docstring)."""

    def __init__(self, name: str, post: Post) -> None:
        self.name = name
        self.post = post
        self._cond = threading.Condition()
        self._queues: tuple[deque[Command], deque[Command], deque[Command]] = (
            deque(), deque(), deque())
        self._idle_waiters: list[concurrent.futures.Future[None]] = []
        self._busy = False
        self._held = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"assistant-{name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ caller side

    def submit(self, command: Command, *, priority: str = "normal") -> None:
        """Queue ``command`` ("control", "normal" or "low")."""
        index = {"control": 0, "normal": 1, "low": 2}[priority]
        with self._cond:
            if self._closed:
                return
            self._queues[index].append(command)
            self._cond.notify()

    def hold(self, held: bool) -> None:
        """Run control commands only while ``held`` (normal and low ones, and background
        steps, wait; the worker counts as idle); ``False`` lets them run again."""
        with self._cond:
            if held != self._held:
                self._held = held
                self._cond.notify()

    def idle(self) -> concurrent.futures.Future[None]:
        """Completes when nothing runnable is queued and no background work remains
        (while held, only control commands count)."""
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._closed or (not self._busy and not self._runnable()):
                fut.set_result(None)
            else:
                self._idle_waiters.append(fut)
                self._cond.notify()
        return fut

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread after the command in progress; queued commands are dropped."""
        with self._cond:
            self._closed = True
            for q in self._queues:
                q.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        self.on_close()
        with self._cond:
            waiters, self._idle_waiters = self._idle_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ subclass hooks

    def has_background_work(self) -> bool:
        """Whether :meth:`background_step` has something to do (called on any thread)."""
        return False

    def background_step(self) -> None:
        """One bounded piece of background work, run when no command is queued."""

    def on_close(self) -> None:
        """Release resources (runs on the closing thread after the worker stopped)."""

    # ------------------------------------------------------------------ thread

    def _next(self) -> Command | None:
        for q in self._queues[:1] if self._held else self._queues:
            if q:
                return q.popleft()
        return None

    def _runnable(self) -> bool:
        """Work to run now (called holding the lock)."""
        if self._held:
            return bool(self._queues[0])
        return any(self._queues) or self.has_background_work()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    command = self._next()
                    background = (command is None and not self._held
                                  and self.has_background_work())
                    if command is not None or background:
                        self._busy = True
                        break
                    waiters, self._idle_waiters = self._idle_waiters, []
                    self._busy = False
                    for fut in waiters:
                        fut.set_result(None)
                    self._cond.wait()
            try:
                if command is not None:
                    command()
                else:
                    self.background_step()
            except BaseException as exc:  # reported; the thread survives
                # Even a SystemExit raised by a model library must not leave the worker
                # "busy" forever (nobody waiting on idle() would ever wake): report it to
                # the pipeline, which fails the conversation, and go on serving.
                _log.exception("%s worker failed", self.name)
                self.post(WorkerFailed(self.name, exc))
