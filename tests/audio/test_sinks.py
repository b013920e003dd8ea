"""Sinks: exact playback positions on a virtual clock, and WAV recording on the input's
timeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.errors import AudioError
from audio.sinks import NullSink, WavSink
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
