"""Sources: WAV files on a virtual or real-time clock, the mic through a fake PortAudio
stream, and bad input of every kind (rate, channels, sample type, NaN, empty, truncated)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from audio.clock import DeviceClock, VirtualClock
from audio.devices import DeviceInfo, load_sounddevice, resolve_device
from audio.errors import AudioFileError, AudioValueError, DeviceError
from audio.resample import resample
from audio.sources import MicSource, StreamConverter, WavFileSource
from audio.wav import wav_bytes, write_wav
from tests.audio.fake_streams import FakeInputStream

RATE = 16000
FRAME = 320


def sweep(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.4 * np.sin(2 * np.pi * (200 + 300 * t) * t)).astype(np.float32)


def check_frames(chunks: list[Any], start: int = 0) -> None:
    assert chunks, "no audio came out"
    for c in chunks[:-1]:
        assert c.num_samples == FRAME
    assert 0 < chunks[-1].num_samples <= FRAME
    assert chunks[0].start_sample == start
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start_sample == a.end_sample
    for c in chunks:
        assert c.sample_rate == RATE and c.channels == 1 and c.pcm.dtype == np.float32


# ------------------------------------------------------------------------ WAV files


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
@pytest.mark.parametrize("fmt", ["int16", "float32", "uint8", "int24"])
def test_any_rate_and_sample_type_becomes_16k_mono_frames(tmp_path: Path, rate: int, fmt: str) -> None:
    audio = sweep(0.5, rate)
    stereo = np.stack([audio, audio], axis=1)
    path = tmp_path / "in.wav"
    write_wav(path, stereo, rate, sample_format=fmt)
    clock = VirtualClock(RATE)
    chunks = list(WavFileSource(path, clock))
    check_frames(chunks)
    got = np.concatenate([c.pcm for c in chunks])
    want = resample(audio, rate, RATE).astype(np.float32)
    assert abs(got.size - want.size) <= 1
    n = min(got.size, want.size)
    tol = 0.02 if fmt == "uint8" else 2e-3
    assert np.max(np.abs(got[100 : n - 100] - want[100 : n - 100])) < tol


def test_virtual_clock_is_moved_to_each_frame_end_as_it_is_yielded(tmp_path: Path) -> None:
    path = tmp_path / "in.wav"
    write_wav(path, sweep(0.3, RATE), RATE)
    clock = VirtualClock(RATE, start_sample=1234)
    seen = []
    for chunk in WavFileSource(path, clock):
        seen.append((chunk.start_sample, chunk.end_sample, clock.now_samples()))
    assert seen[0][0] == 1234
    assert all(now == end for _, end, now in seen)


def test_device_clock_paces_frames_in_real_time(tmp_path: Path) -> None:
    path = tmp_path / "in.wav"
    write_wav(path, sweep(0.2, RATE), RATE)
    fake = {"t": 100.0}
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        fake["t"] += s

    clock = DeviceClock(RATE, time_fn=lambda: fake["t"], sleep_fn=sleep)
    for chunk in WavFileSource(path, clock):
        assert clock.now_samples() >= chunk.end_sample  # never ahead of real time
    assert sum(slept) == pytest.approx(0.2, abs=0.002)


def test_float_samples_beyond_full_scale_are_clipped_and_counted(tmp_path: Path) -> None:
    audio = np.zeros(1600, np.float32)
    audio[100:110] = 3.0
    path = tmp_path / "loud.wav"
    write_wav(path, audio, RATE, sample_format="float32")
    src = WavFileSource(path, VirtualClock(RATE))
    got = np.concatenate([c.pcm for c in src])
    assert np.max(np.abs(got)) <= 1.0
    assert src.stats.clipped_samples == 10


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"", "empty file"),
        (b"RIFF\x00\x00\x00\x00WAVEjunk", "no fmt chunk"),
        (b"hello world, not audio", "not a RIFF/WAVE"),
    ],
)
def test_unreadable_files_are_clear_errors_naming_the_file(tmp_path: Path, blob: bytes, message: str) -> None:
    path = tmp_path / "bad.wav"
    path.write_bytes(blob)
    with pytest.raises(AudioFileError, match=message) as info:
        WavFileSource(path, VirtualClock(RATE))
    assert "bad.wav" in str(info.value)


def test_truncated_nan_and_zero_length_files_fail_before_streaming(tmp_path: Path) -> None:
    whole = wav_bytes(sweep(0.1, RATE), RATE)
    (tmp_path / "cut.wav").write_bytes(whole[:-101])
    nan = np.zeros(100, np.float32)
    nan[50] = np.nan
    (tmp_path / "nan.wav").write_bytes(
        wav_bytes(np.zeros(100, np.float32), RATE, "float32")[:-400] + nan.astype("<f4").tobytes()
    )
    (tmp_path / "empty.wav").write_bytes(wav_bytes(np.zeros(0, np.float32), RATE))
    for name, message in [("cut", "truncated"), ("nan", "NaN"), ("empty", "no audio")]:
        with pytest.raises(AudioFileError, match=message):
            WavFileSource(tmp_path / f"{name}.wav", VirtualClock(RATE))


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AudioFileError, match="no such file"):
        WavFileSource(tmp_path / "nope.wav", VirtualClock(RATE))


# -------------------------------------------------------------------- converter


def test_converter_rejects_unsupported_blocks_and_repairs_bad_samples() -> None:
    conv = StreamConverter(RATE, RATE, FRAME)
    with pytest.raises(AudioValueError):
        conv.push(np.zeros((4, 2, 2), np.float32))
    with pytest.raises(AudioValueError):
        conv.push(np.zeros(10, np.complex64))
    block = np.full(FRAME, 0.25, np.float32)
    block[[3, 7]] = [np.nan, np.inf]
    (chunk,) = conv.push(block)
    assert np.all(np.isfinite(chunk.pcm)) and chunk.pcm[3] == 0.0 and chunk.pcm[7] == 0.0
    assert conv.invalid_samples == 2
    assert conv.push(np.zeros(0, np.float32)) == []


# ------------------------------------------------------------------------ mic


def make_mic(clock: Any, device_rate: int, channels: int = 1, queue_blocks: int = 500) -> tuple[MicSource, FakeInputStream]:
    made: list[FakeInputStream] = []

    def factory(**kw: Any) -> FakeInputStream:
        made.append(FakeInputStream(**kw))
        return made[-1]

    mic = MicSource(clock, RATE, 20, queue_blocks=queue_blocks, channels=channels,
                    stream_factory=factory, device_rate=device_rate)
    return mic, made[0]


def test_mic_stereo_48k_with_nan_streams_16k_mono_frames_anchored_at_adc_time() -> None:
    clock = VirtualClock(RATE, start_sample=16000)
    mic, stream = make_mic(clock, 48000, channels=2)
    audio = sweep(0.2, 48000)
    blocks = np.stack([audio, audio], axis=1).reshape(10, 960, 2).copy()
    blocks[3, 5, 0] = np.nan
    for i, b in enumerate(blocks):
        stream.feed(b, current=5.0 + i * 0.02, adc=5.0 + i * 0.02 - 0.01)
    mic.close()
    chunks = list(mic)
    check_frames(chunks, start=16000 - 160)  # first sample was captured 10 ms before "now"
    total = sum(c.num_samples for c in chunks)
    assert abs(total - 3200) <= 1
    assert mic.stats.invalid_samples == 1
    assert stream.closed


def test_mic_queue_overflow_drops_blocks_without_blocking_and_keeps_time_true() -> None:
    clock = VirtualClock(RATE)
    mic, stream = make_mic(clock, RATE, queue_blocks=2)
    tone = np.full((320, 1), 0.1, np.float32)
    for _ in range(5):
        stream.feed(tone)  # nobody consumes: the callback must return anyway
    stream.feed(np.zeros((0, 1), np.float32))  # an empty block is harmless
    stream.feed(tone, overflow=True)
    stats = mic.stats
    assert stats.dropped_blocks == 4 and stats.dropped_samples == 4 * 320
    assert stats.device_overflows == 1
    mic.close()
    chunks = list(mic)
    got = np.concatenate([c.pcm for c in chunks])
    assert got.size == 6 * 320  # dropped blocks came back as silence, not as lost time
    assert np.allclose(got[:640], 0.1, atol=1e-6)
    assert np.max(np.abs(got[700:])) < 0.01  # the silence standing in for dropped blocks
    assert chunks[0].start_sample == 0 and chunks[-1].end_sample == 6 * 320


def test_mic_int16_blocks_are_scaled() -> None:
    clock = VirtualClock(RATE)
    mic, stream = make_mic(clock, RATE)
    stream.feed(np.full((320, 1), 16384, np.int16))
    mic.close()
    (chunk,) = list(mic)
    assert np.allclose(chunk.pcm, 0.5)


# ---------------------------------------------------------------------- devices


DEVICES = [
    DeviceInfo(0, "HDA Intel PCH: ALC3246 Analog", 2, 2, 48000.0),
    DeviceInfo(1, "USB Headset Mic", 1, 0, 16000.0),
    DeviceInfo(2, "USB Speaker", 0, 2, 44100.0),
]


def test_resolve_device_by_index_name_and_default() -> None:
    assert resolve_device("headset", "input", DEVICES).index == 1
    assert resolve_device(2, "output", DEVICES).index == 2
    assert resolve_device(None, "output", DEVICES, default_index=2).index == 2
    with pytest.raises(DeviceError, match="no audio input device named 'speaker'"):
        resolve_device("speaker", "input", DEVICES)
    with pytest.raises(DeviceError, match="ambiguous"):
        resolve_device("usb", "output", DEVICES + [DeviceInfo(3, "USB DAC", 0, 2, 48000.0)])
    with pytest.raises(DeviceError, match="index 2"):
        resolve_device(2, "input", DEVICES)
    with pytest.raises(DeviceError, match="no audio output device found"):
        resolve_device(None, "output", [d for d in DEVICES if d.max_output_channels == 0])


def test_missing_portaudio_is_a_device_error_saying_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import now fails
    with pytest.raises(DeviceError, match="libportaudio2"):
        load_sounddevice()


def test_a_dead_mic_stream_is_a_clear_error_not_a_hang() -> None:
    clock = VirtualClock(RATE)
    mic, stream = make_mic(clock, RATE)
    stream.feed(np.full((320, 1), 0.1, np.float32))
    stream.active = False  # type: ignore[attr-defined]  # PortAudio aborted the stream
    frames = iter(mic)
    assert next(frames).num_samples == 320
    with pytest.raises(DeviceError, match="microphone stream stopped"):
        next(frames)


def test_a_mic_that_goes_silent_for_good_is_a_clear_error() -> None:
    clock = VirtualClock(RATE)
    made: list[FakeInputStream] = []

    def factory(**kw: Any) -> FakeInputStream:
        made.append(FakeInputStream(**kw))
        return made[-1]

    mic = MicSource(clock, RATE, 20, stream_factory=factory, device_rate=RATE,
                    stall_timeout_s=0.2)
    with pytest.raises(DeviceError, match="no audio for"):
        next(iter(mic))
