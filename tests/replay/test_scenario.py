"""Scenario parts that need no voice: a recorded utterance is placed whole, resampled to
16 kHz mono, at its own level unless a peak is asked for."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np
import pytest

from assistant.replay.scenario import Noise, Recorded, render_scenario
from audio.tts import SpanSynthesizer
from audio.wav import write_wav

NO_VOICE = cast(SpanSynthesizer, None)  # no Say part: the synthesizer is never asked


def tone_wav(path: Path, rate: int, seconds: float, amplitude: float, stereo: bool) -> Path:
    t = np.arange(int(rate * seconds)) / rate
    mono = (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    write_wav(path, np.stack([mono, mono], axis=1) if stereo else mono, rate)
    return path


@pytest.mark.parametrize(("rate", "stereo"), [(16_000, False), (22_050, True), (48_000, False)])
def test_recorded_part_lands_after_its_gap_resampled_at_its_own_level(
        tmp_path: Path, rate: int, stereo: bool) -> None:
    wav = tone_wav(tmp_path / "r.wav", rate, 0.5, 0.25, stereo)
    scenario = render_scenario([Noise("click"), Recorded(wav, "a tone", gap_ms=300)],
                               NO_VOICE, lead_ms=200, tail_ms=100)
    click, rec = scenario.placed
    assert (rec.kind, rec.text) == ("say", "a tone")
    assert rec.start_ms == click.end_ms + 300
    assert abs((rec.end_ms - rec.start_ms) - 500) <= 1
    assert scenario.said() == [rec]
    inside = scenario.pcm[rec.start_ms * 16 + 160: rec.end_ms * 16 - 160]
    assert float(np.max(np.abs(inside))) == pytest.approx(0.25, abs=0.01)
    assert abs(scenario.pcm.size - (rec.end_ms + 100) * 16) <= 16


def test_recorded_part_scaled_to_a_peak_when_asked(tmp_path: Path) -> None:
    wav = tone_wav(tmp_path / "r.wav", 16_000, 0.3, 0.05, False)
    quiet = render_scenario([Recorded(wav)], NO_VOICE, lead_ms=0, tail_ms=0)
    loud = render_scenario([Recorded(wav, peak_dbfs=-6.0)], NO_VOICE, lead_ms=0, tail_ms=0)
    assert float(np.max(np.abs(quiet.pcm))) == pytest.approx(0.05, abs=0.002)
    assert float(np.max(np.abs(loud.pcm))) == pytest.approx(10 ** (-6 / 20), abs=0.01)
