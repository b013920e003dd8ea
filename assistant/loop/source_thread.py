"""A blocking frame source (a microphone, a clock-paced WAV) read by the event loop.

The source is iterated on its own thread and its frames handed to the loop. The thread
has one owner, who closes it: :meth:`SourceThread.aclose` asks it to stop, calls
``on_stop`` (what unblocks the source, e.g. ``MicSource.close``), and joins it before
returning. Once ``aclose`` has begun the thread never touches the loop again, so a loop
that closes right after cannot be posted to ("RuntimeError: Event loop is closed"), and
nothing the thread holds outlives the command.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["SourceThread"]

_log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class _End:
    error: BaseException | None = None
    """What ended the source, when it failed."""


class SourceThread(Generic[T]):
    """Iterate ``frames`` on a thread named ``name``; ``async for`` reads them.

    The thread starts on the first read. A failure of the source is raised to the
    reader after the frames that came before it. Use ``async with`` or call
    :meth:`aclose` (idempotent) from the loop that reads it."""

    def __init__(self, frames: Iterable[T], *, on_stop: Callable[[], None] | None = None,
                 name: str = "assistant-source", join_timeout_s: float = 10.0) -> None:
        self._frames = frames
        self._on_stop = on_stop
        self._name = name
        self._join_timeout_s = join_timeout_s
        self._queue: asyncio.Queue[T | _End] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._post_lock = threading.Lock()
        self._stopping = False  # under _post_lock: once set, the thread never posts
        self._closed = False

    @property
    def alive(self) -> bool:
        """Whether the thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def __aiter__(self) -> SourceThread[T]:
        return self

    async def __anext__(self) -> T:
        if self._thread is None:
            if self._closed:
                raise StopAsyncIteration
            self._start()
        item = await self._queue.get()
        if isinstance(item, _End):
            self._queue.put_nowait(item)  # every later read ends too
            if item.error is not None:
                raise item.error
            raise StopAsyncIteration
        return item

    def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._pump, name=self._name, daemon=True)
        self._thread.start()

    def _post(self, item: T | _End) -> bool:
        """Hand ``item`` to the loop; False once the owner is closing (stop pumping)."""
        assert self._loop is not None
        with self._post_lock:
            if self._stopping:
                return False
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
            return True

    def _pump(self) -> None:
        end = _End()
        try:
            for frame in self._frames:
                if not self._post(frame):
                    return
        except BaseException as exc:  # handed to the reader, who owns the failure
            end = _End(exc)
        self._post(end)

    async def aclose(self) -> None:
        """Stop the source and join its thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        with self._post_lock:
            self._stopping = True
        if self._on_stop is not None:
            self._on_stop()
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, self._join_timeout_s)
            if thread.is_alive():
                _log.error("the %s thread did not stop within %.0f s", self._name,
                           self._join_timeout_s)

    async def __aenter__(self) -> SourceThread[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
