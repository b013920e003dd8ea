"""Resampling keeps pitch and length; the streaming resampler matches the one-shot one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audio.errors import AudioValueError
from audio.resample import StreamResampler, resample

RATE_PAIRS = [(8000, 16000), (16000, 48000), (22050, 16000), (44100, 16000), (48000, 22050), (16000, 8000)]


def _tone(freq: float, rate: int, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.shape[0])))
    return float(np.argmax(spectrum) * rate / x.shape[0])


@pytest.mark.parametrize(("rate_in", "rate_out"), RATE_PAIRS)
@pytest.mark.parametrize("freq", [300.0, 1234.5, 3000.0])
def test_tone_keeps_its_frequency(rate_in: int, rate_out: int, freq: float) -> None:
    y = resample(_tone(freq, rate_in), rate_in, rate_out)
    assert y.shape[0] == rate_out  # one second in, one second out
    assert abs(_peak_hz(y, rate_out) - freq) <= 1.5
    # Energy is preserved away from the edges (no gain change, no aliasing mess).
    rms = np.sqrt(np.mean(y[rate_out // 10 : -rate_out // 10] ** 2))
    assert abs(rms - 0.5 / np.sqrt(2)) < 0.01


def test_content_above_new_nyquist_is_removed() -> None:
    y = resample(_tone(7000.0, 48000), 48000, 8000)  # 7 kHz cannot exist at 8 kHz
    assert np.sqrt(np.mean(y[800:-800] ** 2)) < 0.01


def test_int16_and_multichannel_keep_dtype_and_channels() -> None:
    x = (np.stack([_tone(440, 22050), _tone(880, 22050)], axis=1) * 32767).astype(np.int16)
    y = resample(x, 22050, 16000)
    assert y.dtype == np.int16 and y.shape == (16000, 2)
    assert abs(_peak_hz(y[:, 1].astype(np.float32), 16000) - 880) <= 1.5


def test_same_rate_is_a_copy() -> None:
    x = _tone(440, 16000)
    y = resample(x, 16000, 16000)
    np.testing.assert_array_equal(x, y)
    assert y is not x


@pytest.mark.parametrize("bad", [0, -16000, 1.5, True])
def test_bad_rates_are_rejected(bad: object) -> None:
    with pytest.raises(AudioValueError):
        resample(np.zeros(10, np.float32), bad, 16000)  # type: ignore[arg-type]


def test_nan_is_rejected() -> None:
    with pytest.raises(AudioValueError, match="NaN"):
        resample(np.array([0.0, np.nan], np.float32), 16000, 8000)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=2000), min_size=1, max_size=30),
    pair=st.sampled_from(RATE_PAIRS),
)
def test_stream_matches_one_shot(sizes: list[int], pair: tuple[int, int]) -> None:
    rate_in, rate_out = pair
    x = np.random.default_rng(len(sizes)).uniform(-0.5, 0.5, sum(sizes)).astype(np.float32)
    stream = StreamResampler(rate_in, rate_out)
    parts, pos = [], 0
    for n in sizes:
        parts.append(stream.process(x[pos : pos + n]))
        pos += n
    parts.append(stream.flush())
    y = np.concatenate(parts)
    expected = resample(x, rate_in, rate_out)
    assert abs(y.shape[0] - expected.shape[0]) <= 1
    n = min(y.shape[0], expected.shape[0])
    if n:
        np.testing.assert_allclose(y[:n], expected[:n], atol=2e-3)
    assert stream.samples_in == x.shape[0] and stream.samples_out == y.shape[0]


def test_stream_int16_converts_float_chunks_and_flush_is_idempotent() -> None:
    stream = StreamResampler(48000, 16000, dtype="int16")
    tone = _tone(500, 48000)
    out = [stream.process(tone[i : i + 480]) for i in range(0, tone.shape[0], 480)]
    out.append(stream.flush())
    assert stream.flush().shape == (0,)
    y = np.concatenate(out)
    assert y.dtype == np.int16 and abs(y.shape[0] - 16000) <= 1
    assert abs(_peak_hz(y.astype(np.float32), 16000) - 500) <= 1.5
    with pytest.raises(AudioValueError):
        stream.process(tone[:10])


def test_stream_rejects_wrong_channel_count() -> None:
    stream = StreamResampler(16000, 8000, channels=2)
    with pytest.raises(AudioValueError, match="channel"):
        stream.process(np.zeros(100, np.float32).reshape(-1, 1))
