"""EchoPresence's rule on synthetic signals: when the gate may stand down, and when not."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from audio.echo_presence import EchoPresence, PresenceOptions

RATE = 16000
FRAME = 160  # 10 ms


class _Reference:
    """The far end: ``playing`` samples of noise at -20 dBFS from 0, then silence."""

    sample_rate = RATE

    def __init__(self, playing: int) -> None:
        self.playing = playing
        self.pcm = (np.random.default_rng(3).standard_normal(playing) * 0.1).astype(np.float32)

    def get(self, start: int, n: int) -> npt.NDArray[np.float32]:
        out = np.zeros(n, np.float32)
        lo, hi = max(start, 0), min(start + n, self.playing)
        if hi > lo:
            out[lo - start:hi - start] = self.pcm[lo:hi]
        return out

    def far_dbfs(self, start: int, n: int) -> float:
        ref = self.get(start, n)
        return 10.0 * float(np.log10(float(np.mean(np.square(ref, dtype=np.float64))) + 1e-12))


def _noise(n: int, dbfs: float, seed: int = 5) -> npt.NDArray[np.float32]:
    return (np.random.default_rng(seed).standard_normal(n) * 10 ** (dbfs / 20)).astype(np.float32)


def _run(mic: npt.NDArray[np.float32], ref: _Reference, chunk: int = 320,
         options: PresenceOptions | None = None) -> list[bool | None]:
    presence = EchoPresence(ref, ref.far_dbfs, options)
    return [presence.push(mic[t:t + chunk], t) for t in range(0, mic.size, chunk)]


def test_quiet_playback_stands_the_gate_down_early_in_the_reply() -> None:
    ref = _Reference(playing=3 * RATE)
    answers = _run(_noise(3 * RATE, -65.0), ref)
    first = answers.index(False)
    # The probe's 150 ms of speech, each frame heard back 200 ms later, at 20 ms a chunk:
    # the answer comes 350 ms into the reply, not 1.5 s.
    o = PresenceOptions()
    assert first == math.ceil((o.max_delay_ms + o.probe_ms) / 20) - 1
    assert all(a is None for a in answers[:first])


def test_without_the_probe_quiet_playback_stands_down_after_settle_ms() -> None:
    ref = _Reference(playing=3 * RATE)
    answers = _run(_noise(3 * RATE, -65.0), ref, options=PresenceOptions(probe_ms=0))
    first = answers.index(False)
    # 1.5 s of playback at 20 ms a chunk: the 75th chunk completes it.
    assert first == PresenceOptions().settle_ms // 20 - 1
    assert all(a is None for a in answers[:first])


def test_a_sound_at_the_start_of_the_reply_leaves_the_answer_to_settle_ms() -> None:
    mic = _noise(3 * RATE, -65.0)
    cough = slice(10 * FRAME, 11 * FRAME)  # 100 ms in (the floor is known by then)
    mic[cough] += (0.05 * np.sin(2 * np.pi * 440 * np.arange(FRAME) / RATE)).astype(np.float32)
    answers = _run(mic, _Reference(playing=3 * RATE))
    assert answers.index(False) == PresenceOptions().settle_ms // 20 - 1


@pytest.mark.parametrize("delay_ms", [0, 60, 120, 190])
@pytest.mark.parametrize("gain_db", [-12.0, -30.0])
def test_an_echo_at_any_delay_the_gate_covers_never_stands_it_down(
        delay_ms: int, gain_db: float) -> None:
    ref = _Reference(playing=2 * RATE)
    mic = _noise(3 * RATE, -65.0)
    delay = delay_ms * RATE // 1000
    mic[delay:delay + ref.playing] += ref.pcm * np.float32(10 ** (gain_db / 20))
    assert False not in _run(mic, ref)


def test_a_new_stretch_of_playback_probes_again() -> None:
    """A cough at the first reply's start spoils its probe; the next reply's decides."""
    ref = _Reference(playing=3 * RATE)
    ref.pcm[RATE // 2:2 * RATE] = 0.0  # the first reply: 0.5 s; the second from 2 s
    mic = _noise(3 * RATE, -65.0)
    cough = slice(10 * FRAME, 11 * FRAME)
    mic[cough] += (0.05 * np.sin(2 * np.pi * 440 * np.arange(FRAME) / RATE)).astype(np.float32)
    answers = _run(mic, ref)
    first = answers.index(False)
    assert 2 * RATE // 320 < first <= (2 * RATE + 400 * RATE // 1000) // 320


def test_no_answer_without_playback() -> None:
    assert set(_run(_noise(3 * RATE, -65.0), _Reference(playing=0))) == {None}


def test_sound_over_more_than_the_share_of_playback_keeps_the_question_open() -> None:
    # Bursts 20 dB over the noise in 10% of the frames (a voice, a keyboard): no answer.
    mic = _noise(3 * RATE, -65.0)
    tone = (0.05 * np.sin(2 * np.pi * 440 * np.arange(FRAME) / RATE)).astype(np.float32)
    for f in range(0, mic.size // FRAME, 10):
        mic[f * FRAME:(f + 1) * FRAME] += tone
    assert set(_run(mic, _Reference(playing=3 * RATE))) == {None}
    # In 3% of the frames (a click now and then) they do not.
    mic = _noise(3 * RATE, -65.0)
    for f in range(0, mic.size // FRAME, 34):
        mic[f * FRAME:(f + 1) * FRAME] += tone
    assert False in _run(mic, _Reference(playing=3 * RATE))


def test_the_echo_itself_is_found_and_kept_for_good() -> None:
    # The far end 12 dB down and 40 ms late in the mic: an echo, whatever comes after.
    ref = _Reference(playing=2 * RATE)
    mic = _noise(4 * RATE, -65.0)
    delay = 40 * RATE // 1000
    mic[delay:delay + ref.playing] += ref.pcm * np.float32(0.25)
    answers = _run(mic, ref)
    assert True in answers and False not in answers
    assert answers[-1] is True
