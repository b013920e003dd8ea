"""``assistant replay`` through the CLI: flags, output files, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assistant.app.cli import main
from assistant.loop.event_log import ENTRY_TYPES
from assistant.loop.setup import LoopModels
from assistant.replay.scenario import Say, render_scenario
from audio.wav import read_wav, write_wav

pytestmark = pytest.mark.slow


def test_replay_command_writes_heard_events_and_transcript(
        loop_models: LoopModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Reuse the session's models instead of loading them again.
    monkeypatch.setattr("assistant.loop.setup.load_models", lambda *a, **k: loop_models)
    # The command freezes the heap after loading (not this test process's: see heap.py).
    froze: list[bool] = []

    def freeze() -> int:
        froze.append(True)
        return 0

    monkeypatch.setattr("assistant.app.heap.freeze_loaded", freeze)
    scenario = render_scenario([Say("Name a big animal.")], loop_models.synthesizer)
    wav = tmp_path / "in.wav"
    write_wav(wav, scenario.pcm, scenario.sample_rate)
    heard, events, transcript = tmp_path / "heard.wav", tmp_path / "e.jsonl", tmp_path / "c.json"
    rc = main(["--set", "llm.max_new_tokens=24", "replay", str(wav), "--out", str(heard),
               "--events", str(events), "--transcript", str(transcript)])
    assert rc == 0 and froze == [True]
    out = capsys.readouterr().out
    assert "you:" in out and "assistant:" in out and "voice-to-voice" in out
    pcm, rate = read_wav(heard)
    assert rate == loop_models.synthesizer.sample_rate and abs(pcm).max() > 0.01
    assert len(pcm) * 1000 // rate >= int(scenario.pcm.size * 1000 / scenario.sample_rate) - 50
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert lines and all(isinstance(d["t_ms"], int) and d["type"] in ENTRY_TYPES for d in lines)
    assert [d["t_ms"] for d in lines] == sorted(d["t_ms"] for d in lines)
    doc = json.loads(transcript.read_text())
    assert [t["role"] for t in doc["turns"]] == ["system", "user", "assistant"]
    assert set(doc["turns"][2]) >= {"role", "text", "interrupted", "spoken_ms"}
    metrics = doc["metrics"]
    for key in ("voice_to_voice_ms", "barge_in_stop_ms", "leaked_audio_ms",
                "speculation_hit_rate", "turns", "sequence_tokens", "history_tokens"):
        assert key in metrics
    assert metrics["sequence_tokens"] == metrics["history_tokens"]


def test_replay_command_rejects_bad_input(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "missing.wav")]) == 2
    assert "missing.wav: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not a wav at all")
    assert main(["replay", str(bad)]) == 2
    assert "bad.wav" in capsys.readouterr().err
    good = tmp_path / "ok.wav"
    write_wav(good, [0.0] * 1600, 16000)
    assert main(["replay", str(good), "--out", str(tmp_path / "no" / "dir" / "h.wav")]) == 2
    assert "does not exist" in capsys.readouterr().err
