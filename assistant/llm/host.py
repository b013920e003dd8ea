"""One engine thread for every conversation of a process.

The LLM backend is not thread-safe and a decode step is worth most when it is batched
across conversations, so one :class:`EngineHost` thread owns the backend. Each
conversation (``talk``, a replay, every daemon session) opens a :class:`HostSession`:
its state (a :class:`~assistant.dialogue.dialogue.Dialogue`) is built, used and closed
on the host thread only, through commands the session submits from any thread; what
comes out is handed to the session's own ``post`` callback, never to another's.

The host thread loop, after exllamav2's ``iterate()`` and vLLM's engine core busy loop:

1. run the next queued command: control first (cancel, cut, close), then normal (start a
   turn), then low (speculation); first come first served within a priority;
2. otherwise, if the backend has work, run one backend step -- one batched decode of
   every conversation's generation -- and let every session collect its outputs (first
   waiting, briefly, while a reply's first audio is synthesised: see `StepGate`);
3. otherwise sleep until a command arrives. An idle host (or idle session) costs nothing.

Callers never wait on the engine: :meth:`HostSession.submit` only appends to a queue
under a short lock, so an event loop submitting a barge-in cut never stalls behind
engine steps. Failures stay with their owner: a command that raises is reported to
its session only (:class:`EngineFailed`); how a failed step is told to the sessions it
concerns while the host goes on serving everybody else is :mod:`assistant.llm.failures`.

For deterministic replay on a virtual clock, :meth:`HostSession.idle` completes once the
session has nothing queued and no generation in flight.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from assistant.llm.failures import Built, guard, shed_all, step_failed
from assistant.llm.protocol import BackendStats, LLMBackend
from assistant.llm.session import (
    Command,
    EngineFailed,
    H,
    HostClosed,
    Hosted,
    HostSession,
    Post,
    Priority,
)
from assistant.llm.step_gate import StepGate

__all__ = ["EngineHost", "HostSession", "Hosted", "EngineFailed", "HostClosed", "Priority",
           "Post", "OwnerStats", "fair_share"]

R = TypeVar("R")
_PRIORITIES: dict[str, int] = {"control": 0, "normal": 1, "low": 2}
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OwnerStats:
    """What one session holds in the backend (for ``/metrics`` and leak logs)."""

    session: str
    sequences: int
    tokens: int


def fair_share(capacity_tokens: int | None, sessions: int) -> int | None:
    """Each conversation's KV budget: an equal part of two thirds of the cache. The
    other third is headroom for what comes and goes (speculative drafts, a context
    window recomputed in the background, pages copied on write), so that live replies
    within their share never run out of pages."""
    if capacity_tokens is None or sessions < 1:
        return None
    return capacity_tokens * 2 // (3 * sessions)


class EngineHost:
    """Owns the backend on one thread; see the module docstring."""

    def __init__(self, backend: LLMBackend, *, name: str = "engine",
                 stats_interval_s: float = 0.25, gate: StepGate | None = None) -> None:
        """``gate``: steps wait while it is held (see :mod:`assistant.llm.step_gate`)."""
        self.backend = backend
        self.name = name
        self.gate = gate
        self._stats_interval_s = stats_interval_s
        self._cond = threading.Condition()
        self._queues: tuple[deque[Command], ...] = (deque(), deque(), deque())
        self._sessions: list[HostSession[Any]] = []
        self._check_idle = False
        self._closed = False
        self._dead: BaseException | None = None
        self._stats: BackendStats | None = None
        self._owners: tuple[OwnerStats, ...] = ()
        self._stats_at = 0.0
        self._next_session = 1
        self._thread = threading.Thread(target=self._run, name=f"assistant-{name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ any thread

    def open(self, build: Callable[[LLMBackend], H], post: Post, *,
             name: str = "") -> HostSession[H]:
        """A new session whose state ``build(backend)`` makes on the host thread. If the
        build raises, the session gets an :class:`EngineFailed` and stays empty."""
        with self._cond:
            label = name or f"session-{self._next_session}"
            self._next_session += 1
        session: HostSession[H] = HostSession(self, post, label)

        def run() -> None:
            state = build(self.backend)
            with self._cond:
                session.state = state
            self._rebalance()

        with self._cond:
            self._sessions.append(session)
        if not self.submit_command(Command(session, run), "normal"):
            session.closed = True
        return session

    def call(self, fn: Callable[[LLMBackend], R]) -> concurrent.futures.Future[R]:
        """Run ``fn(backend)`` on the host thread (invariant checks, exact stats)."""
        fut: concurrent.futures.Future[R] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn(self.backend))
            except BaseException as exc:
                fut.set_exception(exc)

        def dropped() -> None:
            if not fut.done():
                fut.set_exception(HostClosed(f"{self.name} host is closed"))

        if not self.submit_command(Command(None, run, dropped), "control"):
            dropped()
        return fut

    def stats(self) -> BackendStats | None:
        """The latest counters, refreshed by the host thread every few hundred ms; never
        waits on the engine (None before the first refresh)."""
        return self._stats

    def owners(self) -> tuple[OwnerStats, ...]:
        """What each session held at the latest refresh (same cadence as :meth:`stats`)."""
        return self._owners

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread after the command or step in progress; every session's state
        is released on the way out. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._nudge_gate()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                _log.warning("%s host did not stop within %.0f s", self.name, timeout_s)

    @property
    def sessions(self) -> int:
        with self._cond:
            return len(self._sessions)

    # ------------------------------------------------------------------ for HostSession

    def submit_command(self, command: Command, priority: str) -> bool:
        with self._cond:
            if self._closed or (command.session is not None and command.session.closed):
                return False
            self._queues[_PRIORITIES[priority]].append(command)
            if command.session is not None:
                command.session.queued += 1
            self._cond.notify()
        self._nudge_gate()
        return True

    def _nudge_gate(self) -> None:
        """A command (or the close) ends a wait at the gate: only steps are gated."""
        if self.gate is not None:
            self.gate.nudge()

    def _wakes(self) -> bool:
        """Whether a wait at the gate should end now (read on the gate's lock, not the
        host's: a deque's truth and a bool are read whole)."""
        return self._closed or any(self._queues)

    def idle_future(self, session: HostSession[Any]) -> concurrent.futures.Future[None]:
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._dead is not None:
                fut.set_exception(HostClosed(f"{self.name} host died: {self._dead}"))
            elif session.closed or self._closed:
                fut.set_result(None)
            else:
                session.idle_waiters.append(fut)
                self._check_idle = True
                self._cond.notify()
        return fut

    def close_session(self, session: HostSession[Any]) -> concurrent.futures.Future[None]:
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            try:
                self._release(session)
            finally:
                fut.set_result(None)

        with self._cond:
            if session.closed:
                fut.set_result(None)
                return fut
            session.closed = True
            dropped: list[Command] = []
            for q in self._queues:  # its queued commands will never run
                dropped += [c for c in q if c.session is session]
                kept = [c for c in q if c.session is not session]
                q.clear()
                q.extend(kept)
            session.queued = 0
            for c in dropped:
                if c.on_drop is not None:
                    c.on_drop()
            if self._closed:
                fut.set_result(None)  # the host releases every state on its way out
                return fut
            self._queues[0].append(Command(None, run))
            self._cond.notify()
        return fut

    # ------------------------------------------------------------------ host thread

    def _run(self) -> None:
        work = False
        gated_since: float | None = None
        """When the step now waiting at the gate began to wait (commands run meanwhile)."""
        try:
            while True:
                with self._cond:
                    while not (self._closed or any(self._queues) or work or self._check_idle):
                        self._cond.wait()
                    if self._closed:
                        break
                    self._check_idle = False
                    command = self._pop()
                if command is not None:
                    self._run_command(command)
                elif work:
                    if self.gate is not None:
                        if gated_since is None:
                            gated_since = time.monotonic()
                        self.gate.wait(self._wakes, since=gated_since)
                        if self._wakes() and self.gate.held and (
                                time.monotonic() - gated_since < self.gate.max_hold_s):
                            continue  # the command first; the step waits on after it
                        gated_since = None
                    self._step()
                work = self.backend.has_work()
                self._settle_idle()
                self._refresh_stats(force=not work)  # an idle host's snapshot is exact
        except BaseException as exc:  # a bug in the host itself: nobody may wait forever
            _log.exception("%s host died", self.name)
            self._dead = exc
            for session, _state in self._built():
                session.post(EngineFailed(session.name, exc))
            raise
        finally:
            self._shutdown()

    def _pop(self) -> Command | None:
        for q in self._queues:
            if q:
                command = q.popleft()
                if command.session is not None:
                    command.session.queued -= 1
                return command
        return None

    def _run_command(self, command: Command) -> None:
        session = command.session
        try:
            try:
                command.run()
            except Exception as exc:
                # Out of KV memory: speculative work yields first, then one retry.
                if (not self.backend.is_out_of_pages(exc)
                        or not shed_all(self.name, self._built(), exc)):
                    raise
                command.run()
        except Exception as exc:  # reported to its owner, never kills the thread
            if session is None:
                _log.exception("%s host command failed", self.name)
                return
            _log.exception("%s: engine command failed", session.name)
            session.post(EngineFailed(session.name, exc))

    def _step(self) -> None:
        built = self._built()
        try:
            self.backend.step()
        except Exception as exc:
            step_failed(self.name, built, exc)
        for session, state in built:
            guard(session, state, functools.partial(self._deliver, session, state))

    @staticmethod
    def _deliver(session: HostSession[Any], state: Hosted) -> None:
        for out in state.collect():
            session.post(out)

    def _built(self) -> Built:
        with self._cond:
            return [(s, s.state) for s in self._sessions if s.state is not None]

    def _settle_idle(self) -> None:
        with self._cond:
            waiting = [s for s in self._sessions if s.idle_waiters and s.queued == 0]
        for session in waiting:
            state = session.state
            if state is not None and state.has_work():
                continue
            with self._cond:
                if session.queued:
                    continue
                waiters, session.idle_waiters = session.idle_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def _release(self, session: HostSession[Any]) -> None:
        with self._cond:
            if session in self._sessions:
                self._sessions.remove(session)
            waiters, session.idle_waiters = session.idle_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        state, session.state = session.state, None
        if state is not None:
            state.close()
            self._rebalance()
            self._check_owned()

    def _rebalance(self) -> None:
        """Give every conversation its fair share of the cache (sessions came or went)."""
        built = self._built()
        share = fair_share(self.backend.capacity_tokens, len(built))
        for session, state in built:
            guard(session, state, functools.partial(state.set_token_budget, share))

    def _snapshot_owners(self) -> tuple[OwnerStats, ...]:
        return tuple(OwnerStats(session.name, state.sequences_held(), state.tokens_held())
                     for session, state in self._built())

    def _check_owned(self) -> None:
        """After a release: every backend sequence belongs to a session, or it leaked."""
        try:
            live = self.backend.stats().sequences
        except Exception:
            return
        owned = sum(o.sequences for o in self._snapshot_owners())
        if live > owned:
            _log.warning("%s: %d engine sequences belong to no session (leaked?)",
                         self.name, live - owned)

    def _refresh_stats(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or self._stats is None or now - self._stats_at >= self._stats_interval_s:
            try:
                self._stats = self.backend.stats()
                self._owners = self._snapshot_owners()
            except Exception:
                _log.exception("%s: stats failed", self.name)
            self._stats_at = now

    def _shutdown(self) -> None:
        with self._cond:
            sessions, self._sessions = list(self._sessions), []
            dropped = [c for q in self._queues for c in q]
            for q in self._queues:
                q.clear()
        for c in dropped:
            if c.on_drop is not None:
                c.on_drop()
        for session in sessions:
            try:
                self._release(session)
            except Exception:
                _log.exception("%s: releasing %s failed", self.name, session.name)
        self._stats = self.backend.stats() if self._dead is None else self._stats
