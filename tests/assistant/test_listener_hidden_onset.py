"""Speech the echo gate hid: in the first reply, before the gate stands down, a user who
goes on with their turn is muted until they beat the reply by the gate's margin (or it
ends), so the VAD hears them late. The listener reports where they really began -- when
the muted sound is not the reply's echo -- so that the turn manager can tell going on
from answering (``turns.continue_within_ms``), and ASR gets the hidden first word."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from assistant.speech.listener import Listener, UtteranceOpened
from assistant.turns.events import SpeechStarted
from audio import vad as vad_mod
from audio.chunk import AudioChunk
from audio.echo import EchoOptions, EchoProcessor
from audio.resample import resample

RATE = 16000
REPLY_MS, USER_AT_MS = 800, 200


@pytest.fixture(scope="module")
def voices(piper_voice_paths: tuple[Path, Path]) -> tuple[np.ndarray, np.ndarray]:
    """The reply and the user's going on, both Piper (different words: no correlation)."""
    from piper import PiperVoice, SynthesisConfig

    voice = PiperVoice.load(piper_voice_paths[0], config_path=piper_voice_paths[1])
    fixed = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)  # no sampling noise

    def say(text: str, peak: float) -> np.ndarray:
        pcm = np.concatenate([c.audio_float_array for c in voice.synthesize(text, fixed)])
        pcm = np.asarray(resample(pcm, voice.config.sample_rate, RATE), np.float32)
        nz = np.flatnonzero(np.abs(pcm) > 1e-3)
        pcm = pcm[nz[0]: nz[-1] + 1]
        return (peak * pcm / np.max(np.abs(pcm))).astype(np.float32)

    reply = say("Sure, I can call her for you right now.", 0.5)[: RATE * REPLY_MS // 1000]
    return reply, say("Actually, my brother.", 0.2)  # quieter than the reply: muted


def run(reply: np.ndarray, user: np.ndarray, user_at_ms: int, echo_gain: float,
        stands_down: bool) -> tuple[EchoProcessor, list[SpeechStarted], list[UtteranceOpened]]:
    """The reply plays from 0 (its echo at ``echo_gain``, 30 ms later); the user talks
    from ``user_at_ms``, in a quiet room."""
    echo = EchoProcessor(EchoOptions(mode="gate", gate_stands_down=stands_down))
    listener = Listener(vad_mod.VadOptions(), echo)
    rng = np.random.default_rng(0)
    mic = (rng.standard_normal(3 * RATE) * 10 ** (-65 / 20)).astype(np.float32)
    at = RATE * user_at_ms // 1000
    mic[at: at + user.size] += user
    delay = RATE * 30 // 1000
    mic[delay: delay + reply.size] += echo_gain * reply
    starts: list[SpeechStarted] = []
    opened: list[UtteranceOpened] = []
    step = RATE // 50
    for lo in range(0, mic.size, step):
        if lo < reply.size:
            echo.push_reference(AudioChunk(reply[lo: lo + step], RATE, lo))
        for out in listener.process(AudioChunk(mic[lo: lo + step], RATE, lo)):
            if isinstance(out, SpeechStarted):
                starts.append(out)
            elif isinstance(out, UtteranceOpened):
                opened.append(out)
    return echo, starts, opened


@pytest.mark.parametrize("user_at_ms", [100, 250])
def test_speech_the_gate_hid_on_headphones_began_where_the_user_began(
        voices: tuple[np.ndarray, np.ndarray], user_at_ms: int) -> None:
    reply, user = voices
    echo, starts, opened = run(reply, user, user_at_ms, echo_gain=0.0, stands_down=True)
    assert echo.gate.frames_gated > 10, "else the gate hid nothing and this proves nothing"
    first = starts[0]
    assert first.t_ms - first.voiced_ms >= user_at_ms + 300, "the VAD heard it late (the premise)"
    assert first.onset_ms is not None and abs(first.onset_ms - user_at_ms) <= 40
    # ASR gets the hidden start, with the VAD's padding before it.
    pad = vad_mod.VadOptions().prefix_padding_ms
    assert opened[0].start_sample <= max(0, (user_at_ms - pad + 40) * RATE // 1000)
    at = RATE * user_at_ms // 1000 - opened[0].start_sample
    assert np.abs(opened[0].pcm[at: at + RATE // 10]).max() > 0.05, "the first word is there"


@pytest.mark.parametrize("echo_gain", [0.03, 0.1, 0.3])
@pytest.mark.parametrize("user_at_ms", [600, 800])
def test_the_replys_echo_before_speech_is_not_taken_for_its_start(
        voices: tuple[np.ndarray, np.ndarray], user_at_ms: int, echo_gain: float) -> None:
    # On a speaker (the echo 10-30 dB under the reply, not yet found) the muted sound
    # before a barge-in holds the reply's echo from its first word: it may not move the
    # barge-in's onset back to the reply's start (which would read as going on).
    reply, user = voices
    echo, starts, _ = run(reply, user, user_at_ms, echo_gain, stands_down=False)
    assert echo.gate.frames_gated > 10 and echo.echo_heard is None
    assert starts
    for s in starts:
        assert s.onset_ms is None or s.onset_ms >= user_at_ms - 100


def test_with_the_echo_loud_even_early_speech_keeps_the_vads_onset(
        voices: tuple[np.ndarray, np.ndarray]) -> None:
    # The echo was in the muted sound (from 30 ms), so where the user's own began is not
    # known: the VAD's onset stands, as before (a doubt reads as an interruption).
    reply, user = voices
    _, starts, _ = run(reply, user, 200, echo_gain=0.3, stands_down=False)
    assert starts and starts[0].onset_ms is None
