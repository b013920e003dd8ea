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
    from piper import SynthesisConfig

    # Piper's noise off: the same reply on every run, so what AEC3 makes of it is too.
    parts = [np.asarray(c.audio_float_array, np.float32) for c in piper_voice.synthesize(
        "Sure, I can help with that. The weather tomorrow looks sunny and warm.",
        syn_config=SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0),
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
    options: EchoOptions | None = None,
    stamp_jitter_ms: float = 0.0,
    stall_ms: float = 0.0,
) -> Run:
    """The assistant's reply plays from ``PLAY_AT``; the mic hears it ``delay_ms`` after
    the sink reports it heard (negative: before), ``echo_gain_db`` down. A live sink's
    report comes late (its callback waits for the GIL): by up to ``stamp_jitter_ms`` for
    every chunk, and ``stall_ms`` more for one chunk in 20 (seeded)."""
    clock = VirtualClock(RATE)
    processor = EchoProcessor(options or EchoOptions(mode=mode))  # type: ignore[arg-type]
    rng = np.random.default_rng(7)

    def tap(chunk: AudioChunk) -> None:
        late_ms = rng.uniform(0.0, stamp_jitter_ms) + (stall_ms if rng.uniform() < 0.05 else 0.0)
        late = int(late_ms * chunk.sample_rate / 1000)
        processor.push_reference(AudioChunk(chunk.pcm, chunk.sample_rate, chunk.start_sample + late))

    sink = NullSink(clock, TTS_RATE, tap=tap)
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
    expected_start = 0
    for t in range(0, n - F + 1, F):
        if t == PLAY_AT:
            sink.write(AudioChunk(voices.assistant_22k, TTS_RATE))
        clock.advance(F)  # the sink reports what was heard up to t + F
        chunk = processor.process(AudioChunk(mic[t : t + F], RATE, t))
        assert chunk.start_sample == expected_start  # the output timeline has no holes
        expected_start = chunk.end_sample
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


# -- Live timing: jittery sink stamps, an echo path shorter than the reported latency --

LIVE = dict(reference_jitter_ms=40, aec_lead_ms=20)
"""config.yaml's live settings (``open_live_audio`` applies them)."""
BLOCK = 441  # a 20 ms device buffer at the TTS rate


def _tone(n: int) -> np.ndarray:
    t = np.arange(n) / TTS_RATE
    return (0.5 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)


def test_reference_stays_continuous_when_live_stamps_jitter() -> None:
    rng = np.random.default_rng(3)
    tone = _tone(50 * BLOCK)
    first = 22050
    exact = EchoReference(RATE)
    exact.push(AudioChunk(tone, TTS_RATE, first))
    want = exact.get(16000, 50 * 320)
    placed = {}
    for jitter_ms in (0, 40):
        ref = EchoReference(RATE, jitter_ms=jitter_ms)
        for k in range(50):
            late = 0 if k == 0 else int(rng.uniform(0, 8) * TTS_RATE / 1000)  # up to 8 ms late
            ref.push(AudioChunk(tone[k * BLOCK:(k + 1) * BLOCK], TTS_RATE, first + k * BLOCK + late))
        placed[jitter_ms] = ref.get(16000, 50 * 320)
    # As stamped, the reference is full of gaps and jumps ...
    assert np.max(np.abs(placed[0] - want)) > 0.1
    # ... taken for continuous playback, it is the played audio, sample for sample.
    np.testing.assert_allclose(placed[40], want, atol=1e-5)


