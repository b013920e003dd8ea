"""The speaker sink's DAC-time accounting, timeline stamps and device errors, driven
through a fake PortAudio stream."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.errors import AudioError, DeviceError
from audio.speaker_sink import SpeakerSink
from tests.audio.fake_streams import FakeOutputStream
from tests.audio.test_sinks import CLOCK_RATE, tone


def make_speaker(rate: int = 16000, **kw: Any) -> tuple[SpeakerSink, FakeOutputStream, list[AudioChunk]]:
    streams: list[FakeOutputStream] = []
    tapped: list[AudioChunk] = []

    def factory(**kwargs: Any) -> FakeOutputStream:
        s = FakeOutputStream(**kwargs, **kw)
        streams.append(s)
        return s

    sink = SpeakerSink(VirtualClock(CLOCK_RATE), rate, buffer_ms=20, tap=tapped.append, stream_factory=factory)
    return sink, streams[-1], tapped


def test_speaker_counts_heard_samples_from_dac_time_not_bytes_handed_over() -> None:
    sink, stream, _ = make_speaker()
    audio = tone(1000, 16000)
    sink.write(AudioChunk(audio, 16000))
    out1 = stream.pull(320, current=1.000, dac=1.050)
    out2 = stream.pull(320, current=1.020, dac=1.070)
    np.testing.assert_array_equal(out1, audio[:320])
    np.testing.assert_array_equal(out2, audio[320:640])
    stream.time = 1.049
    assert sink.played_samples == 0  # handed over, not yet at the DAC
    stream.time = 1.050 + 100 / 16000
    assert sink.played_samples == 100
    stream.time = 1.070 + 50 / 16000
    assert sink.played_samples == 370
    assert sink.end_position == 1000


def test_speaker_stop_takes_effect_at_the_next_buffer() -> None:
    sink, stream, tapped = make_speaker()
    audio = tone(2000, 16000)
    sink.write(AudioChunk(audio, 16000))
    stream.pull(320, current=0.0, dac=0.04)
    position = sink.stop()
    assert position == 320  # everything handed to PortAudio will still be heard
    after = stream.pull(320, current=0.02, dac=0.06)
    np.testing.assert_array_equal(after, np.zeros(320, np.float32))
    stream.time = 1.0
    assert sink.played_samples == 320
    np.testing.assert_array_equal(np.concatenate([c.pcm for c in tapped]), audio[:320])


def test_speaker_taps_on_the_streams_own_timeline_whatever_the_reports_say() -> None:
    # Each callback reads the clock late (waiting for the GIL) and the host's reported
    # latency wobbles; a reply plays, the stream plays silence for 0.4 s, the next
    # reply plays. The tap's stamps follow the stream's frame count from one anchor,
    # so the second reply lands exactly where the silent buffers put it.
    clock = VirtualClock(CLOCK_RATE)
    tapped: list[AudioChunk] = []
    streams: list[FakeOutputStream] = []

    def factory(**kwargs: Any) -> FakeOutputStream:
        streams.append(FakeOutputStream(**kwargs))
        return streams[-1]

    sink = SpeakerSink(clock, 16000, buffer_ms=20, tap=tapped.append, stream_factory=factory)
    stream = streams[-1]
    rng = np.random.default_rng(1)
    underflowed = SimpleNamespace(output_underflow=True)

    def callback(k: int, status: Any = None) -> None:
        cur = 1.0 + 0.02 * k
        late = rng.uniform(0, 0.002) + (0.012 if k % 17 == 5 else 0.0)
        clock.advance(int(round((cur + late) * CLOCK_RATE)) - clock.now_samples())
        stream.pull(320, current=cur, dac=cur + 0.05 + (0.008 if (k // 20) % 2 else 0.0),
                    status=status)

    for k in range(60):  # idle since the stream opened: the timeline settles
        callback(k)
    first, second = tone(1600, 16000), tone(1600, 16000, seed=1)
    sink.write(AudioChunk(first, 16000))
    for k in range(60, 85):
        callback(k)
    sink.write(AudioChunk(second, 16000))
    for k in range(85, 95):
        callback(k)
    starts = [c.start_sample for c in tapped]
    assert len(tapped) == 10
    assert starts[:5] == [starts[0] + 320 * i for i in range(5)]
    assert starts[5:] == [starts[0] + 320 * (25 + i) for i in range(5)]
    # Where the stream's frame 0 is heard: 1.05 s, give or take the wobble.
    assert abs(starts[0] - 60 * 320 - int(1.05 * CLOCK_RATE)) <= 0.01 * CLOCK_RATE
    # The device ran dry and played 0.1 s of its own silence (the next callback comes
    # five buffers' time later): later buffers play later, and the stamps follow.
    sink.write(AudioChunk(first, 16000))
    before = starts[0] - 60 * 320  # where frame 0 is heard
    callback(100, status=underflowed)
    for k in range(101, 150):
        callback(k)
    after = tapped[-1].start_sample - 99 * 320  # the fifth buffer since: frame 99
    assert sink.underflows == 1 and sink.timeline.reanchored == 1
    assert abs(after - before - int(0.1 * CLOCK_RATE)) <= 0.01 * CLOCK_RATE


def test_speaker_underrun_plays_silence_and_partial_buffers_are_exact() -> None:
    sink, stream, _ = make_speaker()
    sink.write(AudioChunk(tone(100, 16000), 16000))
    out = stream.pull(320, current=0.0, dac=0.01)
    assert np.all(out[100:] == 0.0)
    stream.time = 0.5
    assert sink.played_samples == 100
    assert sink.queued_samples == 0


def test_speaker_device_that_rejects_the_rate_is_a_device_error() -> None:
    streams: list[FakeOutputStream] = []

    def factory(**kwargs: Any) -> FakeOutputStream:
        s = FakeOutputStream(**kwargs, reject_rate=22050)
        streams.append(s)
        return s

    with pytest.raises(DeviceError):
        SpeakerSink(VirtualClock(), 22050, stream_factory=factory)
    assert streams == []  # nothing half-opened


def test_speaker_falls_back_to_another_device_rate_and_reports_at_the_sink_rate() -> None:
    def factory(**kwargs: Any) -> FakeOutputStream:
        return FakeOutputStream(**kwargs, reject_rate=22050)

    sink = SpeakerSink(VirtualClock(), 22050, stream_factory=factory, fallback_rate=44100)
    assert sink.device_rate == 44100
    stream: FakeOutputStream = sink._stream
    t = np.arange(22050) / 22050
    sink.write(AudioChunk((0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 22050))
    out = np.concatenate([stream.pull(882, current=i * 0.02, dac=i * 0.02) for i in range(40)])
    stream.time = 0.5
    assert abs(sink.played_samples - 11025) <= 2
    body = out[2000:30000]  # the tone, upsampled: still 440 Hz at 44.1 kHz
    spectrum = np.abs(np.fft.rfft(body))
    assert abs(np.argmax(spectrum) * 44100 / body.size - 440) < 5


def test_speaker_close_is_idempotent_and_releases_the_stream() -> None:
    sink, stream, _ = make_speaker()
    sink.close()
    sink.close()
    assert stream.closed
    with pytest.raises(AudioError):
        sink.write(AudioChunk(np.zeros(10, np.float32), 16000))


def test_a_failing_tap_never_aborts_playback_and_is_reported() -> None:
    streams: list[FakeOutputStream] = []

    def factory(**kwargs: Any) -> FakeOutputStream:
        streams.append(FakeOutputStream(**kwargs))
        return streams[-1]

    def tap(chunk: AudioChunk) -> None:
        raise RuntimeError("echo canceller broke")

    sink = SpeakerSink(VirtualClock(CLOCK_RATE), 16000, buffer_ms=20, tap=tap,
                       stream_factory=factory)
    stream = streams[-1]
    audio = tone(1000, 16000)
    sink.write(AudioChunk(audio, 16000))
    out1 = stream.pull(320, current=1.0, dac=1.05)  # the callback must not raise
    out2 = stream.pull(320, current=1.02, dac=1.07)
    np.testing.assert_array_equal(np.concatenate([out1, out2]), audio[:640])
    assert isinstance(sink.tap_error, RuntimeError) and sink.tap is None
    sink.close()
