"""The socket as microphone and speaker: frames on the session clock, silence fill,
held audio for manual turns, and the sink that sends what it plays."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np
import pytest

from assistant.serve.backend.network_io import NetworkSink, NetworkSource, RecordingSynthesizer
from assistant.serve.transport.limits import ClientStalled, Outbox
from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.word_timing import TTSChunk, WordTiming
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
        await asyncio.sleep(0.2)
        expected = int((wall.t - 100.0) * 16000) - 200 * 16
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


def _chunk(turn: int, text: str, start_char: int, samples: int) -> TTSChunk:
    return TTSChunk(
        turn_id=turn, pcm=(np.ones(samples) * 1000).astype(np.int16), sample_rate=22050,
        text=text, char_start=start_char, char_end=start_char + len(text),
        words=(WordTiming(word=text.strip(".,"), char_start=start_char,
                          char_end=start_char + len(text.strip(".,")), start_sample=0,
                          end_sample=samples),),
        start_sample=0,
    )


class FakeVoice:
    sample_rate = 22050

    def __init__(self) -> None:
        self.next: list[TTSChunk] = []

    def synthesize_span(self, text: str, **kwargs: Any) -> TTSChunk | None:
        return self.next.pop(0)


def test_sink_sends_each_chunk_with_its_words_and_models_playback_on_the_clock() -> None:
    clock = VirtualClock(16000)
    voice = FakeVoice()
    recorder = RecordingSynthesizer(voice)
    sent: list[tuple[int, str, bytes]] = []
    sink = NetworkSink(clock, 22050, recorder=recorder, current_turn=lambda: 7,
                       emit=lambda t, text, pcm: sent.append((t, text, pcm)), delta_ms=200)
    voice.next = [_chunk(7, "Hello,", 0, 2205), _chunk(7, "world.", 7, 4410)]
    for _ in range(2):
        tts = recorder.synthesize_span("x")
        assert tts is not None
        sink.write(AudioChunk(tts.pcm.astype(np.float32) / 32768, 22050, 0))
    assert [(t, text) for t, text, _ in sent] == [(7, "Hello,"), (7, " world.")]
    assert [len(p) // 2 for _, _, p in sent] == [2400, 4800]  # 100 ms and 200 ms at 24 kHz
    assert [c.text for c in recorder.chunks(7)] == ["Hello,", "world."]
    assert sink.played_samples == 0
    clock.advance(1600)  # 100 ms of session time
    assert sink.played_samples == 2205
    assert sink.stop() == 2205


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


def test_sink_sends_a_long_chunk_in_pieces_of_delta_ms_with_its_text_first() -> None:
    clock = VirtualClock(16000)
    voice = FakeVoice()
    recorder = RecordingSynthesizer(voice)
    sent: list[tuple[int, str, bytes]] = []
    sink = NetworkSink(clock, 22050, recorder=recorder, current_turn=lambda: 3,
                       emit=lambda t, text, pcm: sent.append((t, text, pcm)), delta_ms=160)
    clause = _chunk(3, "A long clause.", 0, 22050 * 22 // 10)  # 2.2 s
    voice.next = [clause]
    tts = recorder.synthesize_span("x")
    assert tts is not None
    sink.write(AudioChunk(tts.pcm.astype(np.float32) / 32768, 22050, 0))
    sizes = [len(p) // 2 for _, _, p in sent]
    assert sizes == [3840] * 13 + [52800 - 13 * 3840]  # 160 ms pieces of 2.2 s at 24 kHz
    assert [text for _, text, _ in sent] == ["A long clause."] + [""] * 13
    # The pieces are the chunk's audio, cut: the same bytes as one delta would carry.
    one: list[bytes] = []
    whole_sink = NetworkSink(VirtualClock(16000), 22050, recorder=recorder,
                             current_turn=lambda: 3, emit=lambda t, x, pcm: one.append(pcm),
                             delta_ms=5000)
    whole_sink.write(AudioChunk(tts.pcm.astype(np.float32) / 32768, 22050, 0))
    assert len(one) == 1 and b"".join(p for _, _, p in sent) == one[0]
    assert sink.end_position == clause.num_samples  # playback is modelled on the whole chunk
    with pytest.raises(ValueError):
        NetworkSink(clock, 22050, recorder=recorder, current_turn=lambda: 3,
                    emit=lambda *a: None, delta_ms=0)


def test_text_only_turns_are_not_synthesised_and_count_as_heard_at_once() -> None:
    from audio.word_timing import heard_position

    voice = FakeVoice()  # raises (pops an empty list) if it is asked to speak
    recorder = RecordingSynthesizer(voice)
    recorder.set_text_only(5, True)
    first = recorder.synthesize_span("Paris is nice,", turn_id=5, char_start=0, token_end=4)
    second = recorder.synthesize_span("and old.", turn_id=5, char_start=15, word_index=3,
                                      token_start=4, token_end=7)
    assert recorder.synthesize_span(" ... ", turn_id=5) is None  # nothing speakable
    assert first is not None and second is not None
    assert (first.num_samples, second.num_samples) == (0, 0)
    assert [w.word for w in first.words + second.words] == ["Paris", "is", "nice", "and", "old"]
    assert (second.char_start, second.char_end, second.word_index) == (15, 23, 3)
    heard = heard_position(recorder.chunks(5), 0)
    assert (heard.word_count, heard.text, heard.token_end) == (5, "Paris is nice, and old.", 7)
    # The sink sends the text with no audio and nothing is left to play.
    clock = VirtualClock(16000)
    sent: list[tuple[int, str, bytes]] = []
    sink = NetworkSink(clock, 22050, recorder=recorder, current_turn=lambda: 5,
                       emit=lambda t, text, pcm: sent.append((t, text, pcm)))
    for chunk in recorder.chunks(5):
        sink.write(AudioChunk(chunk.pcm.astype(np.float32), 22050, 0))
    assert sent == [(5, "Paris is nice,", b""), (5, " and old.", b"")]
    assert sink.end_position == sink.played_samples == 0
    # Unmarked (and forgotten) turns are spoken by the voice again.
    recorder.set_text_only(5, False)
    voice.next = [_chunk(5, "Hi.", 0, 100)]
    spoken = recorder.synthesize_span("Hi.", turn_id=5)
    assert spoken is not None and spoken.num_samples == 100
