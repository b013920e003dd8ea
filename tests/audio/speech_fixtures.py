"""Test audio built by the tests themselves: Piper and espeak-ng speech, noise, clicks.

Helpers only (no fixtures): the VAD, echo and CLI tests share them.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from piper.config import SynthesisConfig

from audio.resample import resample
from audio.wav import read_wav

__all__ = [
    "RATE",
    "Utterance",
    "synth_piper",
    "synth_espeak",
    "espeak_available",
    "scale_to_dbfs",
    "white_noise",
    "click",
    "layout",
]

RATE = 16000
SILENCE_DBFS = -50.0
"""A sample quieter than this is outside the utterance's own non-silent extent."""


@dataclass(frozen=True)
class Utterance:
    pcm: np.ndarray
    """Float32 mono at 16 kHz, silence trimmed to the non-silent extent."""
    text: str


def _trim(pcm: np.ndarray) -> np.ndarray:
    loud = np.nonzero(np.abs(pcm) > 10 ** (SILENCE_DBFS / 20))[0]
    return pcm[loud[0] : loud[-1] + 1] if loud.size else pcm[:0]


def synth_piper(voice: Any, text: str, *, noise: bool = True) -> Utterance:
    """Speak ``text`` with a loaded ``piper.PiperVoice``; 16 kHz, trimmed. Piper's VITS
    samples noise (the voice's timbre and the durations) on every call, so the audio
    differs from run to run; ``noise=False`` turns both off for the same audio every time."""
    config = None if noise else SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    parts = [np.asarray(c.audio_float_array, np.float32)
             for c in voice.synthesize(text, syn_config=config)]
    audio = np.concatenate(parts)
    rate = int(voice.config.sample_rate)
    pcm = resample(audio, rate, RATE).astype(np.float32)
    return Utterance(_trim(pcm), text)


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def synth_espeak(text: str, voice: str = "en-us+f3") -> Utterance:
    """A second, different speaker via the espeak-ng command (caller checks availability)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "e.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True, capture_output=True)
        pcm, rate = read_wav(path)
    if pcm.ndim == 2:
        pcm = pcm.mean(axis=1).astype(np.float32)
    return Utterance(_trim(resample(pcm, rate, RATE).astype(np.float32)), text)


def scale_to_dbfs(pcm: np.ndarray, peak_dbfs: float) -> np.ndarray:
    """Scale so that the peak sample sits at ``peak_dbfs``."""
    peak = float(np.max(np.abs(pcm))) or 1.0
    return (pcm * (10 ** (peak_dbfs / 20) / peak)).astype(np.float32)


def white_noise(seconds: float, rms_dbfs: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(seconds * RATE)) * 10 ** (rms_dbfs / 20)).astype(np.float32)


def click(duration_ms: float = 100.0, peak: float = 0.8, seed: int = 0) -> np.ndarray:
    """A sharp broadband transient: an exponentially decaying noise burst."""
    n = int(RATE * duration_ms / 1000)
    rng = np.random.default_rng(seed)
    env = np.exp(-np.arange(n) / (n / 5))
    return (peak * env * rng.uniform(-1, 1, n)).astype(np.float32)


def layout(parts: list[np.ndarray | float]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Concatenate audio and silences (floats = seconds); return audio and each clip's span."""
    out: list[np.ndarray] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    for p in parts:
        if isinstance(p, float):
            seg = np.zeros(int(p * RATE), np.float32)
        else:
            seg = np.asarray(p, np.float32)
            spans.append((pos, pos + seg.size))
        out.append(seg)
        pos += seg.size
    return np.concatenate(out), spans
