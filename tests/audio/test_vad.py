"""VAD: the pure state machine on synthetic decisions, then the full detector on speech
the tests synthesise (Piper; espeak-ng as a second speaker), noise and clicks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audio.chunk import AudioChunk
from audio.errors import AudioValueError
from audio.vad import (
    PauseOnset,
    ShortPause,
    SpeechResumed,
    SpeechStarted,
    SpeechStopped,
    Vad,
    VadEvent,
    VadOptions,
    VadStateMachine,
)
from tests.audio.speech_fixtures import (
    RATE,
    click,
    espeak_available,
    layout,
    scale_to_dbfs,
    synth_espeak,
    synth_piper,
    white_noise,
)

F = 320  # 20 ms frames at 16 kHz
TOLERANCE = int(0.100 * RATE)  # 100 ms


def run_machine(pattern: str, options: VadOptions | None = None) -> list[VadEvent]:
    """'V' voiced speech, 'u' unvoiced speech, '.' silence; one char per 20 ms frame."""
    machine = VadStateMachine(options or VadOptions())
    events: list[VadEvent] = []
    for i, ch in enumerate(pattern):
        events += machine.step(i * F, ch in "Vu", ch == "V")
    return events + machine.finish(len(pattern) * F)


def kinds(events: list[VadEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


# ------------------------------------------------------------------ state machine


def test_start_needs_min_speech_and_is_back_dated_to_the_onset() -> None:
    assert run_machine("." * 10 + "V" * 5 + "." * 40) == []  # 100 ms < 120 ms
    events = run_machine("." * 10 + "V" * 6 + "." * 40)
    started = events[0]
    assert isinstance(started, SpeechStarted)
    assert started.start_sample == 10 * F
    assert started.detected_sample == 16 * F
    assert started.start_ms == pytest.approx(200.0)


def test_candidate_survives_short_gaps_but_not_long_ones() -> None:
    assert kinds(run_machine("VVV..VVV" + "." * 40))[0] == "SpeechStarted"  # 40 ms gap
    assert run_machine("VVV....VVV" + "." * 40) == []  # 80 ms gap > onset_gap_ms


def test_unvoiced_sound_alone_never_opens_a_turn() -> None:
    assert run_machine("u" * 50 + "." * 40) == []
    assert kinds(run_machine("uuuVVV" + "." * 40))[0] == "SpeechStarted"


def test_short_pause_once_then_resume_then_end_of_turn() -> None:
    pattern = "V" * 20 + "." * 12 + "V" * 10 + "." * 30
    events = run_machine(pattern)
    assert kinds(events) == ["SpeechStarted", "PauseOnset", "ShortPause", "SpeechResumed",
                             "PauseOnset", "ShortPause", "SpeechStopped"]
    onset, pause = events[1:3]
    assert isinstance(onset, PauseOnset) and isinstance(pause, ShortPause)
    assert onset.start_sample == 20 * F and onset.detected_sample == 25 * F  # 100 ms later
    assert pause.start_sample == 20 * F and pause.detected_sample == 30 * F  # 200 ms later
    resumed = events[3]
    assert isinstance(resumed, SpeechResumed) and resumed.start_sample == 32 * F
    stopped = events[-1]
    assert isinstance(stopped, SpeechStopped)
    assert stopped.start_sample == 0 and stopped.end_sample == 42 * F
    assert stopped.detected_sample == 70 * F  # first frame end >= 550 ms after 42 * F


def test_pause_shorter_than_short_pause_emits_only_its_onset() -> None:
    assert kinds(run_machine("V" * 20 + "." * 9 + "V" * 10 + "." * 30)) == [
        "SpeechStarted", "PauseOnset", "PauseOnset", "ShortPause", "SpeechStopped"]
    assert kinds(run_machine("V" * 20 + "." * 4 + "V" * 10 + "." * 30)) == [
        "SpeechStarted", "PauseOnset", "ShortPause", "SpeechStopped"]


def test_pause_onset_waits_for_a_pending_sound_and_can_be_turned_off() -> None:
    # A sound that does not become speech does not end the silence: one onset, dated
    # from the end of the speech, at 100 ms of silence not counting the sound's frames.
    events = run_machine("V" * 20 + "." * 3 + "u" + "." * 30)
    onset = events[1]
    assert isinstance(onset, PauseOnset) and onset.start_sample == 20 * F
    assert kinds(events).count("PauseOnset") == 1
    for off in (0, 200, 300):  # none, or not before the short pause
        opts = VadOptions(pause_onset_ms=off, short_pause_ms=200)
        assert "PauseOnset" not in kinds(run_machine("V" * 20 + "." * 40, opts))


def test_a_sound_in_trailing_silence_delays_but_does_not_prevent_the_end() -> None:
    events = run_machine("V" * 20 + "." * 26 + "u" + "." * 20)
    stopped = events[-1]
    assert isinstance(stopped, SpeechStopped) and stopped.end_sample == 20 * F


def test_end_of_stream_closes_an_open_turn() -> None:
    events = run_machine("V" * 20)
    assert kinds(events) == ["SpeechStarted", "SpeechStopped"]


def test_end_of_turn_is_configurable() -> None:
    opts = VadOptions(end_of_turn_ms=300, short_pause_ms=100)
    events = run_machine("V" * 20 + "." * 40, opts)
    stopped = events[-1]
    assert isinstance(stopped, SpeechStopped) and stopped.detected_sample == 35 * F


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="Vu.", max_size=300))
def test_event_grammar_holds_for_any_decision_sequence(pattern: str) -> None:
    opts = VadOptions()
    events = run_machine(pattern, opts)
    in_turn = paused = False
    onset: int | None = None
    last_detected = -1
    for e in events:
        assert e.detected_sample >= last_detected
        last_detected = e.detected_sample
        assert e.start_sample <= e.detected_sample
        if isinstance(e, SpeechStarted):
            assert not in_turn
            assert e.detected_sample - e.start_sample >= opts.min_speech_ms * RATE // 1000
            in_turn, paused = True, False
        elif isinstance(e, PauseOnset):
            assert in_turn and not paused
            onset = e.start_sample
        elif isinstance(e, ShortPause):
            assert in_turn and not paused
            assert e.start_sample == onset  # an onset always comes first, dated the same
            paused = True
        elif isinstance(e, SpeechResumed):
            assert in_turn and paused
            paused = False
        elif isinstance(e, SpeechStopped):
            assert in_turn and e.start_sample < e.end_sample <= e.detected_sample
            in_turn = False
    assert not in_turn  # finish() always closes


def test_options_are_validated() -> None:
    for bad in [dict(frame_ms=25), dict(aggressiveness=4), dict(backend="x"), dict(sample_rate=22050),
                dict(end_of_turn_ms=100, short_pause_ms=200), dict(min_speech_ms=0)]:
        with pytest.raises(AudioValueError):
            VadOptions(**bad)


def test_wrong_rate_chunk_is_a_clear_error() -> None:
    with pytest.raises(AudioValueError, match="16000 Hz"):
        Vad().process(AudioChunk(np.zeros(441, np.float32), 22050))


class _EverySound:
    """A classifier that calls every frame speech: the energy gates alone decide."""

    def is_speech(self, frame: np.ndarray) -> bool:
        return True

    def reset(self) -> None:
        pass


def _tone(seconds: float, rms_dbfs: float) -> np.ndarray:
    """A 200 Hz tone (voiced: not flat) at exactly ``rms_dbfs`` in every 20 ms frame."""
    t = np.arange(int(seconds * RATE)) / RATE
    return (np.sin(2 * np.pi * 200 * t) * np.sqrt(2) * 10 ** (rms_dbfs / 20)).astype(np.float32)


@pytest.mark.parametrize(("hold_db", "fade_kept"), [(3.0, True), (6.0, False)])
def test_speech_going_on_holds_down_to_the_lower_margin(hold_db: float, fade_kept: bool) -> None:
    """Hysteresis: the quiet end of a word 4.5 dB over the room (a fading vowel in a noisy
    room) continues the speech before it -- with ``hold_margin_db`` at the opening
    margin it was cut, and the pause called in the middle of the word -- while the same
    sound after a gap neither resumes nor opens speech."""
    room, word, fade = -40.0, -20.0, -35.5
    audio, _ = layout([_tone(3.0, room), _tone(0.5, word), _tone(0.4, fade), _tone(1.5, room),
                       _tone(0.4, fade), _tone(1.0, room)])
    vad = Vad(VadOptions(hold_margin_db=hold_db, end_of_turn_ms=550), _EverySound())
    events = feed(vad, audio)
    (turn,) = turns(events)
    word_end = int(3.5 * RATE)
    assert abs(turn[0] - 3 * RATE) <= F
    assert turn[1] == (word_end + int(0.4 * RATE) if fade_kept else word_end)
    assert kinds(events).count("SpeechStarted") == 1 and "SpeechResumed" not in kinds(events)


def test_the_hold_margin_is_validated() -> None:
    with pytest.raises(AudioValueError, match="hold_margin_db"):
        VadOptions(hold_margin_db=7.0)
    with pytest.raises(AudioValueError, match="hold_margin_db"):
        VadOptions(hold_margin_db=-1.0)


# ------------------------------------------------------------------ real audio


@pytest.fixture(scope="module")
def utterances(piper_voice: Any) -> list[np.ndarray]:
    texts = ["Hello there, how are you doing today?", "Set a timer for ten minutes.", "Six sheep sat still."]
    # The same audio every run: with Piper's sampled noise, one run in a CI suite had a
    # breathy onset that silero heard 160 ms late (40 other runs: within 81 ms).
    return [scale_to_dbfs(synth_piper(piper_voice, t, noise=False).pcm, -3.0) for t in texts]


def feed(vad: Vad, audio: np.ndarray, chunk: int = 480) -> list[VadEvent]:
    events: list[VadEvent] = []
    for lo in range(0, audio.size, chunk):
        events += vad.process(AudioChunk(audio[lo : lo + chunk], RATE, lo))
    return events + vad.flush()


def turns(events: list[VadEvent]) -> list[tuple[int, int]]:
    out = []
    start = None
    for e in events:
        if isinstance(e, SpeechStarted):
            start = e.start_sample
        if isinstance(e, SpeechStopped):
            assert start is not None and e.start_sample == start
            out.append((start, e.end_sample))
    return out


@pytest.mark.parametrize("backend", ["webrtc", "silero"])
def test_utterances_separated_by_silence_are_found_within_100ms(utterances: list[np.ndarray], backend: str) -> None:
    audio, truth = layout([0.7, utterances[0], 1.0, utterances[1], 1.0, utterances[2], 0.8])
    found = turns(feed(Vad(VadOptions(backend=backend)), audio))
    assert len(found) == len(truth), (found, truth)
    for (s, e), (ts, te) in zip(found, truth, strict=True):
        assert abs(s - ts) <= TOLERANCE, (backend, s / RATE, ts / RATE)
        assert abs(e - te) <= TOLERANCE, (backend, e / RATE, te / RATE)


def test_speech_started_carries_prefix_padding_audio(utterances: list[np.ndarray]) -> None:
    audio, _ = layout([1.0, utterances[1], 0.8])
    started = [e for e in feed(Vad(), audio) if isinstance(e, SpeechStarted)]
    assert len(started) == 1
    s = started[0]
    assert s.audio_start_sample == s.start_sample - 300 * RATE // 1000
    np.testing.assert_array_equal(s.pcm, audio[s.audio_start_sample : s.detected_sample])


def test_chunk_size_does_not_change_the_events(utterances: list[np.ndarray]) -> None:
    audio, _ = layout([0.5, utterances[0], 0.8])
    a = [(type(e), e.start_sample, e.detected_sample) for e in feed(Vad(), audio, chunk=160)]
    b = [(type(e), e.start_sample, e.detected_sample) for e in feed(Vad(), audio, chunk=1000)]
    assert a == b and a


def test_short_pause_fires_inside_a_turn_before_the_end(utterances: list[np.ndarray]) -> None:
    audio, _ = layout([0.5, utterances[1], 0.35, utterances[2], 1.0])
    events = feed(Vad(), audio)
    # (Gaps inside the words may also reach a pause onset; each pause has one first.)
    assert [k for k in kinds(events) if k != "PauseOnset"] == [
        "SpeechStarted", "ShortPause", "SpeechResumed", "ShortPause", "SpeechStopped"]
    for i, e in enumerate(events):
        if isinstance(e, ShortPause):
            onset = events[i - 1]
            assert isinstance(onset, PauseOnset) and onset.start_sample == e.start_sample


@pytest.mark.parametrize(
    ("backend", "aggressiveness"), [("webrtc", 0), ("webrtc", 1), ("webrtc", 2), ("webrtc", 3), ("silero", 2)]
)
def test_white_noise_at_minus_30_dbfs_is_not_speech(backend: str, aggressiveness: int) -> None:
    noise = white_noise(3.0, -30.0, seed=aggressiveness)
    assert feed(Vad(VadOptions(backend=backend, aggressiveness=aggressiveness)), noise) == []


@pytest.mark.parametrize("backend", ["webrtc", "silero"])
def test_a_100ms_click_is_not_speech(backend: str) -> None:
    impulse = np.zeros(1600, np.float32)
    impulse[0] = 0.9
    audio, _ = layout([0.5, click(100.0), 0.7, impulse, 0.7, click(100.0, peak=0.3, seed=1), 0.5])
    assert feed(Vad(VadOptions(backend=backend)), audio) == []


def test_quiet_noise_between_utterances_does_not_break_detection(utterances: list[np.ndarray]) -> None:
    audio, truth = layout([0.7, utterances[0], 1.0, utterances[2], 0.8])
    audio = audio + white_noise(audio.size / RATE, -50.0, seed=9)
    found = turns(feed(Vad(), audio))
    assert len(found) == 2
    for (s, e), (ts, te) in zip(found, truth, strict=True):
        assert abs(s - ts) <= TOLERANCE and abs(e - te) <= TOLERANCE


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng is not installed")
def test_muted_frames_do_not_reset_the_noise_floor(utterances: list[np.ndarray]) -> None:
    # Room noise; a second of digital silence (the echo gate muted the mic while the
    # assistant spoke); then the user in the same room noise. Counted, the muted frames
    # would pull the noise floor down for a whole window and the noise after the words
    # would pass as more speech, holding the turn open for seconds.
    speech = utterances[1]
    pre, gate = 2 * RATE, RATE
    audio = white_noise(6.0, -45.0, seed=3)
    audio[pre:pre + gate] = 0.0
    at = pre + gate + RATE // 5
    audio[at:at + speech.size] += speech
    vad = Vad(VadOptions())
    (turn,) = turns(feed(vad, audio))
    assert abs(turn[1] - (at + speech.size)) < RATE * 3 // 10, (turn, at + speech.size)
    assert -52.0 < vad.noise_floor_dbfs < -42.0


def test_a_second_speaker_from_espeak_is_detected() -> None:
    u = scale_to_dbfs(synth_espeak("Please call me back tomorrow morning.").pcm, -3.0)
    audio, truth = layout([0.6, u, 1.0])
    found = turns(feed(Vad(), audio))
    assert len(found) == 1
    assert abs(found[0][0] - truth[0][0]) <= TOLERANCE and abs(found[0][1] - truth[0][1]) <= TOLERANCE


def test_a_pause_limit_ends_this_pause_early_and_resets_when_speech_resumes() -> None:
    options = VadOptions(end_of_turn_ms=1600)
    machine = VadStateMachine(options)
    events: list[VadEvent] = []
    pattern = "V" * 20 + "." * 12 + "V" * 10 + "." * 30
    for i, ch in enumerate(pattern):
        if i == 31:
            machine.set_pause_limit(300)  # in the first pause: it resumes at frame 32 anyway
        if i == 52:
            machine.set_pause_limit(250)  # second pause, 200 ms in
        events += machine.step(i * F, ch in "Vu", ch == "V")
    assert kinds(events) == ["SpeechStarted", "PauseOnset", "ShortPause", "SpeechResumed",
                             "PauseOnset", "ShortPause", "SpeechStopped"]
    stopped = events[-1]
    assert isinstance(stopped, SpeechStopped) and stopped.detected_sample == (42 + 13) * F
    # Without a limit the 1600 ms default holds: the stream ends first.
    plain = run_machine("V" * 20 + "." * 12 + "V" * 10 + "." * 30, options)
    assert kinds(plain)[-1] == "SpeechStopped" and plain[-1].detected_sample == 72 * F


def test_held_silence_ends_the_pause_that_much_later_up_to_the_cap() -> None:
    def stopped_at(held_frames: int, cap_frames: int) -> int:
        machine = VadStateMachine(VadOptions(end_of_turn_ms=400))
        for i in range(60):
            if 20 <= i < 20 + held_frames:  # the first frames of the pause were muted
                machine.hold(F, cap_frames * F)
            for e in machine.step(i * F, i < 20, i < 20):
                if isinstance(e, SpeechStopped):
                    return e.detected_sample // F
        raise AssertionError("the turn did not end")

    assert stopped_at(0, 10) == 40  # 400 ms of silence after frame 20
    assert stopped_at(5, 10) == 45  # 100 ms of it held
    assert stopped_at(15, 10) == 50  # held at most 200 ms
