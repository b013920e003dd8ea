"""WAV reading/writing: every supported format round-trips; every bad file is one clear error."""

from __future__ import annotations

import io
import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from audio.errors import AudioError, AudioFileError, AudioFormatError
from audio.wav import SAMPLE_FORMATS, load_for_asr, read_wav, read_wav_info, wav_bytes, write_wav

# Worst-case quantisation error of each format for a signal in [-1, 1].
TOLERANCE = {
    "uint8": 1 / 128,
    "int16": 1 / 32768,
    "int24": 1 / 2**23,
    "int32": 1 / 2**31,
    "float32": 0.0,
    "float64": 1e-7,  # stored as float64, returned as float32
}


def _signal(frames: int, channels: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.99, 0.99, size=(frames, channels)).astype(np.float32)
    x[0] = -1.0  # the most negative code of every integer format
    return x[:, 0] if channels == 1 else x


def _chunk(cid: bytes, body: bytes) -> bytes:
    return cid + struct.pack("<I", len(body)) + body + (b"\x00" if len(body) & 1 else b"")


def _riff(*chunks: bytes) -> bytes:
    body = b"WAVE" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _fmt(tag: int, channels: int, rate: int, width: int) -> bytes:
    return _chunk(b"fmt ", struct.pack("<HHIIHH", tag, channels, rate, rate * width * channels, width * channels, width * 8))


@pytest.mark.parametrize("sample_format", SAMPLE_FORMATS)
@pytest.mark.parametrize("channels", [1, 2, 6])
@pytest.mark.parametrize("extensible", [False, True])
def test_round_trip_every_format(sample_format: str, channels: int, extensible: bool, tmp_path: Path) -> None:
    x = _signal(997, channels)
    path = tmp_path / "x.wav"
    write_wav(path, x, 12345, sample_format, extensible=extensible)
    y, rate = read_wav(path)
    assert rate == 12345
    assert y.dtype == np.float32
    assert y.shape == x.shape
    assert np.max(np.abs(y - x)) <= TOLERANCE[sample_format] + 1e-7
    info = read_wav_info(path)
    assert (info.channels, info.sample_format, info.num_frames) == (channels, sample_format, 997)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_integer_files_agree_with_stdlib_wave(width: int) -> None:
    """Cross-check with an independent decoder: the stdlib reads plain integer PCM."""
    x = _signal(500, 2, seed=width)
    fmt = {1: "uint8", 2: "int16", 3: "int24", 4: "int32"}[width]
    blob = wav_bytes(x, 16000, fmt, extensible=False)
    with wave.open(io.BytesIO(blob)) as w:
        assert (w.getsampwidth(), w.getnchannels(), w.getnframes(), w.getframerate()) == (width, 2, 500, 16000)
        raw = w.readframes(500)
    # And the stdlib's own output reads back through ours.
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(width)
        w.setframerate(16000)
        w.writeframes(raw)
    y, _ = read_wav(out.getvalue())
    assert np.max(np.abs(y - x)) <= TOLERANCE[fmt] + 1e-7


def test_known_sample_codes_decode_exactly() -> None:
    u8 = _riff(_fmt(1, 1, 8000, 1), _chunk(b"data", bytes([0, 128, 255])))
    np.testing.assert_array_equal(read_wav(u8)[0], np.array([-1.0, 0.0, 127 / 128], np.float32))
    i24 = _riff(_fmt(1, 1, 8000, 3), _chunk(b"data", bytes([0, 0, 0x80, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F])))
    np.testing.assert_allclose(read_wav(i24)[0], [-1.0, -1 / 2**23, (2**23 - 1) / 2**23], atol=0)
    f32 = _riff(_fmt(3, 1, 8000, 4), _chunk(b"data", np.array([0.25, -1.5], "<f4").tobytes()))
    np.testing.assert_array_equal(read_wav(f32)[0], [0.25, -1.5])  # float is kept as stored


def test_skips_odd_sized_chunks_and_reads_data_before_fmt() -> None:
    data = _chunk(b"data", np.array([1000, -1000, 0], "<i2").tobytes())
    blob = _riff(_chunk(b"LIST", b"abc"), data, _fmt(1, 1, 22050, 2))  # odd chunk padded
    y, rate = read_wav(blob)
    assert rate == 22050
    np.testing.assert_allclose(y, [1000 / 32768, -1000 / 32768, 0.0])


def test_streaming_writer_unknown_data_size_reads_to_end() -> None:
    payload = np.arange(-5, 5, dtype="<i2").tobytes()
    blob = _riff(_fmt(1, 1, 8000, 2)) + b"data" + struct.pack("<I", 0xFFFFFFFF) + payload
    assert read_wav(blob)[0].shape == (10,)


