"""AudioChunk: immutable, validated, conversions keep time on the injected clock."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from audio.chunk import AudioChunk, float_to_int16, int16_to_float
from audio.errors import AudioValueError


def test_times_are_in_samples_at_its_own_rate() -> None:
    c = AudioChunk(np.zeros(320, np.int16), 16000, start_sample=16000)
    assert (c.num_samples, c.end_sample, c.duration_ms, c.start_ms, c.end_ms) == (320, 16320, 20.0, 1000.0, 1020.0)


def test_frozen_and_read_only() -> None:
    pcm = np.zeros(10, np.float32)
    c = AudioChunk(pcm, 8000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.sample_rate = 16000  # type: ignore[misc]
    with pytest.raises(ValueError):
        c.pcm[0] = 1.0
    pcm[0] = 1.0  # the caller's array is not aliased
    assert c.pcm[0] == 0.0


@pytest.mark.parametrize(
    "pcm",
    [
        np.array([0.0, np.nan], np.float32),
        np.array([np.inf], np.float32),
        np.zeros((2, 2, 2), np.float32),
        np.zeros(4, np.int32),
    ],
)
def test_invalid_pcm_is_rejected(pcm: np.ndarray) -> None:
    with pytest.raises(AudioValueError):
        AudioChunk(pcm, 16000)


@pytest.mark.parametrize("rate", [0, -1, 1.5])
def test_invalid_rate_is_rejected(rate: object) -> None:
    with pytest.raises(AudioValueError):
        AudioChunk(np.zeros(4, np.int16), rate)  # type: ignore[arg-type]


def test_float_int16_conversions_round_trip_and_clip() -> None:
    x = np.array([-1.0, -0.5, 0.0, 0.25, 0.999, 1.5], np.float32)
    c = AudioChunk(x, 16000, 7)
    i = c.to_int16()
    assert i.pcm.dtype == np.int16 and i.start_sample == 7
    np.testing.assert_array_equal(i.pcm, [-32768, -16384, 0, 8192, 32735, 32767])
    back = i.to_float32()
    np.testing.assert_allclose(back.pcm[:5], x[:5], atol=1 / 32768)
    assert back.pcm[5] < 1.0
    with pytest.raises(AudioValueError):
        float_to_int16(np.array([np.nan]))
    assert int16_to_float(np.array([-32768], np.int16))[0] == -1.0


def test_to_mono_averages_channels() -> None:
    stereo = np.array([[1000, 3000], [-2000, 0]], np.int16)
    mono = AudioChunk(stereo, 8000).to_mono()
    np.testing.assert_array_equal(mono.pcm, [2000, -1000])
    assert AudioChunk(stereo, 8000).channels == 2 and mono.channels == 1


def test_to_rate_rescales_start_and_length() -> None:
    t = np.arange(4410) / 44100
    c = AudioChunk((0.3 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32), 44100, start_sample=44100)
    d = c.to_rate(16000)
    assert d.sample_rate == 16000 and d.start_sample == 16000 and d.num_samples == 1600
    assert abs(d.duration_ms - c.duration_ms) < 0.1
    assert c.to_rate(44100) is c


def test_package_exports_resolve_lazily() -> None:
    import subprocess
    import sys

    import audio

    for name in audio.__all__:
        assert getattr(audio, name) is not None, name
    with pytest.raises(AttributeError):
        audio.NoSuchThing  # noqa: B018
    # Importing the package loads no model runtime.
    code = "import sys, audio; print(sorted(m for m in ('faster_whisper', 'piper', 'sounddevice', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
