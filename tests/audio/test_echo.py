"""Echo handling end to end on a virtual clock: the sink's tap feeds the reference, the
mic hears the assistant's own voice (and sometimes a user), the VAD decides."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pytest

from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.echo import EchoOptions, EchoProcessor, EchoReference, level_dbfs
from audio.errors import AudioValueError
from audio.output_timeline import OutputTimeline
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
    report_late_ms: float = 0.0,
    stall_ms: float = 0.0,
    pause_ms: int = 0,
    stamps: Literal["timeline", "reported"] = "timeline",
    noise_dbfs: float | None = None,
    echo_from: int = 0,
) -> Run:
    """The assistant's reply plays from ``PLAY_AT`` (with ``pause_ms`` of silence after
    its first half, as between two synthesised clauses); the mic hears it ``delay_ms``
    after it plays (negative: before), ``echo_gain_db`` down.

    The sink's tap is stamped as a live one: each 20 ms buffer's report of when it is
    heard comes late (its callback waits for the GIL), by up to ``report_late_ms``, and
    ``stall_ms`` more for one in 20 (seeded). ``stamps``: ``timeline`` places the
    buffers on an :class:`OutputTimeline` as :class:`SpeakerSink` does; ``reported``
    stamps each with its own report. ``noise_dbfs``: room noise under everything (seeded);
    ``echo_from``: the mic hears no echo before this sample (headphones unplugged)."""
    clock = VirtualClock(RATE)
    processor = EchoProcessor(options or EchoOptions(mode=mode))  # type: ignore[arg-type]
    rng = np.random.default_rng(7)
    timeline = OutputTimeline()

    def tap(chunk: AudioChunk) -> None:
        late_ms = rng.uniform(0.0, report_late_ms) + (stall_ms if rng.uniform() < 0.05 else 0.0)
        frame = chunk.start_sample  # the stream started at clock time 0
        reported = frame + int(late_ms * chunk.sample_rate / 1000)
        start = timeline.place(frame, reported) if stamps == "timeline" else reported
        processor.push_reference(AudioChunk(chunk.pcm, chunk.sample_rate, start))

    sink = NullSink(clock, TTS_RATE, tap=tap)
    vad = Vad()
    n = int(seconds * RATE)
    mic = np.zeros(n, np.float32)
    reply = voices.assistant_22k
    half = reply.size // 2
    parts = [(PLAY_AT, reply)] if pause_ms == 0 else [
        (PLAY_AT, reply[:half]),
        (PLAY_AT + half * RATE // TTS_RATE // F * F + pause_ms * RATE // 1000 // F * F, reply[half:]),
    ]
    for at, part in parts:
        heard = resample(part, TTS_RATE, RATE).astype(np.float32)
        lo = at + delay_ms * RATE // 1000
        mic[lo : lo + heard.size] += heard[: n - lo] * np.float32(10 ** (echo_gain_db / 20))
    mic[:echo_from] = 0.0
    if noise_dbfs is not None:
        noise = np.random.default_rng(11).standard_normal(n).astype(np.float32)
        mic += noise * np.float32(10 ** (noise_dbfs / 20))
    if user_at is not None:
        user = scale_to_dbfs(voices.user, user_peak_dbfs)
        mic[user_at : user_at + user.size] += user[: n - user_at]
    events: list[VadEvent] = []
    out: list[np.ndarray] = []
    expected_start = 0
    for t in range(0, n - F + 1, F):
        for at, part in parts:
            if t == at:
                sink.write(AudioChunk(part, TTS_RATE))
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


# -- The gate stands down when the speaker does not reach the microphone ----------------


def test_gate_stands_down_on_headphones_and_hears_a_quiet_user(voices: Voices) -> None:
    # No echo: after ~1.5 s of playback the gate stands down, and a user 10 dB under the
    # reply (which the gate would drop whole) is heard at once.
    user_at = PLAY_AT + 2 * RATE
    run = simulate(voices, "gate", echo_gain_db=-200.0, user_at=user_at, user_peak_dbfs=-30.0,
                   noise_dbfs=-65.0)
    assert run.processor.echo_heard is False
    s = started(run)
    assert len(s) == 1 and user_at - 1600 <= s[0].start_sample <= user_at + 3200
    kept = simulate(voices, "gate", echo_gain_db=-200.0, user_at=user_at, user_peak_dbfs=-30.0,
                    noise_dbfs=-65.0, options=EchoOptions(mode="gate", gate_stands_down=False))
    assert started(kept) == [] and kept.processor.echo_heard is None


@pytest.mark.parametrize(("noise_dbfs", "echo_gain_db"), [(None, -6.0), (-60.0, -12.0), (-45.0, 0.0)])
def test_gate_stays_on_while_the_echo_is_heard(voices: Voices, noise_dbfs: float | None,
                                               echo_gain_db: float) -> None:
    args: dict[str, Any] = {"echo_gain_db": echo_gain_db, "noise_dbfs": noise_dbfs}
    assert started(simulate(voices, "off", **args)), "the echo must sound like speech"
    run = simulate(voices, "gate", **args)
    assert run.processor.echo_heard is True
    assert started(run) == [] and run.processor.gate.frames_gated > 50


def test_gate_does_not_stand_down_while_the_user_talks_over_the_first_reply(voices: Voices) -> None:
    # Headphones, but the user talks through the first 1.5 s of playback: loud frames
    # keep the question open (a doubt keeps the gate), and the user, under the reply's
    # level, is not heard.
    run = simulate(voices, "gate", echo_gain_db=-200.0, user_at=PLAY_AT + RATE // 5,
                   user_peak_dbfs=-30.0, seconds=2.2)
    assert run.processor.echo_heard is None and started(run) == []


def test_gate_comes_back_when_an_echo_appears(voices: Voices) -> None:
    # Headphones unplugged 2 s into the reply (the gate stood down at ~1.5 s): the echo
    # is found, the gate is on again and the reply does not interrupt itself.
    assert started(simulate(voices, "off", echo_gain_db=0.0, echo_from=PLAY_AT + 2 * RATE))
    run = simulate(voices, "gate", echo_gain_db=0.0, echo_from=PLAY_AT + 2 * RATE)
    assert run.processor.echo_heard is True and started(run) == []
    assert run.processor.gate.frames_gated > 20


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


# -- Live timing: late and wobbling sink reports, an echo path shorter than reported --

LIVE = dict(aec_lead_ms=20)
"""config.yaml's live setting (``open_live_audio`` applies it)."""


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
def test_aec_cancels_a_reply_resumed_after_a_pause_although_the_reports_come_late(
        voices: Voices) -> None:
    # Reports up to 3 ms late, one in 20 held up 8 ms more (a callback waiting for the
    # GIL), and the reply pauses 1.5 s between its halves (two synthesised clauses).
    # Stamped each as reported, the reference jumps a few ms later now and then; AEC3,
    # locked onto the delay it found, lets the echo through until it finds it again
    # (seen live: a reply's second clause, placed 5 ms later than its first,
    # interrupted the reply).
    def run(stamps: Literal["timeline", "reported"]) -> Run:
        return simulate(voices, "aec", report_late_ms=3, stall_ms=8, pause_ms=1500,
                        stamps=stamps, seconds=8.0,
                        options=EchoOptions(mode="aec", **LIVE))  # type: ignore[arg-type]

    half = voices.assistant_22k.size // 2
    resumed = PLAY_AT + half * RATE // TTS_RATE // F * F + 1500 * RATE // 1000
    # After AEC3's first ~100 ms on the resumed clause, over the next 1.4 s.
    span = slice(resumed + RATE // 5, resumed + int(1.6 * RATE))
    as_reported = run("reported")
    assert started(as_reported), "else this proves nothing"
    on_timeline = run("timeline")
    assert started(on_timeline) == []
    assert level_dbfs(on_timeline.mic_in[span]) - level_dbfs(on_timeline.mic_out[span]) > 20.0


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
    run = simulate(voices, "aec", user_at=user_at, user_peak_dbfs=-26.0, report_late_ms=10,
                   stall_ms=25, options=EchoOptions(mode="aec", **LIVE))
    s = started(run)
    assert len(s) == 1 and user_at - 1600 <= s[0].start_sample <= user_at + 3200


def test_bad_live_options_are_rejected() -> None:
    with pytest.raises(AudioValueError):
        EchoOptions(mode="aec", aec_lead_ms=-5)



# -- Where the echo really is: measured, and the reference moved there -----------------


def _reduction_db(run: Run, start_s: float, end_s: float) -> float:
    span = slice(PLAY_AT + int(start_s * RATE), PLAY_AT + int(end_s * RATE))
    return level_dbfs(run.mic_in[span]) - level_dbfs(run.mic_out[span])


@pytest.mark.skipif(importlib.util.find_spec("livekit") is None, reason="livekit is not installed")
@pytest.mark.parametrize("delay_ms", [-100, 30, 250])
def test_the_echo_is_found_where_the_mic_hears_it(voices: Voices, delay_ms: int) -> None:
    run = simulate(voices, "aec", delay_ms=delay_ms, report_late_ms=3,
                   options=EchoOptions(mode="aec", **LIVE))  # type: ignore[arg-type]
    found = run.processor.echo_delay
    assert found is not None and abs(found.lag_ms - delay_ms) <= 3.0, found
    assert run.processor.settled
    assert run.processor.echo_heard is True  # words over the reply may be its echo


@pytest.mark.skipif(importlib.util.find_spec("livekit") is None, reason="livekit is not installed")
@pytest.mark.parametrize(("delay_ms", "lead_ms"), [(-60, 122), (400, -338)])
def test_aec_moves_a_misplaced_reference_to_its_echo(
        voices: Voices, delay_ms: int, lead_ms: int) -> None:
    # The devices' reported times put the echo 60 ms before the sink's report (AEC3
    # cannot cancel it at all), or 400 ms after (a Bluetooth speaker's unreported
    # latency: at the end of AEC3's range). The echo is as loud as the reply.
    def run(align: bool) -> Run:
        return simulate(voices, "aec", echo_gain_db=0.0, delay_ms=delay_ms, report_late_ms=3,
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
    assert run.processor.echo_heard is None
    s = started(run)
    assert len(s) == 1 and user_at - 1600 <= s[0].start_sample <= user_at + 3200
    gated = simulate(voices, "gate", echo_gain_db=-200.0, user_at=user_at, user_peak_dbfs=-30.0,
                     options=EchoOptions(mode="gate", gate_stands_down=False))
    assert started(gated) == [], "else this proves nothing"