def test_reference_follows_the_device_buffers_and_is_never_placed_late() -> None:
    tone = _tone(10 * BLOCK)
    b = BLOCK
    # No resampling (exact samples); stamps may come one buffer (20 ms) late.
    ref = EchoReference(TTS_RATE, keep_ms=10000, jitter_ms=20)

    def push(pcm: np.ndarray, stamp: int) -> None:
        ref.push(AudioChunk(pcm, TTS_RATE, stamp))

    push(tone[:b], 0)
    push(tone[b:b + 300], b + 90)  # 4 ms late, and only partly filled: the queue ran dry
    # Its buffer ended in silence, then two silent buffers: the next one starts at 4 b.
    push(tone[:b], 4 * b + 100)
    got = ref.get(0, 5 * b)
    np.testing.assert_array_equal(got[:b + 300], tone[:b + 300])
    assert not got[b + 300:4 * b].any()
    np.testing.assert_array_equal(got[4 * b:], tone[:b])
    # A stamp 9 ms earlier than that placement: it was late; it moves there.
    push(tone[:b], 5 * b - 200)
    np.testing.assert_array_equal(ref.get(5 * b - 200, b), tone[:b])
    # More than the jitter after a full buffer: playback stopped and resumed.
    push(tone[:b], 6 * b - 200 + 600)
    np.testing.assert_array_equal(ref.get(6 * b + 400, b), tone[:b])
    # After more than half a second of silence: a new start, as stamped.
    push(tone[:b], 7 * b + 400 + TTS_RATE // 2 + 100)
    np.testing.assert_array_equal(ref.get(7 * b + 500 + TTS_RATE // 2, b), tone[:b])
    assert ref.snapped == 2


class _RecordingCanceller:
    """Passes the mic through; remembers the reference each frame came with."""

    def __init__(self) -> None:
        self.references: list[np.ndarray] = []

    def process(self, mic: np.ndarray, reference: np.ndarray) -> np.ndarray:
        self.references.append(reference.copy())
        return mic


def test_aec_lead_takes_the_reference_ahead_and_waits_only_while_it_is_unknown() -> None:
    canceller = _RecordingCanceller()
    opts = EchoOptions(mode="aec", aec_lead_ms=20, aec_align=False)
    processor = EchoProcessor(opts, canceller=canceller)
    mic = np.linspace(-0.5, 0.5, 3200, dtype=np.float32)
    # Nothing plays: every frame goes through at once.
    out = processor.process(AudioChunk(mic[:320], RATE, 0))
    assert (out.start_sample, out.num_samples) == (0, 320)
    # The far end is known up to 1000: a frame whose reference (20 ms = 320 samples
    # ahead) runs past that waits until the mic itself gets there.
    far = np.linspace(0.1, 0.9, 1000 - 320, dtype=np.float32)
    processor.push_reference(AudioChunk(far, RATE, 320))
    steps = []
    for lo in range(320, 1600, 320):
        out = processor.process(AudioChunk(mic[lo:lo + 320], RATE, lo))
        steps.append((out.start_sample, out.num_samples))
    assert steps == [
        (320, 320),  # frames 320 and 480 take the reference up to 960 <= 1000
        (640, 0),  # frame 640 takes 960..1120: not known yet, and the mic is at 960
        (640, 320),  # the mic is at 1280: 640 and 800 go; 960 would take up to 1440
        (960, 640),  # the mic is at 1600; the far end is quiet after 1000
    ]
    got = np.concatenate(canceller.references).astype(np.float32) / 32768
    # The first frames went while nothing played (a reply starting within the lead is
    # then not known to them: the price of not holding the mic when all is quiet).
    assert not got[:320].any()
    np.testing.assert_allclose(got[320:], processor.reference.get(640, 1280), atol=1 / 32768)


@pytest.mark.skipif(importlib.util.find_spec("livekit") is None, reason="livekit is not installed")
def test_aec_cancels_although_the_sinks_stamps_come_late(voices: Voices) -> None:
    # Stamps up to 3 ms late, and one in 20 held up 30 ms more (a callback waiting for
    # the GIL): placed as stamped, the reference jumps and AEC3 keeps re-adapting.
    def run(**live: int) -> Run:
        return simulate(voices, "aec", stamp_jitter_ms=3, stall_ms=30,
                        options=EchoOptions(mode="aec", **live))  # type: ignore[arg-type]

    def reduction_db(r: Run) -> float:
        reply = slice(PLAY_AT + RATE // 2, PLAY_AT + 4 * RATE)
        return level_dbfs(r.mic_in[reply]) - level_dbfs(r.mic_out[reply])

    as_stamped = run(reference_jitter_ms=0)
    assert started(as_stamped) and reduction_db(as_stamped) < 15.0, "else this proves nothing"
    live = run(**LIVE)
    assert started(live) == []
    assert reduction_db(live) > 25.0


@pytest.mark.skipif(importlib.util.find_spec("livekit") is None, reason="livekit is not installed")
def test_aec_lead_cancels_an_echo_that_comes_before_its_reported_time(voices: Voices) -> None:
    # The mic hears the reply 15 ms before the sink says it was heard (latencies
    # reported too long): AEC3 cannot cancel an echo that precedes its reference.
    no_lead = simulate(voices, "aec", delay_ms=-15,
                       options=EchoOptions(mode="aec", aec_align=False))
    assert started(no_lead)
    run = simulate(voices, "aec", delay_ms=-15, options=EchoOptions(mode="aec", **LIVE))
    assert started(run) == []
    tail = slice(PLAY_AT + RATE, PLAY_AT + int(2.5 * RATE))
    assert level_dbfs(run.mic_in[tail]) - level_dbfs(run.mic_out[tail]) > 20.0


@pytest.mark.skipif(importlib.util.find_spec("livekit") is None, reason="livekit is not installed")
def test_aec_hears_a_user_no_louder_than_the_echo(voices: Voices) -> None:
    # Full duplex: the user's peak at the echo's (-20 dBFS reply, 6 dB down the path).
    user_at = PLAY_AT + RATE
    gated = simulate(voices, "gate", user_at=user_at, user_peak_dbfs=-26.0)
    assert all(s.start_sample > user_at + 3200 for s in started(gated)), "the gate must miss it"
    run = simulate(voices, "aec", user_at=user_at, user_peak_dbfs=-26.0, stamp_jitter_ms=10,
                   stall_ms=25, options=EchoOptions(mode="aec", **LIVE))
    s = started(run)
    assert len(s) == 1 and user_at - 1600 <= s[0].start_sample <= user_at + 3200


def test_bad_live_options_are_rejected() -> None:
    with pytest.raises(AudioValueError):
        EchoOptions(mode="aec", aec_lead_ms=-5)
    with pytest.raises(AudioValueError):
        EchoOptions(mode="aec", reference_jitter_ms=-1)



# -- Where the echo really is: measured, and the reference moved there -----------------


def _reduction_db(run: Run, start_s: float, end_s: float) -> float:
    span = slice(PLAY_AT + int(start_s * RATE), PLAY_AT + int(end_s * RATE))
    return level_dbfs(run.mic_in[span]) - level_dbfs(run.mic_out[span])


@pytest.mark.skipif(importlib.util.find_spec("livekit") is None, reason="livekit is not installed")
@pytest.mark.parametrize("delay_ms", [-100, 30, 250])
def test_the_echo_is_found_where_the_mic_hears_it(voices: Voices, delay_ms: int) -> None:
    run = simulate(voices, "aec", delay_ms=delay_ms, stamp_jitter_ms=3,
                   options=EchoOptions(mode="aec", **LIVE))  # type: ignore[arg-type]
    found = run.processor.echo_delay
    assert found is not None and abs(found.lag_ms - delay_ms) <= 3.0, found
    assert run.processor.settled


@pytest.mark.skipif(importlib.util.find_spec("livekit") is None, reason="livekit is not installed")
@pytest.mark.parametrize(("delay_ms", "lead_ms"), [(-60, 122), (400, -338)])
def test_aec_moves_a_misplaced_reference_to_its_echo(
        voices: Voices, delay_ms: int, lead_ms: int) -> None:
    # The devices' reported times put the echo 60 ms before the sink's report (AEC3
    # cannot cancel it at all), or 400 ms after (a Bluetooth speaker's unreported
    # latency: at the end of AEC3's range). The echo is as loud as the reply.
    def run(align: bool) -> Run:
        return simulate(voices, "aec", echo_gain_db=0.0, delay_ms=delay_ms, stamp_jitter_ms=3,
                        options=EchoOptions(mode="aec", aec_align=align, **LIVE))  # type: ignore[arg-type]

    placed = run(False)
    assert started(placed) and _reduction_db(placed, 0.0, 1.0) < 10.0, "else this proves nothing"
    aligned = run(True)
    assert started(aligned) == []
    assert aligned.processor.realigned == 1
    assert abs(aligned.processor.lead_ms - lead_ms) <= 3.0
    assert _reduction_db(aligned, 0.5, 3.5) > 25.0


@pytest.mark.skipif(importlib.util.find_spec("livekit") is None, reason="livekit is not installed")
def test_aec_without_an_echo_settles_and_hears_a_quiet_user(voices: Voices) -> None:
    # Headphones: no echo to find. The half-duplex start ends after SETTLE_WINDOWS of
    # playback; then a user far quieter than the reply (the gate would drop them) is heard.
    user_at = PLAY_AT + 2 * RATE
    run = simulate(voices, "aec", echo_gain_db=-200.0, user_at=user_at, user_peak_dbfs=-30.0,
                   options=EchoOptions(mode="aec", **LIVE))  # type: ignore[arg-type]
    assert run.processor.echo_delay is None and run.processor.settled
    s = started(run)
    assert len(s) == 1 and user_at - 1600 <= s[0].start_sample <= user_at + 3200
    gated = simulate(voices, "gate", echo_gain_db=-200.0, user_at=user_at, user_peak_dbfs=-30.0)
    assert started(gated) == [], "else this proves nothing"
