"""SIGTERM ends a command the way Ctrl-C does: an exception that unwinds ``finally``.

Python's default for SIGTERM is to die at once, skipping every ``finally`` (streams,
threads and the engine left as they were). During a command :func:`sigterm_raises`
turns it into :class:`Terminated`, a ``KeyboardInterrupt``, so every path that already
ends cleanly on Ctrl-C ends cleanly on SIGTERM too. Commands with an event loop
(``talk``, ``serve``) handle both signals on the loop instead, as a request to stop.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["Terminated", "sigterm_raises"]


class Terminated(KeyboardInterrupt):
    """SIGTERM was received (raised in the main thread)."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While open, SIGTERM raises :class:`Terminated` in the main thread (elsewhere this
    does nothing: only the main thread may set signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
