"""The CLI surface: help, config printing, error lines without tracebacks."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.app.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assistant", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


def test_every_command_is_registered_with_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)  # type: ignore[attr-defined]
    for name, command_parser in sub.choices.items():  # type: ignore[attr-defined]
        assert command_parser.description, f"{name} has no description"


def test_config_prints_effective_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "vad.end_of_turn_ms=777", "config", "--json", "vad"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {"vad": data["vad"]} and data["vad"]["end_of_turn_ms"] == 777


def test_bad_config_is_one_line_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("engine:\n  dtype: float8\n")
    proc = run_cli("--config", str(bad), "config")
    assert proc.returncode != 0
    assert proc.stderr.strip().startswith("error: ")
    assert str(bad) in proc.stderr and "engine.dtype" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_models_no_load_lists_three_models() -> None:
    proc = run_cli("models", "--no-load", "--json")
    assert proc.returncode == 0, proc.stderr
    roles = [m["role"] for m in json.loads(proc.stdout)]
    assert roles == ["asr", "tts", "llm"]


def test_sigterm_unwinds_a_command_like_ctrl_c(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import signal
    import time

    import assistant.commands.config as config_command

    unwound: list[bool] = []

    def busy(args: object, cfg: object) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the handler raises here
            return 0
        finally:
            unwound.append(True)

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(config_command, "run", busy)
    assert main(["config"]) == 143
    assert unwound == [True]
    assert capsys.readouterr().err == "terminated\n"
    assert signal.getsignal(signal.SIGTERM) is before  # restored after the command


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_library_progress_bars_are_hidden_only_off_a_terminal() -> None:
    """transformers' "Loading weights" bar: shown at a terminal, not in a log or pipe
    (``make demo > log``, the daemon), and a user's own setting is kept."""
    from assistant.app.logging_setup import hide_library_bars_off_terminal

    piped: dict[str, str] = {}
    hide_library_bars_off_terminal(io.StringIO(), piped)
    assert piped == {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    terminal: dict[str, str] = {}
    hide_library_bars_off_terminal(_Terminal(), terminal)
    assert terminal == {}
    chosen = {"HF_HUB_DISABLE_PROGRESS_BARS": "0"}
    hide_library_bars_off_terminal(io.StringIO(), chosen)
    assert chosen == {"HF_HUB_DISABLE_PROGRESS_BARS": "0"}
