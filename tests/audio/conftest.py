"""Real packaged models, loaded once per test session and shared by the audio tests.

``piper_voice`` is the raw ``piper.PiperVoice`` (loaded as the product loads it) and
``whisper_model`` the raw ``faster_whisper.WhisperModel``; ``synthesizer`` and
``transcriber`` wrap those same instances, so each model loads once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from audio.asr import ASROptions, Transcriber
from audio.tts import Synthesizer, TTSOptions, load_piper_voice


@pytest.fixture(scope="session")
def piper_voice(piper_voice_paths: tuple[Path, Path]) -> Any:
    onnx, config = piper_voice_paths
    return load_piper_voice(onnx, config)


@pytest.fixture(scope="session")
def whisper_model(asr_model_dir: Path) -> Any:
    from faster_whisper import WhisperModel

    return WhisperModel(str(asr_model_dir), device="cpu", compute_type="int8", cpu_threads=2)


@pytest.fixture(scope="session")
def synthesizer(piper_voice: Any) -> Synthesizer:
    return Synthesizer.from_voice(piper_voice)


@pytest.fixture(scope="session")
def transcriber(whisper_model: Any) -> Transcriber:
    return Transcriber.from_model(whisper_model, ASROptions())


SENTENCES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Please remember to bring your umbrella tomorrow morning.",
    "Our meeting has been moved to Thursday afternoon.",
    "The library closes early on Sundays during the winter.",
    "Could you tell me the way to the nearest train station?",
    "My brother bought a new bicycle for his long commute.",
    "Scientists discovered a new species of frog in the rainforest.",
    "We should plant tomatoes and peppers in the garden this spring.",
    "The concert was cancelled because the singer was sick.",
    "I would like a cup of coffee with milk and no sugar.",
    "The children played football in the park until sunset.",
    "Turn off the lights when you leave the kitchen.",
    "Heavy traffic delayed the delivery truck for two hours.",
    "She painted the fence green and planted roses beside it.",
    "The museum opens a new exhibition about ancient Egypt next week.",
    "Always check the weather before going hiking in the mountains.",
    "The restaurant on the corner serves excellent pizza.",
    "He forgot his keys at the office again this morning.",
    "A gentle breeze carried the smell of fresh bread down the street.",
    "Remember to water the plants while I am away on holiday.",
)
"""Twenty plain sentences (no digits) used by the TTS/ASR round-trip tests."""


@pytest.fixture(scope="session")
def spoken_sentences(piper_voice: Any) -> list[Any]:
    """Each of :data:`SENTENCES` synthesized once as a single TTSChunk.

    Piper's noise is switched off so the audio, and so every test built on it, is the
    same on every run (with noise the durations vary from run to run).
    """
    synthesizer = Synthesizer.from_voice(piper_voice, TTSOptions(noise_scale=0.0, noise_w_scale=0.0))
    chunks = []
    for text in SENTENCES:
        chunk = synthesizer.synthesize_span(text)
        assert chunk is not None
        chunks.append(chunk)
    return chunks
