"""Recorded-conversation scenarios, built from text: the user's side of a replay.

A scenario is a list of parts laid end to end on a 16 kHz timeline: user utterances
(synthesised with the Piper voice, or with ``espeak-ng`` for a second speaker when it
is installed), silences and non-speech sounds (a cough, a click). With a virtual clock
a reply starts exactly ``end_of_turn_ms`` (plus one frame) after the user's speech
ends, so a part placed a known time after an utterance lands at a known point of the
reply -- that is how barge-in scenarios interrupt mid-answer.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from audio.resample import resample
from audio.tts import SpanSynthesizer

__all__ = ["Say", "Noise", "Recorded", "Placed", "Scenario", "render_scenario", "espeak_available", "piper_speech",
           "espeak_speech", "recorded_speech"]

RATE = 16_000


@dataclass(frozen=True)
class Say:
    """A user utterance, ``gap_ms`` after the end of the previous part."""

    text: str
    gap_ms: int = 0
    voice: Literal["piper", "espeak"] = "piper"
    peak_dbfs: float = -1.0
    espeak_voice: str = "en-us+f3"
    """With ``voice="espeak"``: espeak-ng's voice (``-v``) and words per minute (``-s``)."""
    espeak_rate: int = 150


@dataclass(frozen=True)
class Noise:
    """A non-speech sound, ``gap_ms`` after the end of the previous part."""

    kind: Literal["cough", "click"]
    gap_ms: int = 0
    duration_ms: int = 150
    peak_dbfs: float = -6.0


@dataclass(frozen=True)
class Recorded:
    """A recorded utterance (a WAV of real speech, any rate, mono or stereo), ``gap_ms``
    after the end of the previous part, at its own level unless ``peak_dbfs`` is given.
    Placed whole: its own room noise before and after the words stays."""

    path: Path
    text: str = ""
    """What is said, for the placement's record."""
    gap_ms: int = 0
    peak_dbfs: float | None = None


@dataclass(frozen=True)
class Placed:
    """Where a part landed on the timeline."""

    kind: str
    """say | cough | click (a :class:`Recorded` part is a say)."""
    text: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class Scenario:
    pcm: npt.NDArray[np.float32] = field(repr=False)
    """Float32 mono at ``sample_rate``."""
    placed: tuple[Placed, ...] = ()
    sample_rate: int = RATE

    def said(self) -> list[Placed]:
        return [p for p in self.placed if p.kind == "say"]


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def _trim(pcm: npt.NDArray[np.float32], floor_dbfs: float = -50.0) -> npt.NDArray[np.float32]:
    loud = np.nonzero(np.abs(pcm) > 10 ** (floor_dbfs / 20))[0]
    return pcm[loud[0]: loud[-1] + 1] if loud.size else pcm[:0]


def _peak(pcm: npt.NDArray[np.float32], peak_dbfs: float) -> npt.NDArray[np.float32]:
    peak = float(np.max(np.abs(pcm))) if pcm.size else 0.0
    if peak <= 0.0:
        return pcm
    return (pcm * np.float32(10 ** (peak_dbfs / 20) / peak)).astype(np.float32)


def piper_speech(synth: SpanSynthesizer, text: str) -> npt.NDArray[np.float32]:
    """``text`` spoken by a Piper voice, float32 at 16 kHz (empty if nothing to say)."""
    chunk = synth.synthesize_span(text)
    if chunk is None:
        return np.zeros(0, np.float32)
    pcm = chunk.pcm.astype(np.float32) / np.float32(32768.0)
    return np.asarray(resample(pcm, chunk.sample_rate, RATE), np.float32)


def espeak_speech(text: str, voice: str = "en-us+f3", rate: int = 150) -> npt.NDArray[np.float32]:
    """``text`` spoken by espeak-ng (a second, very different voice; ``voice`` and
    ``rate``, words per minute, as its ``-v`` and ``-s``), float32 at 16 kHz."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "say.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(rate), "-w", str(path), text],
                       check=True, capture_output=True)
        return recorded_speech(path)


def _noise(kind: str, duration_ms: int, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    n = RATE * duration_ms // 1000
    if kind == "click":
        out = np.zeros(max(n, 80), np.float32)
        out[:48] = rng.uniform(-1, 1, 48).astype(np.float32) * np.linspace(1, 0, 48)
        return out
    # A cough: a burst of broadband noise with a sharp attack and a fast decay.
    t = np.arange(n) / RATE
    env = (1 - np.exp(-t / 0.004)) * np.exp(-t / (duration_ms / 1000 / 3))
    return (rng.standard_normal(n) * env).astype(np.float32)


def recorded_speech(path: Path) -> npt.NDArray[np.float32]:
    """A WAV's samples as float32 mono at 16 kHz (channels averaged)."""
    from audio.wav import read_wav

    pcm, rate = read_wav(path)
    mono = pcm.mean(axis=1) if pcm.ndim == 2 else pcm
    return np.asarray(resample(mono.astype(np.float32), rate, RATE), np.float32)


def render_scenario(parts: Sequence[Say | Noise | Recorded], synthesizer: SpanSynthesizer, *,
                    lead_ms: int = 600, tail_ms: int = 1500, noise_floor_dbfs: float = -65.0,
                    seed: int = 0) -> Scenario:
    """Lay ``parts`` end to end (after ``lead_ms`` of room noise) and return the audio."""
    rng = np.random.default_rng(seed)
    pieces: list[tuple[int, npt.NDArray[np.float32], Placed]] = []
    cursor = RATE * lead_ms // 1000
    for part in parts:
        start = cursor + RATE * part.gap_ms // 1000
        if isinstance(part, Say):
            raw = (espeak_speech(part.text, part.espeak_voice, part.espeak_rate)
                   if part.voice == "espeak" and espeak_available()
                   else piper_speech(synthesizer, part.text))
            pcm = _peak(_trim(raw), part.peak_dbfs)
            kind, text = "say", part.text
        elif isinstance(part, Recorded):
            pcm = recorded_speech(part.path)
            if part.peak_dbfs is not None:
                pcm = _peak(pcm, part.peak_dbfs)
            kind, text = "say", part.text
        else:
            pcm = _peak(_noise(part.kind, part.duration_ms, rng), part.peak_dbfs)
            kind, text = part.kind, ""
        end = start + pcm.size
        pieces.append((start, pcm, Placed(kind, text, start * 1000 // RATE, end * 1000 // RATE)))
        cursor = end
    total = cursor + RATE * tail_ms // 1000
    out = (rng.standard_normal(total) * 10 ** (noise_floor_dbfs / 20)).astype(np.float32)
    for start, pcm, _ in pieces:
        out[start: start + pcm.size] += pcm
    return Scenario(np.clip(out, -1.0, 1.0), tuple(p for _, _, p in pieces), RATE)