def test_read_from_stream_and_bytes_match_path(tmp_path: Path) -> None:
    x = _signal(100, 1)
    path = tmp_path / "a.wav"
    write_wav(path, x, 8000)
    from_path = read_wav(path)[0]
    with path.open("rb") as f:
        from_stream = read_wav(f)[0]
    np.testing.assert_array_equal(from_path, from_stream)
    np.testing.assert_array_equal(from_path, read_wav(path.read_bytes())[0])


# -- bad input: one line naming the file and the problem ------------------------------


def _bad(tmp_path: Path, blob: bytes, name: str = "bad.wav") -> Path:
    path = tmp_path / name
    path.write_bytes(blob)
    return path


def _error(path: Path) -> str:
    with pytest.raises(AudioFileError) as info:
        read_wav(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: "), msg
    assert "\n" not in msg
    return msg


def test_not_a_wav(tmp_path: Path) -> None:
    assert "not a RIFF/WAVE file" in _error(_bad(tmp_path, b"hello, I am text, not audio\n" * 10))
    assert "not a RIFF/WAVE file" in _error(_bad(tmp_path, b"RIFF\x10\x00\x00\x00AVI LIST"))
    assert "empty file" in _error(_bad(tmp_path, b""))


def test_truncated_data_reports_missing_bytes(tmp_path: Path) -> None:
    blob = wav_bytes(_signal(1000, 1), 16000)  # 2000 data bytes
    msg = _error(_bad(tmp_path, blob[:-300]))
    assert "truncated" in msg and "300 bytes missing" in msg


def test_partial_frame_is_truncation(tmp_path: Path) -> None:
    blob = _riff(_fmt(1, 2, 8000, 2), _chunk(b"data", b"\x00" * 10))  # 2.5 frames of 4 bytes
    msg = _error(_bad(tmp_path, blob))
    assert "truncated" in msg and "2 bytes missing" in msg


def test_zero_length_audio(tmp_path: Path) -> None:
    assert "no audio" in _error(_bad(tmp_path, _riff(_fmt(1, 1, 8000, 2), _chunk(b"data", b""))))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_samples(tmp_path: Path, value: float) -> None:
    x = np.zeros(50, "<f4")
    x[17] = value
    msg = _error(_bad(tmp_path, _riff(_fmt(3, 1, 8000, 4), _chunk(b"data", x.tobytes()))))
    assert "NaN/infinite" in msg and "frame 17" in msg


@pytest.mark.parametrize(("tag", "what"), [(6, "A-law"), (7, "mu-law"), (2, "ADPCM"), (0x55, "MP3")])
def test_compressed_formats_are_unsupported(tmp_path: Path, tag: int, what: str) -> None:
    blob = _riff(_fmt(tag, 1, 8000, 1), _chunk(b"data", b"\x01" * 100))
    path = _bad(tmp_path, blob)
    with pytest.raises(AudioFormatError, match=what):
        read_wav(path)
    assert str(path) in _error(path)


def test_missing_chunks_and_files(tmp_path: Path) -> None:
    assert "no fmt chunk" in _error(_bad(tmp_path, _riff(_chunk(b"data", b"\x00\x00"))))
    assert "no data chunk" in _error(_bad(tmp_path, _riff(_fmt(1, 1, 8000, 2))))
    assert "no such file" in _error(tmp_path / "missing.wav")
    assert "directory" in _error(tmp_path)


def test_errors_are_audio_errors() -> None:
    with pytest.raises(AudioError):
        read_wav(b"nope")


def test_writer_refuses_nan_and_unknown_formats(tmp_path: Path) -> None:
    with pytest.raises(AudioFormatError, match="NaN"):
        write_wav(tmp_path / "n.wav", np.array([0.0, np.nan], np.float32), 8000)
    with pytest.raises(AudioFormatError, match="int12"):
        write_wav(tmp_path / "n.wav", np.zeros(4, np.float32), 8000, "int12")
    assert not (tmp_path / "n.wav").exists()


def test_load_for_asr_downmixes_and_resamples(tmp_path: Path) -> None:
    rate = 44100
    t = np.arange(rate) / rate
    left = 0.5 * np.sin(2 * np.pi * 440.0 * t)
    stereo = np.stack([left, left], axis=1).astype(np.float32)
    path = tmp_path / "s.wav"
    write_wav(path, stereo, rate, "int24")
    pcm = load_for_asr(path)
    assert pcm.dtype == np.float32 and pcm.ndim == 1
    assert abs(pcm.shape[0] - 16000) <= 1
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(pcm.shape[0])))
    peak_hz = np.argmax(spectrum) * 16000 / pcm.shape[0]
    assert abs(peak_hz - 440.0) < 2.0
    assert abs(np.sqrt(np.mean(pcm[1000:-1000] ** 2)) - 0.5 / np.sqrt(2)) < 0.01
