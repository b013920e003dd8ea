"""``assistant listen``: VAD events and transcripts for a WAV file the test synthesises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from assistant.app.cli import main
from audio.resample import resample
from audio.wav import write_wav
from tests.audio.speech_fixtures import RATE, layout, scale_to_dbfs, synth_piper

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "config.yaml")


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory, piper_voice_paths: tuple[Path, Path]) -> tuple[Path, list[tuple[int, int]]]:
    """Two utterances with silence around them, written as a 44.1 kHz stereo WAV."""
    from piper import PiperVoice

    onnx, config = piper_voice_paths
    voice = PiperVoice.load(onnx, config_path=config)
    a = scale_to_dbfs(synth_piper(voice, "Set a timer for ten minutes.").pcm, -3.0)
    b = scale_to_dbfs(synth_piper(voice, "Thank you very much.").pcm, -6.0)
    audio, spans = layout([0.6, a, 1.2, b, 0.9])
    stereo_44k = resample(audio, RATE, 44100)
    path = tmp_path_factory.mktemp("listen") / "two turns.wav"
    write_wav(path, np.stack([stereo_44k, stereo_44k], axis=1), 44100)
    return path, spans


def events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_listen_prints_vad_events_with_times_near_the_true_boundaries(
    recording: tuple[Path, list[tuple[int, int]]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, spans = recording
    assert main(["--config", CONFIG, "listen", str(path), "--no-asr", "--json"]) == 0
    evs = events(capsys.readouterr().out)
    starts = [e for e in evs if e["event"] == "speech started"]
    stops = [e for e in evs if e["event"] == "speech stopped"]
    assert len(starts) == len(stops) == 2
    for (lo, hi), start, stop in zip(spans, starts, stops, strict=True):
        assert abs(start["start_ms"] - 1000 * lo / RATE) <= 100
        assert abs(stop["end_ms"] - 1000 * hi / RATE) <= 100
        assert stop["t_ms"] - stop["end_ms"] == pytest.approx(560, abs=20)  # end_of_turn_ms


def test_vad_flags_override_the_config(
    recording: tuple[Path, list[tuple[int, int]]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, spans = recording
    argv = ["--config", CONFIG, "listen", str(path), "--no-asr", "--json", "--end-of-turn-ms", "1500"]
    assert main(argv) == 0
    evs = events(capsys.readouterr().out)
    stops = [e for e in evs if e["event"] == "speech stopped"]
    assert len(stops) == 1  # the 1.2 s gap no longer ends the turn; the end of the file does
    assert abs(stops[0]["start_ms"] - 1000 * spans[0][0] / RATE) <= 100
    assert abs(stops[0]["end_ms"] - 1000 * spans[1][1] / RATE) <= 100
    assert any(e["event"] == "speech resumed" for e in evs)


def test_listen_transcribes_each_turn(
    recording: tuple[Path, list[tuple[int, int]]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = recording
    argv = ["--config", CONFIG, "--set", "asr.partial_interval_ms=1200", "listen", str(path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    finals = [line for line in out.splitlines() if " final " in line]
    assert len(finals) == 2, out
    assert "timer" in finals[0].lower() and "minutes" in finals[0].lower()
    assert "thank you" in finals[1].lower()
    assert "partial" in out and "summary: 2 turn(s)" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["listen", "/nonexistent/x.wav"], "no such file"),
        (["listen", "{wav}", "--end-of-turn-ms", "100"], "end_of_turn_ms"),
        (["listen", "{wav}", "--aggressiveness", "7"], "aggressiveness"),
    ],
)
def test_bad_input_is_one_error_line(
    recording: tuple[Path, list[tuple[int, int]]], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    path, _ = recording
    argv = [a.replace("{wav}", str(path)) for a in argv]
    assert main(["--config", CONFIG, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
