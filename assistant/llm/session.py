"""One conversation's handle on the engine thread, and what the host posts to it.

:class:`HostSession` is what a caller holds (see :mod:`assistant.llm.host`): it submits
commands and queries for its state (a dialogue), waits for idleness and closes; the
host runs them on its thread. :class:`Hosted` is what the state must offer the host.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from assistant.llm.protocol import LLMJob

__all__ = ["Hosted", "HostSession", "EngineFailed", "HostClosed", "Command", "CommandSink",
           "Priority", "Post"]

Priority = Literal["control", "normal", "low"]
Post = Callable[[Any], None]


class Hosted(Protocol):
    """What a session keeps on the host thread (a dialogue)."""

    def has_work(self) -> bool:
        """Generation in flight, or outputs not collected yet."""
        ...

    def collect(self) -> list[Any]:
        """Outputs since the last call (called after every backend step)."""
        ...

    def owns(self, job: LLMJob) -> bool: ...

    def job_failed(self, job: LLMJob) -> bool:
        """One of its jobs failed: True if the state dealt with it (background work),
        False if the conversation must be told."""
        ...

    def abort(self) -> None:
        """Stop all generation (after a failed step)."""
        ...

    def shed(self) -> bool:
        """Release speculative work to free KV memory; True if anything was released."""
        ...

    def tokens_held(self) -> int:
        """Tokens of this conversation's live sequence (its share of the cache)."""
        ...

    def sequences_held(self) -> int:
        """Backend sequences it holds (live, speculative, background)."""
        ...

    def set_token_budget(self, tokens: int | None) -> None:
        """Its fair share of the KV cache in tokens (None: unlimited)."""
        ...

    def close(self) -> None:
        """Release everything (idempotent)."""
        ...


H = TypeVar("H", bound=Hosted)
R = TypeVar("R")


@dataclass(frozen=True)
class EngineFailed:
    """Posted to a session whose command or generation failed on the engine thread."""

    session: str
    error: BaseException


class HostClosed(RuntimeError):
    """The engine host was shut down."""


@dataclass
class Command:
    session: HostSession[Any] | None
    run: Callable[[], None]
    on_drop: Callable[[], None] | None = None
    """Called instead of ``run`` when the command is dropped (its session closed)."""


class HostSession(Generic[H]):
    """One conversation's handle on the host (see the module docstring).

    ``post`` receives, on the host thread, every non-None command result, every output
    the state collects, and :class:`EngineFailed` reports; bind it to
    ``loop.call_soon_threadsafe`` to get them on an event loop.
    """

    def __init__(self, host: CommandSink, post: Post, name: str) -> None:
        self.name = name
        self.post = post
        self._host = host
        self.state: H | None = None
        """Touched on the host thread only."""
        self.queued = 0
        self.closed = False
        self.idle_waiters: list[concurrent.futures.Future[None]] = []

    def submit(self, fn: Callable[[H], Any], *, priority: Priority = "normal") -> None:
        """Run ``fn(state)`` on the host thread; a non-None result is posted. Ignored
        once the session is closed, and before the state is built it waits in line."""
        def run() -> None:
            if self.state is not None:
                result = fn(self.state)
                if result is not None:
                    self.post(result)
        self._host.submit_command(Command(self, run), priority)

    def query(self, fn: Callable[[H], R], *,
              priority: Priority = "normal") -> concurrent.futures.Future[R]:
        """Run ``fn(state)`` on the host thread and get its result (or exception). Fails
        with :class:`HostClosed` if the session closes first or has no state."""
        fut: concurrent.futures.Future[R] = concurrent.futures.Future()

        def run() -> None:
            if self.state is None:
                fut.set_exception(HostClosed(f"{self.name} has no conversation"))
                return
            try:
                fut.set_result(fn(self.state))
            except Exception as exc:
                fut.set_exception(exc)

        def dropped() -> None:
            if not fut.done():
                fut.set_exception(HostClosed(f"{self.name} was closed"))

        if not self._host.submit_command(Command(self, run, dropped), priority):
            dropped()
        return fut

    def idle(self) -> concurrent.futures.Future[None]:
        """Completes when nothing of this session is queued or generating."""
        return self._host.idle_future(self)

    def close(self) -> concurrent.futures.Future[None]:
        """Drop queued commands and release the state on the host thread (whenever it
        was built: a session closed during its own build releases what the build made).
        Idempotent; the future completes once released."""
        return self._host.close_session(self)


class CommandSink(Protocol):
    """The host side a session talks to (implemented by `EngineHost`)."""

    def submit_command(self, command: Command, priority: str) -> bool:
        """Queue ``command``; False if the host or the session is closed."""
        ...

    def idle_future(self, session: HostSession[Any]) -> concurrent.futures.Future[None]: ...

    def close_session(self, session: HostSession[Any]) -> concurrent.futures.Future[None]: ...
