"""The listener marks speech that cannot be the reply's echo: heard once the echo gate
stood down (headphones), the turn manager may pause the reply at its onset."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from assistant.speech.listener import Listener
from assistant.turns.events import SpeechStarted
from audio.chunk import AudioChunk
from audio.echo import EchoOptions, EchoProcessor
from audio.vad import VadOptions

RATE = 16000
CHUNK = 320  # 20 ms


class LoudIsSpeech:
    """Stands in for the VAD's classifier: a frame over -40 dBFS is speech."""

    def is_speech(self, frame: npt.NDArray[np.float32]) -> bool:
        return float(np.mean(np.square(frame, dtype=np.float64))) > 1e-4

    def reset(self) -> None:
        pass


def _noise(n: int, dbfs: float, seed: int) -> npt.NDArray[np.float32]:
    return (np.random.default_rng(seed).standard_normal(n) * 10 ** (dbfs / 20)).astype(np.float32)


def _voice(n: int, dbfs: float, f0: float, seed: int) -> npt.NDArray[np.float32]:
    """A voiced sound: harmonics of ``f0`` (speech's low spectral flatness), at ``dbfs``."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / RATE
    wave = sum(np.sin(2 * np.pi * f0 * k * t + rng.uniform(0, 2 * np.pi)) / k
               for k in range(1, 25))
    wave = wave / np.sqrt(np.mean(np.square(wave))) * 10 ** (dbfs / 20)
    return np.asarray(wave, np.float32)


def _speech_starts(echo_gain: float) -> list[SpeechStarted]:
    """A reply plays from 0 for 2 s (a voice at -20 dBFS), reaching the microphone at
    ``echo_gain`` 20 ms later; the user talks over it from 1 s, loud enough for the gate
    (16 dB over the reply)."""
    echo = EchoProcessor(EchoOptions(mode="gate"))
    listener = Listener(VadOptions(), echo, classifier=LoudIsSpeech())
    far = _voice(2 * RATE, -20.0, f0=120.0, seed=1)
    mic = _noise(3 * RATE, -65.0, seed=2)
    delay = 20 * RATE // 1000
    mic[delay:delay + far.size] += far * np.float32(echo_gain)
    mic[RATE:RATE + RATE // 2] += _voice(RATE // 2, -4.0, f0=190.0, seed=3)
    out = []
    for t in range(0, mic.size, CHUNK):
        if t < far.size:
            echo.push_reference(AudioChunk(far[t:t + CHUNK], RATE, t))
        out += listener.process(AudioChunk(mic[t:t + CHUNK], RATE, t))
    return [o for o in out if isinstance(o, SpeechStarted)]


def test_speech_over_a_reply_on_headphones_is_marked_echo_free() -> None:
    starts = _speech_starts(echo_gain=0.0)
    assert len(starts) == 1 and 1000 < starts[0].t_ms <= 1200  # the user, 1 s in
    assert starts[0].echo_free


def test_speech_over_a_reply_with_an_echo_is_not() -> None:
    starts = _speech_starts(echo_gain=0.5)
    assert starts and not any(s.echo_free for s in starts)
