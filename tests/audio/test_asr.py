"""ASR: silence is never decoded; bad input is rejected; real speech gets text and times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from audio.asr import ASROptions, Transcriber, as_asr_input, rms_dbfs
from audio.errors import AudioValueError, ModelLoadError
from audio.resample import resample

RATE = 16000


class ExplodingModel:
    """A stand-in WhisperModel that fails the test if the decoder is ever run."""

    def __init__(self) -> None:
        self.calls = 0

    def transcribe(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise AssertionError("decoder ran on audio that should have been skipped")


@pytest.mark.parametrize("mode", ["silero", "rms"])
def test_silence_is_never_decoded(mode: str) -> None:
    model = ExplodingModel()
    t = Transcriber.from_model(model, ASROptions(speech_check=mode))
    rng = np.random.default_rng(0)
    for audio in (
        np.zeros(RATE * 5, np.float32),
        np.zeros(0, np.float32),
        (rng.standard_normal(RATE * 3) * 1e-4).astype(np.float32),  # -80 dBFS hiss
        np.zeros(RATE * 2, np.int16),
    ):
        result = t.transcribe(audio)
        assert result.text == "" and result.segments == () and not result.speech_found
        assert result.empty
    assert model.calls == 0


def test_silero_gate_rejects_loud_noise_that_is_not_speech() -> None:
    model = ExplodingModel()
    t = Transcriber.from_model(model, ASROptions(speech_check="silero"))
    rng = np.random.default_rng(1)
    noise = (rng.standard_normal(RATE * 3) * 0.05).astype(np.float32)  # -26 dBFS white noise
    hum = (0.3 * np.sin(2 * np.pi * 60 * np.arange(RATE * 3) / RATE)).astype(np.float32)
    assert rms_dbfs(noise) > -60 and not t.has_speech(noise)
    assert not t.has_speech(hum)
    assert t.transcribe(noise).text == ""
    assert model.calls == 0


@pytest.mark.parametrize(
    ("audio", "match"),
    [
        (np.array([0.0, np.nan], np.float32), "NaN"),
        (np.array([np.inf] * 4, np.float32), "NaN or infinite"),
        (np.zeros((100, 2), np.float32), "mono"),
        (np.zeros(10, np.int32), "float32 or int16"),
    ],
)
def test_bad_input_is_rejected(audio: np.ndarray, match: str) -> None:
    t = Transcriber.from_model(ExplodingModel())
    with pytest.raises(AudioValueError, match=match):
        t.transcribe(audio)


def test_int16_input_is_scaled() -> None:
    x = as_asr_input(np.array([-32768, 16384], np.int16))
    np.testing.assert_allclose(x, [-1.0, 0.5])
    assert x.dtype == np.float32


def test_missing_or_invalid_model_dir(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not found"):
        Transcriber(tmp_path / "nope")
    with pytest.raises(ModelLoadError, match="no model.bin"):
        Transcriber(tmp_path)
    with pytest.raises(ValueError):
        ASROptions(speech_check="maybe")


@pytest.mark.slow
def test_real_speech_has_text_words_and_times(transcriber: Transcriber, spoken_sentences: list[Any]) -> None:
    chunk = spoken_sentences[1]  # "Please remember to bring your umbrella tomorrow morning."
    audio = resample(chunk.pcm.astype(np.float32) / 32768, chunk.sample_rate, RATE)
    result = transcriber.transcribe(audio)
    assert result.speech_found and result.language == "en"
    assert "umbrella" in result.text.lower()
    assert result.duration_ms == round(1000 * audio.shape[0] / RATE)
    words = result.words
    assert len(words) >= 6
    assert all(0 <= w.start_ms <= w.end_ms <= result.duration_ms + 20 for w in words)
    assert all(a.start_ms <= b.start_ms for a, b in zip(words, words[1:], strict=False))
    # int16 input gives the same words.
    as_int16 = transcriber.transcribe((audio * 32767).astype(np.int16), word_timestamps=False)
    assert as_int16.text.lower().split()[:4] == result.text.lower().split()[:4]
    assert as_int16.words == ()


@pytest.mark.slow
def test_long_audio_skips_silence_and_keeps_the_original_timeline(
    transcriber: Transcriber, spoken_sentences: list[Any]
) -> None:
    chunk = spoken_sentences[5]  # "My brother bought a new bicycle for his long commute."
    speech = resample(chunk.pcm.astype(np.float32) / 32768, chunk.sample_rate, RATE)
    audio = np.zeros(RATE * 70, np.float32)
    at = RATE * 50  # speech starts 50 s in, well past the first 30 s window
    audio[at : at + speech.shape[0]] = speech
    result = transcriber.transcribe(audio)
    assert "bicycle" in result.text.lower()
    assert result.words[0].start_ms >= 49_000
    assert result.words[-1].end_ms <= 50_000 + 1000 * speech.shape[0] // RATE + 500


def test_a_window_on_a_model_that_cannot_cut_it_is_an_error() -> None:
    """``window_s`` is the model's to apply: a plain faster-whisper model given one
    would otherwise decode the full 30 s without a word."""
    with pytest.raises(ValueError, match="window_s=10 needs a model that cuts"):
        Transcriber.from_model(ExplodingModel(), ASROptions(window_s=10))
    Transcriber.from_model(ExplodingModel(), ASROptions(window_s=0))
