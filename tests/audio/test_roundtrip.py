"""TTS -> ASR round trip: what Piper says, Whisper hears (WER <= 10%)."""

from __future__ import annotations

import re
from typing import Any

import jiwer
import numpy as np
import pytest

from audio.asr import Transcriber
from audio.chunk import AudioChunk
from audio.wav import load_for_asr, wav_bytes


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


@pytest.mark.slow
def test_round_trip_word_error_rate(spoken_sentences: list[Any], transcriber: Transcriber) -> None:
    references, hypotheses = [], []
    for chunk in spoken_sentences[:12]:
        # Through the real file path: int16 WAV at 22.05 kHz -> float32 16 kHz mono.
        pcm16k = load_for_asr(wav_bytes(chunk.pcm, chunk.sample_rate))
        assert abs(pcm16k.shape[0] - round(chunk.num_samples * 16000 / chunk.sample_rate)) <= 1
        references.append(_norm(chunk.text))
        hypotheses.append(_norm(transcriber.transcribe(pcm16k).text))
    wer = jiwer.wer(references, hypotheses)
    assert wer <= 0.10, list(zip(references, hypotheses, strict=True))


@pytest.mark.slow
def test_round_trip_through_audio_chunk_resampling(spoken_sentences: list[Any], transcriber: Transcriber) -> None:
    chunk = spoken_sentences[12]
    audio = AudioChunk(chunk.pcm, chunk.sample_rate).to_float32().to_rate(16000)
    assert audio.sample_rate == 16000
    text = transcriber.transcribe(np.asarray(audio.pcm)).text
    assert jiwer.wer(_norm(chunk.text), _norm(text)) <= 0.2
