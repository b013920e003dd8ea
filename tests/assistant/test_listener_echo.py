"""The half-duplex gate keeps the VAD from hearing the assistant, but a barge-in's words
must reach ASR whole: the utterance audio is the ungated mic signal.

The gate here never stands down (``gate_stands_down=False``): these echoes are ~34 dB
under the reply, which the gate's own listening rightly takes for no echo within half a
second; what is tested is the gate itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from assistant.speech.listener import (
    EndOfTurn,
    Listener,
    ShortPause,
    UtteranceAudio,
    UtteranceOpened,
)
from audio import vad as vad_mod
from audio.chunk import AudioChunk
from audio.echo import EchoOptions, EchoProcessor
from audio.resample import resample

RATE = 16000


@pytest.fixture(scope="module")
def user_speech(piper_voice_paths: tuple[Path, Path]) -> np.ndarray:
    from piper import PiperVoice

    voice = PiperVoice.load(piper_voice_paths[0], config_path=piper_voice_paths[1])
    pcm = np.concatenate([c.audio_float_array for c in voice.synthesize("Stop, please.")])
    pcm = np.asarray(resample(pcm, voice.config.sample_rate, RATE), np.float32)
    nz = np.flatnonzero(np.abs(pcm) > 1e-3)
    return pcm[nz[0]: nz[-1] + 1]


def run_listener(mode: str, mic: np.ndarray, far_end: np.ndarray) -> tuple[np.ndarray, int]:
    """Feed `mic` while `far_end` plays; return the utterance audio and where it starts."""
    echo = EchoProcessor(EchoOptions(mode=mode, gate_stands_down=False))  # type: ignore[arg-type]
    echo.push_reference(AudioChunk(far_end, RATE, 0))
    listener = Listener(vad_mod.VadOptions(), echo)
    audio: list[np.ndarray] = []
    start = -1
    step = RATE // 50
    for lo in range(0, mic.size, step):
        for out in listener.process(AudioChunk(mic[lo: lo + step], RATE, lo)):
            if isinstance(out, UtteranceOpened):
                audio, start = [out.pcm], out.start_sample
            elif isinstance(out, UtteranceAudio) and start >= 0:
                audio.append(out.pcm)
    assert start >= 0, "the barge-in was not detected"
    return np.concatenate(audio), start


def test_barge_in_onset_reaches_asr_ungated(user_speech: np.ndarray) -> None:
    at = RATE  # the user starts one second into the assistant's reply
    speech = 0.9 * user_speech / np.max(np.abs(user_speech))
    onset = RATE * 150 // 1000
    speech[:onset] *= 0.05  # a soft first syllable: quieter than the far end
    mic = np.zeros(at + speech.size + RATE, np.float32)
    mic[at: at + speech.size] = speech
    rng = np.random.default_rng(0)
    far_end = (0.02 * rng.standard_normal(mic.size)).astype(np.float32)
    mic += 0.02 * far_end  # its echo, well below the far end itself

    got, start = run_listener("gate", mic, far_end)
    lo = at - start
    assert lo >= 0, "the utterance (with its prefix padding) must cover the soft onset"
    expected = mic[start: start + got.size]
    np.testing.assert_allclose(got, expected, atol=1e-6)
    # The soft onset survived the gate (the gated signal zeroes it): compare with its own
    # level, since Piper's sampling noise makes the synthesised onset louder or softer.
    soft = np.abs(speech[:onset]).max()
    assert soft > 0 and np.abs(got[lo: lo + onset]).max() > 0.5 * soft

    # The VAD itself did hear the gated signal: the gate silenced the onset frames.
    echo = EchoProcessor(EchoOptions(mode="gate", gate_stands_down=False))
    echo.push_reference(AudioChunk(far_end, RATE, 0))
    gated = echo.process(AudioChunk(mic, RATE, 0)).pcm
    assert np.abs(np.asarray(gated)[at: at + onset // 2]).max() == 0.0


@pytest.fixture(scope="module")
def stop_then_please(piper_voice_paths: tuple[Path, Path]) -> tuple[np.ndarray, np.ndarray]:
    from piper import PiperVoice

    voice = PiperVoice.load(piper_voice_paths[0], config_path=piper_voice_paths[1])

    def say(text: str) -> np.ndarray:
        pcm = np.concatenate([c.audio_float_array for c in voice.synthesize(text)])
        pcm = np.asarray(resample(pcm, voice.config.sample_rate, RATE), np.float32)
        nz = np.flatnonzero(np.abs(pcm) > 1e-3)
        return 0.5 * pcm[nz[0]: nz[-1] + 1] / np.max(np.abs(pcm))

    return say("Stop."), say("Please do.")


@pytest.mark.parametrize("hold", [True, False])
def test_a_pause_the_gate_made_does_not_end_the_turn(
        stop_then_please: tuple[np.ndarray, np.ndarray], hold: bool) -> None:
    # "Stop." barges in over a reply that stops 100 ms after it; the reply's echo keeps
    # the gate shut for its window (200 ms) after that, over a 150 ms breath and the
    # soft start of "please do". The turn manager asks for a 260 ms endpoint at the pause
    # ("Stop." reads complete). Muted, the breath and what follows read as a long pause:
    # without the hold the turn ends there, and "please do" becomes a turn of its own.
    stop, please = stop_then_please
    at, gap = RATE, RATE * 150 // 1000
    mic = np.zeros(at + stop.size + gap + please.size + RATE, np.float32)
    mic[at: at + stop.size] = stop
    second = at + stop.size + gap
    mic[second: second + please.size] = 0.2 * please  # softer than the far end
    rng = np.random.default_rng(1)
    far_end = (0.02 * rng.standard_normal(at + stop.size + RATE // 10)).astype(np.float32)
    mic[: far_end.size] += 0.02 * far_end  # its echo
    echo = EchoProcessor(EchoOptions(mode="gate", gate_stands_down=False))
    echo.push_reference(AudioChunk(far_end, RATE, 0))
    listener = Listener(vad_mod.VadOptions(), echo, hold_muted_pauses=hold)
    ends: list[EndOfTurn] = []
    step = RATE // 50
    for lo in range(0, mic.size, step):
        for out in listener.process(AudioChunk(mic[lo: lo + step], RATE, lo)):
            if isinstance(out, ShortPause):
                listener.set_pause_limit(260)
            elif isinstance(out, EndOfTurn):
                ends.append(out)
    assert echo.gate.frames_gated > 20, "else this proves nothing"
    if hold:
        assert len(ends) == 1 and ends[0].speech_end_ms * RATE // 1000 > second
    else:
        assert len(ends) == 2 and ends[0].speech_end_ms * RATE // 1000 < second
