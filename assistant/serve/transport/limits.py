"""Bounds that keep one client from hurting the others.

- `ServerLimits`: the numbers (sessions, message size, queue lengths, stall timeout).
- `Admission`: a counted set of session slots; a connection past ``max_sessions`` gets
  an error event and a close instead of a session.
- `Outbox`: the bounded queue between a session and its socket writer. A client that
  stops reading fills it; a producer that cannot enqueue within ``stall_timeout_s`` gets
  `ClientStalled` and the connection is closed, so a dead reader costs one session,
  never the engine or the other sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

__all__ = ["ServerLimits", "Admission", "Outbox", "ClientStalled", "wait_no_swallow"]


async def wait_no_swallow(aw: Awaitable[T], timeout: float) -> tuple[bool, T | None]:
    """Await ``aw`` for at most ``timeout`` seconds: ``(True, result)`` or ``(False, None)``.

    Unlike ``asyncio.wait_for`` on Python 3.10/3.11, a cancellation of the caller that
    races with ``aw`` finishing is never swallowed (the task really stops); and when the
    timeout races with ``aw`` finishing, the result is kept rather than lost.
    """
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        task.cancel()
        raise
    if done or not task.cancel():
        return True, task.result()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False, None


@dataclass(frozen=True, kw_only=True)
class ServerLimits:
    max_sessions: int = 8
    """Concurrent sessions; the next client gets an error event and a close."""
    max_message_bytes: int = 1_048_576
    """Largest client message handled; a larger one gets an error event (the session
    stays) up to ``hard_message_factor`` times this, beyond which the socket is closed
    with 1009 by the WebSocket layer without buffering it."""
    hard_message_factor: int = 4
    session_queue: int = 256
    """Bound of each per-session queue (outgoing events, incoming audio chunks)."""
    stall_timeout_s: float = 10.0
    """A client that reads nothing for this long while events wait is disconnected."""
    shutdown_grace_s: float = 5.0
    """On SIGTERM, in-flight responses get this long to finish before being cancelled."""
    close_timeout_s: float = 2.0
    """How long a closing handshake may take before the TCP connection is dropped."""

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_message_bytes", "session_queue", "hard_message_factor"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("stall_timeout_s", "shutdown_grace_s", "close_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")

    @property
    def hard_message_bytes(self) -> int:
        return self.max_message_bytes * self.hard_message_factor


class Admission:
    """Session slots. Not thread-safe: used from the event loop only."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._held = 0

    @property
    def held(self) -> int:
        return self._held

    def try_acquire(self) -> bool:
        if self._held >= self.capacity:
            return False
        self._held += 1
        return True

    def release(self) -> None:
        if self._held <= 0:
            raise RuntimeError("Admission.release() without a matching acquire")
        self._held -= 1


class ClientStalled(Exception):
    """The client has not read for ``stall_timeout_s`` while its outbox was full."""


class Outbox:
    """Bounded FIFO of encoded messages for one socket writer."""

    def __init__(self, maxsize: int, stall_timeout_s: float) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=maxsize)
        self._stall_timeout_s = stall_timeout_s
        self._closed = False

    def qsize(self) -> int:
        return self._queue.qsize()

    async def put(self, message: str) -> None:
        """Enqueue; waits while full, raises `ClientStalled` after the stall timeout."""
        if self._closed:
            raise ClientStalled("outbox is closed")
        if not self._queue.full():
            self._queue.put_nowait(message)
            return
        ok, _ = await wait_no_swallow(self._queue.put(message), self._stall_timeout_s)
        if not ok:
            raise ClientStalled(
                f"client read nothing for {self._stall_timeout_s:g} s "
                f"with {self._queue.qsize()} events waiting"
            )

    async def get(self) -> str | None:
        """Next message, or None once `close` was called and the queue drained."""
        return await self._queue.get()

    def close(self) -> None:
        """No more puts; the writer sees None after what is queued. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._queue.put_nowait(None)
        except asyncio.QueueFull:
            # Writer is stuck on a full queue: drop the backlog, the socket is closing.
            while not self._queue.empty():
                self._queue.get_nowait()
            self._queue.put_nowait(None)
