"""OutputTimeline: an output stream's frames on the clock, from one anchor."""

from __future__ import annotations

import numpy as np
import pytest

from audio.output_timeline import OutputTimeline

BLOCK = 441  # a 20 ms device buffer at 22.05 kHz


def test_late_and_wobbling_reports_give_one_continuous_timeline() -> None:
    rng = np.random.default_rng(5)
    timeline = OutputTimeline(settle=50)
    truth = 100_000  # where frame 0 is really heard
    placed = []
    for k in range(400):
        # Late by the wait for the GIL (0-2 ms, 12 ms now and then) and wobbling with
        # the host's latency report (+-6 ms, in steps that last a while). The stream
        # plays silence for its first second, then a reply, a pause, a reply.
        late = rng.uniform(0, 44) + (265 if rng.uniform() < 0.05 else 0)
        wobble = 132 * np.sign(np.sin(k / 37.0))
        frame = k * BLOCK
        audible = 50 <= k < 150 or k >= 250
        placed.append(timeline.place(frame, int(truth + frame + late + wobble),
                                     audible=audible) - frame)
    # The anchor holds from the first audible buffer on, through the pause.
    assert len(set(placed[50:])) == 1
    assert abs(placed[-1] - truth) <= 200  # within ~9 ms of the truth (the wobble's size)
    assert timeline.reanchored == 0


def test_the_anchor_is_the_median_of_the_silent_reports_not_a_stalled_one() -> None:
    timeline = OutputTimeline(settle=5)
    reports = [400, 10, 12, 11, 9]  # the first callback stalled 400 samples
    for k, late in enumerate(reports):
        timeline.place(k * BLOCK, 5000 + k * BLOCK + late, audible=False)
    assert timeline.anchor == 5000 + 11
    # Settled: a report 30 ms off moves nothing, silent or not.
    assert timeline.place(5 * BLOCK, 5000 + 5 * BLOCK + 660, audible=False) == 5000 + 11 + 5 * BLOCK
    assert timeline.place(6 * BLOCK, 5000 + 6 * BLOCK - 660) == 5000 + 11 + 6 * BLOCK


def test_audio_that_plays_from_the_first_callback_is_never_moved() -> None:
    timeline = OutputTimeline(settle=50)
    starts = [timeline.place(k * BLOCK, 700 + k * BLOCK + (k * 37) % 90) for k in range(60)]
    assert starts == [700 + k * BLOCK for k in range(60)]  # the first report, then held


def test_an_underflow_moves_the_anchor_later_and_never_earlier() -> None:
    timeline = OutputTimeline(settle=3)
    for k in range(5):
        timeline.place(k * BLOCK, 1000 + k * BLOCK, audible=False)
    assert timeline.anchor == 1000
    # The device ran dry: 50 ms of its own silence, so every later frame plays later.
    gap = 1102
    for k in range(5, 10):
        timeline.place(k * BLOCK, 1000 + gap + k * BLOCK, underflow=(k == 5))
    assert timeline.anchor == 1000 + gap and timeline.reanchored == 1
    # A report after another underflow that reads earlier is wobble, not a rewind.
    for k in range(10, 14):
        timeline.place(k * BLOCK, 1000 + k * BLOCK, underflow=(k == 10), audible=False)
    assert timeline.anchor == 1000 + gap and timeline.reanchored == 2


def test_settle_must_be_positive() -> None:
    with pytest.raises(ValueError):
        OutputTimeline(settle=0)
