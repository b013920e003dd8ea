"""The socket as microphone and speaker: frames on the session clock, silence fill,
held audio for manual turns, and the recording voice (the sink: test_network_sink)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np
import pytest

from assistant.serve.backend.network_io import NetworkSource
from assistant.serve.transport.limits import ClientStalled, Outbox
from audio.clock import VirtualClock
from tests.serve.support import run


class Wall:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def _collect(source: NetworkSource, until_samples: int, timeout: float = 3.0) -> list[Any]:
    frames: list[Any] = []

    async def take() -> None:
        async for frame in source.frames():
            frames.append(frame)
            if frames[-1].end_sample >= until_samples:
                return

    await asyncio.wait_for(take(), timeout)
    return frames


def test_client_audio_becomes_contiguous_frames_on_the_session_clock() -> None:
    async def main() -> None:
        clock = VirtualClock(16000)
        wall = Wall()
        source = NetworkSource(clock, wall=wall)
        pcm = (np.sin(np.arange(24000) / 10) * 10000).astype(np.int16)  # 1 s at 24 kHz
        for i in range(0, 24000, 2400):
            await source.put(pcm[i : i + 2400])
        frames = await _collect(source, 15000)
        starts = [f.start_sample for f in frames]
        assert starts == [320 * k for k in range(len(frames))]
        assert all(f.sample_rate == 16000 and f.num_samples == 320 for f in frames)
        assert clock.now_samples() == frames[-1].end_sample
        assert source.received_samples == 24000
        assert max(float(np.max(np.abs(f.pcm))) for f in frames) > 0.1

    run(main())


def test_a_quiet_client_gets_silence_up_to_real_time_but_a_streaming_one_does_not() -> None:
    async def main() -> None:
        clock = VirtualClock(16000)
        wall = Wall()
        source = NetworkSource(clock, wall=wall, jitter_ms=200, idle_ms=500)
        frames_task = asyncio.create_task(_collect(source, 10**9, timeout=10))
        await asyncio.sleep(0.05)
        # a client that keeps streaming, even 2 s late: no silence is spliced in
        for _ in range(5):
            wall.t += 0.3
            await source.put(np.zeros(240, np.int16))
            await asyncio.sleep(0.05)
        assert clock.now_samples() <= 5 * 160
        # a client that went quiet for longer than the idle time: time catches up
        wall.t += 3.0
        expected = int((wall.t - 100.0) * 16000) - 200 * 16
        # The silence comes within a poll; a loaded host may take a while to run it.
        for _ in range(250):
            await asyncio.sleep(0.02)
            if clock.now_samples() >= expected - 320:
                break
        await asyncio.sleep(0.1)  # and no more than that follows
        assert expected - 320 <= clock.now_samples() <= expected + 320
        source.close()
        frames = await frames_task
        assert all(float(np.max(np.abs(f.pcm))) == 0.0 for f in frames)

    run(main())


def test_held_audio_is_kept_for_commit_and_the_pipeline_hears_silence() -> None:
    async def main() -> None:
        clock = VirtualClock(16000)
        source = NetworkSource(clock, wall=Wall())
        source.hold = True
        tone = (np.sin(np.arange(4800) / 5) * 12000).astype(np.int16)  # 200 ms
        await source.put(tone)
        frames = await _collect(source, 2880)
        assert all(float(np.max(np.abs(f.pcm))) == 0.0 for f in frames)
        held = source.take_held()
        assert held.size == sum(f.num_samples for f in frames)
        assert float(np.max(np.abs(held))) > 0.2
        assert source.take_held().size == 0

    run(main())


def test_put_waits_while_the_queue_is_full() -> None:
    async def main() -> None:
        source = NetworkSource(VirtualClock(16000), wall=Wall(), queue_size=2)
        await source.put(np.zeros(2400, np.int16))
        await source.put(np.zeros(2400, np.int16))
        blocked = asyncio.create_task(source.put(np.zeros(2400, np.int16)))
        await asyncio.sleep(0.05)
        assert not blocked.done()
        frames: Any = source.frames()
        await asyncio.wait_for(frames.__anext__(), 1)  # the consumer took a chunk: room again
        await asyncio.wait_for(blocked, 1)
        assert source.received_samples == 7200
        await frames.aclose()

    run(main())


def test_cancelling_the_reader_loses_no_chunk_and_is_not_swallowed() -> None:
    """A reader cancelled just as a chunk arrives really stops, and the chunk goes to the
    next reader (a session rebuild restarts its frame loop this way)."""

    async def main() -> None:
        source = NetworkSource(VirtualClock(16000), wall=Wall(), idle_ms=10**6)
        first: Any = source.frames()
        reader = asyncio.create_task(first.__anext__())
        await asyncio.sleep(0.01)  # the reader waits on the empty queue
        await source.put((np.ones(4800) * 1000).astype(np.int16))
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        assert reader.cancelled()
        second: Any = source.frames()
        frame = await asyncio.wait_for(second.__anext__(), 1)
        assert frame.start_sample == 0 and float(np.max(frame.pcm)) > 0

    run(main())


def test_outbox_put_times_out_on_a_stuck_reader_without_swallowing_cancels() -> None:
    async def main() -> None:
        box = Outbox(maxsize=1, stall_timeout_s=0.05)
        await box.put("a")
        with pytest.raises(ClientStalled):
            await box.put("b")
        putter = asyncio.create_task(box.put("c"))
        await asyncio.sleep(0.01)
        assert await box.get() == "a"  # room: the put completes ...
        putter.cancel()  # ... just as its caller is cancelled
        with contextlib.suppress(asyncio.CancelledError):
            await putter
        assert putter.cancelled()

    run(main())
