"""SourceThread: a blocking source on its own thread, closed and joined by its owner."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from assistant.loop.source_thread import SourceThread


class BlockingMic:
    """Yields frames until closed, like ``MicSource`` (a blocking queue in between)."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.yielded = 0

    def __iter__(self) -> Iterator[int]:
        while not self.closed.wait(0.002):
            self.yielded += 1
            yield self.yielded

    def close(self) -> None:
        self.closed.set()


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """Exceptions that escape any thread (``Exception in thread ...`` on stderr)."""
    seen: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook",
                        lambda args: seen.append(args.exc_value))
    return seen


def test_frames_arrive_in_order_and_the_thread_ends_with_them() -> None:
    async def read() -> tuple[list[int], SourceThread[int]]:
        async with SourceThread(iter(range(50))) as source:
            return [f async for f in source], source

    frames, source = asyncio.run(read())
    assert frames == list(range(50)) and not source.alive


def test_a_failing_source_raises_to_the_reader_after_its_frames() -> None:
    def frames() -> Iterator[int]:
        yield 1
        yield 2
        raise OSError("device gone")

    async def read(got: list[int]) -> None:
        async with SourceThread(frames()) as source:
            async for f in source:
                got.append(f)

    got: list[int] = []
    with pytest.raises(OSError, match="device gone"):
        asyncio.run(read(got))
    assert got == [1, 2]


def test_close_stops_the_source_and_joins_before_the_loop_closes(
        thread_errors: list[BaseException]) -> None:
    mic = BlockingMic()

    async def read_some() -> SourceThread[int]:
        source = SourceThread(mic, on_stop=mic.close)
        async for f in source:
            if f >= 5:
                break
        await source.aclose()
        assert not source.alive  # joined: nothing left to post to this loop
        return source

    source = asyncio.run(read_some())  # the loop is closed now
    assert mic.closed.is_set() and not source.alive
    assert thread_errors == []


def test_a_thread_that_outlives_its_reader_never_posts_to_a_closed_loop(
        thread_errors: list[BaseException]) -> None:
    """The old failure: the source ends after the loop closed and posts its end marker
    ("RuntimeError: Event loop is closed" in thread assistant-source)."""
    release = threading.Event()

    def slow() -> Iterator[int]:
        yield 1
        release.wait(5)  # still busy when the owner closes (it cannot unblock this one)

    async def read() -> SourceThread[int]:
        source = SourceThread(slow(), name="slow-source", join_timeout_s=0.05)
        assert await source.__anext__() == 1
        await source.aclose()
        return source

    source = asyncio.run(read())
    assert source.alive  # still in the source: the join timed out (and said so)
    release.set()
    for thread in threading.enumerate():
        if thread.name == "slow-source":
            thread.join(5)
    assert not source.alive and thread_errors == []


def test_close_is_idempotent_and_a_closed_source_yields_nothing() -> None:
    stops: list[int] = []

    async def scenario() -> list[int]:
        source = SourceThread(iter(range(3)), on_stop=lambda: stops.append(1))
        await source.aclose()
        await source.aclose()
        return [f async for f in source]

    assert asyncio.run(scenario()) == [] and stops == [1]
