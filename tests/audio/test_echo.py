"""Echo handling end to end on a virtual clock: the sink's tap feeds the reference, the
mic hears the assistant's own voice (and sometimes a user), the VAD decides."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.echo import EchoOptions, EchoProcessor, EchoReference, level_dbfs
from audio.errors import AudioValueError
from audio.resample import resample
from audio.sinks import NullSink
from audio.vad import SpeechStarted, Vad, VadEvent
from tests.audio.speech_fixtures import (
    RATE,
    espeak_available,
    scale_to_dbfs,
    synth_espeak,
    synth_piper,
)

TTS_RATE = 22050
F = 320
PLAY_AT = 8000  # the assistant starts speaking 0.5 s in


@dataclass(frozen=True)
class Voices:
    assistant_22k: np.ndarray
    """The assistant's reply at the TTS rate (what the sink plays)."""
    user: np.ndarray
    """Another speaker at 16 kHz."""


@pytest.fixture(scope="module")
def voices(piper_voice: Any) -> Voices:
    parts = [np.asarray(c.audio_float_array, np.float32) for c in piper_voice.synthesize(
        "Sure, I can help with that. The weather tomorrow looks sunny and warm."
    )]
    assistant = scale_to_dbfs(np.concatenate(parts), -20.0)
    if espeak_available():
        user = synth_espeak("Stop, wait a moment please.").pcm
    else:
        user = synth_piper(piper_voice, "Stop, wait a moment please.").pcm
    return Voices(assistant, user)


@dataclass
class Run:
    events: list[VadEvent]
    mic_in: np.ndarray
    mic_out: np.ndarray
    processor: EchoProcessor


def simulate(
    voices: Voices,
    mode: str,
    echo_gain_db: float = -6.0,
    delay_ms: int = 30,
    user_at: int | None = None,
    user_peak_dbfs: float = -1.0,
    seconds: float = 6.0,
) -> Run:
    clock = VirtualClock(RATE)
    processor = EchoProcessor(EchoOptions(mode=mode))  # type: ignore[arg-type]
    sink = NullSink(clock, TTS_RATE, tap=processor.push_reference)
    vad = Vad()
    n = int(seconds * RATE)
    mic = np.zeros(n, np.float32)
    heard = resample(voices.assistant_22k, TTS_RATE, RATE).astype(np.float32)
    lo = PLAY_AT + delay_ms * RATE // 1000
    mic[lo : lo + heard.size] += heard[: n - lo] * np.float32(10 ** (echo_gain_db / 20))
    if user_at is not None:
        user = scale_to_dbfs(voices.user, user_peak_dbfs)
        mic[user_at : user_at + user.size] += user[: n - user_at]
    events: list[VadEvent] = []
    out: list[np.ndarray] = []
    for t in range(0, n - F + 1, F):
        if t == PLAY_AT:
            sink.write(AudioChunk(voices.assistant_22k, TTS_RATE))
        clock.advance(F)  # the sink reports what was heard up to t + F
        chunk = processor.process(AudioChunk(mic[t : t + F], RATE, t))
        out.append(np.asarray(chunk.pcm, np.float32))
        events += vad.process(chunk)
    events += vad.flush()
    return Run(events, mic, np.concatenate(out), processor)


def started(run: Run) -> list[SpeechStarted]:
    return [e for e in run.events if isinstance(e, SpeechStarted)]


def test_own_voice_triggers_the_vad_when_echo_handling_is_off(voices: Voices) -> None:
    assert started(simulate(voices, "off")), "the echo alone must look like speech, else the next tests prove nothing"


@pytest.mark.parametrize("delay_ms", [0, 30, 120])
def test_gate_ignores_own_voice_at_a_lower_level(voices: Voices, delay_ms: int) -> None:
    run = simulate(voices, "gate", echo_gain_db=-6.0, delay_ms=delay_ms)
    assert started(run) == []
    assert run.processor.gate.frames_gated > 50


def test_gate_lets_a_clearly_louder_user_barge_in(voices: Voices) -> None:
    user_at = PLAY_AT + RATE  # one second into the assistant's reply
    run = simulate(voices, "gate", user_at=user_at, user_peak_dbfs=-1.0)
    s = started(run)
    assert len(s) == 1
    assert user_at - 1600 <= s[0].start_sample <= user_at + 3200
    assert s[0].detected_sample < user_at + voices.user.size
    assert run.processor.gate.frames_passed_over_echo > 10


def test_gate_is_transparent_when_nothing_is_playing(voices: Voices) -> None:
    opts = EchoOptions(mode="gate")
    processor = EchoProcessor(opts)
    user = scale_to_dbfs(voices.user, -20.0)
    chunk = AudioChunk(user[: 16 * F], RATE, 5000)
    out = processor.process(chunk)
    np.testing.assert_array_equal(out.pcm, chunk.pcm)
    assert out.start_sample == 5000 and processor.gate.frames_gated == 0


def test_reference_is_placed_on_the_mic_timeline_across_rates_and_gaps() -> None:
    ref = EchoReference(RATE)
    t = np.arange(TTS_RATE) / TTS_RATE
    sine = (0.5 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    # Two spans at 22.05 kHz as a sink tap would send them, then one after a gap.
    ref.push(AudioChunk(sine[:4410], TTS_RATE, 22050))
    ref.push(AudioChunk(sine[4410:8820], TTS_RATE, 22050 + 4410))
    ref.push(AudioChunk(sine[:2205], TTS_RATE, 22050 + 8820 + 2205))
    got = ref.get(16000 - 100, 6400 + 1600 + 1600 + 200)
    want = np.zeros_like(got)
    first = resample(sine[:8820], TTS_RATE, RATE)
    want[100 : 100 + first.size] = first
    assert np.max(np.abs(got[150:6300] - want[150:6300])) < 0.02  # QQ quality on a low tone
    assert np.max(np.abs(got[6500:8000])) < 1e-3  # the gap stayed silent
    assert level_dbfs(got[8100:9500]) > -12.0  # the third span landed after the gap


def test_wrong_rate_mic_audio_is_rejected() -> None:
    with pytest.raises(AudioValueError):
        EchoProcessor(EchoOptions(mode="gate")).process(AudioChunk(np.zeros(441, np.float32), 44100))


def test_bad_options_are_rejected() -> None:
    with pytest.raises(AudioValueError):
        EchoOptions(mode="loud")  # type: ignore[arg-type]


@pytest.mark.skipif(importlib.util.find_spec("livekit") is None, reason="livekit is not installed")
def test_aec_removes_the_echo_and_keeps_the_user(voices: Voices) -> None:
    echo_only = simulate(voices, "aec", echo_gain_db=-6.0, delay_ms=30)
    assert started(echo_only) == []
    tail = slice(PLAY_AT + RATE, PLAY_AT + int(2.5 * RATE))  # after the canceller converged
    reduction = level_dbfs(echo_only.mic_in[tail]) - level_dbfs(echo_only.mic_out[tail])
    assert reduction > 20.0, reduction
    user_at = PLAY_AT + RATE
    talk = simulate(voices, "aec", user_at=user_at, user_peak_dbfs=-10.0)
    s = started(talk)
    assert len(s) == 1 and user_at - 1600 <= s[0].start_sample <= user_at + 3200
