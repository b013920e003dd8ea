"""Sinks: exact playback positions on a virtual clock, WAV recording on the input's
timeline, and the speaker sink's DAC-time accounting driven through a fake stream."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.errors import AudioError, DeviceError
from audio.sinks import NullSink, SpeakerSink, WavSink
from audio.wav import read_wav

CLOCK_RATE = 16000


def tone(n: int, rate: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (0.5 * rng.uniform(-1, 1, n)).astype(np.float32)


class ReferenceModel:
    """Brute force: give every written sample its play time, count those before now."""

    def __init__(self, sink_rate: int) -> None:
        self.rate = sink_rate
        self.times: list[int] = []  # play time of each kept sample (sink-rate units)

    def now(self, clock_now: int) -> int:
        return clock_now * self.rate // CLOCK_RATE

    def write(self, n: int, clock_now: int) -> None:
        now = self.now(clock_now)
        start = max([now] + [t + 1 for t in self.times[-1:]])
        self.times.extend(range(start, start + n))

    def heard(self, clock_now: int) -> int:
        now = self.now(clock_now)
        return sum(1 for t in self.times if t < now)

    def stop(self, clock_now: int) -> int:
        heard = self.heard(clock_now)
        del self.times[heard:]
        return heard


ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 900)),
        st.tuples(st.just("advance"), st.integers(0, 700)),
        st.tuples(st.just("stop"), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops, sink_rate=st.sampled_from([16000, 22050, 8000]))
def test_null_sink_positions_match_brute_force_model(ops: list[tuple[str, int]], sink_rate: int) -> None:
    clock = VirtualClock(CLOCK_RATE)
    sink = NullSink(clock, sink_rate)
    model = ReferenceModel(sink_rate)
    for op, n in ops:
        if op == "write":
            sink.write(AudioChunk(np.zeros(n, np.float32), sink_rate))
            model.write(n, clock.now_samples())
        elif op == "advance":
            clock.advance(n)
        else:
            assert sink.stop() == model.stop(clock.now_samples())
        assert sink.played_samples == model.heard(clock.now_samples())
        assert sink.end_position == len(model.times)
        assert sink.played_samples + sink.queued_samples == sink.end_position


def test_stop_at_t_reports_exactly_the_samples_scheduled_before_t() -> None:
    clock = VirtualClock(CLOCK_RATE)
    sink = NullSink(clock, 22050)
    clock.advance(1000)
    sink.write(AudioChunk(tone(22050, 22050), 22050))  # 1 s, starts now
    for _ in range(25):  # 25 frames of 20 ms = 0.5 s
        clock.advance(320)
    expected = (1000 + 25 * 320) * 22050 // CLOCK_RATE - 1000 * 22050 // CLOCK_RATE
    assert sink.stop() == expected
    clock.advance(8000)
    assert sink.played_samples == expected  # nothing more is heard after stop
    assert sink.queued_samples == 0


def test_tap_receives_exactly_the_heard_audio_with_its_clock_time() -> None:
    clock = VirtualClock(CLOCK_RATE)
    heard: list[AudioChunk] = []
    sink = NullSink(clock, CLOCK_RATE, tap=heard.append)
    audio = tone(4000, CLOCK_RATE, seed=3)
    clock.advance(500)
    sink.write(AudioChunk(audio, CLOCK_RATE))
    for _ in range(7):
        clock.advance(320)
    position = sink.stop()
    assert position == 7 * 320
    got = np.concatenate([c.pcm for c in heard])
    np.testing.assert_array_equal(got, audio[:position])
    assert heard[0].start_sample == 500
    assert all(a.end_sample == b.start_sample for a, b in zip(heard, heard[1:], strict=False))


def test_write_after_stop_continues_from_the_heard_position() -> None:
    clock = VirtualClock(CLOCK_RATE)
    sink = NullSink(clock, CLOCK_RATE)
    sink.write(AudioChunk(tone(1000, CLOCK_RATE), CLOCK_RATE))
    clock.advance(300)
    assert sink.stop() == 300
    origin = sink.end_position
    sink.write(AudioChunk(tone(200, CLOCK_RATE), CLOCK_RATE))
    clock.advance(150)
    assert sink.played_samples - origin == 150
    assert origin == 300


def test_flush_on_a_virtual_clock_plays_everything() -> None:
    clock = VirtualClock(CLOCK_RATE)
    sink = NullSink(clock, 22050)
    sink.write(AudioChunk(tone(10000, 22050), 22050))
    sink.flush()
    assert sink.played_samples == 10000
    assert clock.now_samples() * 22050 // CLOCK_RATE >= 10000


def test_chunks_at_another_rate_or_stereo_are_converted() -> None:
    clock = VirtualClock(CLOCK_RATE)
    sink = NullSink(clock, 22050)
    stereo = np.stack([tone(1600, 16000), tone(1600, 16000, seed=1)], axis=1)
    sink.write(AudioChunk(stereo, 16000))
    assert sink.end_position == 2205  # 0.1 s at 22050 Hz


def test_closed_sink_refuses_writes() -> None:
    sink = NullSink(VirtualClock(CLOCK_RATE), CLOCK_RATE)
    sink.close()
    sink.close()  # idempotent
    with pytest.raises(AudioError):
        sink.write(AudioChunk(np.zeros(10, np.float32), CLOCK_RATE))


def test_wav_sink_records_what_was_heard_on_the_input_timeline(tmp_path: Path) -> None:
    rate = 16000
    clock = VirtualClock(rate)
    path = tmp_path / "out.wav"
    sink = WavSink(path, clock, rate)
    first = tone(3200, rate, seed=1)
    second = tone(4800, rate, seed=2)
    clock.advance(1600)  # 100 ms of silence before anything plays
    sink.write(AudioChunk(first, rate))
    clock.advance(4000)  # first plays fully, then 800 samples of silence
    sink.write(AudioChunk(second, rate))
    clock.advance(2000)
    cut = sink.stop()  # barge-in: second cut after 2000 samples
    clock.advance(1000)
    sink.close()
    pcm, file_rate = read_wav(path)
    assert file_rate == rate
    expected = np.zeros(1600 + 4000 + 2000 + 1000, np.float32)
    expected[1600 : 1600 + 3200] = first
    expected[5600 : 5600 + 2000] = second[:2000]
    assert cut == 3200 + 2000
    assert pcm.shape == expected.shape
    np.testing.assert_allclose(pcm, expected, atol=1.0 / 32768 + 1e-7)


def test_wav_sink_unwritable_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AudioError, match="cannot write WAV"):
        WavSink(tmp_path / "missing_dir" / "x.wav", VirtualClock(), 16000)


# --------------------------------------------------------------------- speaker sink


class FakeOutputStream:
    """Stands in for sounddevice.OutputStream; the test calls the callback itself."""

    def __init__(self, *, device: Any, samplerate: float, channels: int, blocksize: int, callback: Any,
                 reject_rate: float | None = None) -> None:
        if reject_rate is not None and samplerate == reject_rate:
            raise DeviceError(f"invalid sample rate {samplerate}")
        self.samplerate = samplerate
        self.blocksize = blocksize
        self.callback = callback
        self.time = 0.0
        self.latency = 0.03
        self.started = False
        self.closed = False

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.started = False

    def close(self) -> None:
        self.closed = True

    def pull(self, frames: int, current: float, dac: float, status: Any = None) -> np.ndarray:
        out = np.full((frames, 1), 9.0, np.float32)  # garbage the sink must overwrite
        self.callback(out, frames, SimpleNamespace(currentTime=current, outputBufferDacTime=dac), status)
        return out[:, 0].copy()


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
