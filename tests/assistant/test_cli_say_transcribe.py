"""``assistant say`` / ``assistant transcribe``: real round trip, and one clear line for bad input."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from assistant.app.cli import main
from audio.wav import read_wav, wav_bytes


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str, must_start: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {must_start}"), lines[0]
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.slow
def test_say_to_file_then_transcribe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "hello.wav"
    text = "Hello there. The garden looks beautiful this morning."
    code, _, err = _run(capsys, "say", text, "-o", str(out))
    assert code == 0, err
    pcm, rate = read_wav(out)
    assert rate == 22050 and pcm.ndim == 1 and pcm.shape[0] > rate  # over a second of audio
    assert np.abs(pcm).max() > 0.3

    code, printed, err = _run(capsys, "transcribe", str(out))
    assert code == 0, err
    assert "garden" in printed.lower() and "morning" in printed.lower()

    code, printed, err = _run(capsys, "transcribe", str(out), "--json")
    assert code == 0, err
    doc = json.loads(printed)
    assert doc["file"] == str(out) and "garden" in doc["text"].lower()
    words = [w for s in doc["segments"] for w in s["words"]]
    assert len(words) >= 6
    assert all(0 <= w["start_ms"] <= w["end_ms"] <= doc["duration_ms"] + 20 for w in words)
    assert abs(doc["duration_ms"] - 1000 * pcm.shape[0] / rate) <= 1


def _riff(fmt_tag: int, width: int, data: bytes, declared: int | None = None) -> bytes:
    fmt = struct.pack("<HHIIHH", fmt_tag, 1, 8000, 8000 * width, width, width * 8)
    size = len(data) if declared is None else declared
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", size) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


BAD_FILES = {
    "text.wav": (b"this is not audio\n", "not a RIFF/WAVE file"),
    "truncated.wav": (wav_bytes(np.zeros(1000, np.float32), 16000)[:-500], "500 bytes missing"),
    "empty_audio.wav": (_riff(1, 2, b""), "no audio"),
    "nan.wav": (_riff(3, 4, np.array([0.1, np.nan, 0.2], "<f4").tobytes()), "NaN"),
    "alaw.wav": (_riff(6, 1, b"\x55" * 800), "A-law"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_transcribe_bad_files(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blob, problem = BAD_FILES[name]
    path = tmp_path / name
    path.write_bytes(blob)
    code, out, err = _run(capsys, "transcribe", str(path))
    assert code != 0 and out == ""
    assert problem in _one_error_line(err, f"{path}: ")


def test_transcribe_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.wav"
    code, _, err = _run(capsys, "transcribe", str(path))
    assert code != 0
    assert "no such file" in _one_error_line(err, f"{path}: ")


def test_say_unknown_voice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "say", "hello", "-o", str(tmp_path / "x.wav"), "--voice", "no_such_voice")
    assert code != 0
    assert "no_such_voice" in _one_error_line(err, "")
    missing = tmp_path / "gone.onnx"
    code, _, err = _run(capsys, "say", "hello", "-o", str(tmp_path / "x.wav"), "--voice", str(missing))
    assert code != 0
    assert str(missing) in _one_error_line(err, "")
    assert not (tmp_path / "x.wav").exists()


def test_say_without_an_audio_device_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import fails like a missing PortAudio
    code, _, err = _run(capsys, "say", "hello")
    assert code != 0
    assert "-o" in _one_error_line(err, "cannot play audio")


def test_say_nothing_to_say(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "say", "...", "-o", str(tmp_path / "x.wav"))
    assert code != 0
    assert "nothing to say" in _one_error_line(err, "say: ")
    code, _, err = _run(capsys, "say", "hi", "-o", str(tmp_path / "no" / "dir" / "x.wav"))
    assert code != 0
    assert "does not exist" in _one_error_line(err, "")


class _FakeStream:
    def __init__(self, log: list[tuple[str, int]], samplerate: int, channels: int, dtype: str, device: object) -> None:
        assert (channels, dtype) == (1, "int16")
        self.log = log
        self.log.append(("open", samplerate))

    def start(self) -> None:
        self.log.append(("start", 0))

    def write(self, frames: np.ndarray) -> None:
        assert frames.dtype == np.int16 and frames.ndim == 2
        self.log.append(("write", frames.shape[0]))

    write_available = 4096  # the buffer is always empty: drain returns at once
    latency = 0.0

    def stop(self) -> None:
        self.log.append(("stop", 0))

    def abort(self) -> None:
        self.log.append(("abort", 0))

    def close(self) -> None:
        self.log.append(("close", 0))


@pytest.mark.slow
def test_say_plays_each_sentence_on_the_output_device(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import types

    log: list[tuple[str, int]] = []
    fake = types.SimpleNamespace(
        PortAudioError=RuntimeError,
        query_devices=lambda device=None, kind=None: {"name": "fake"},
        OutputStream=lambda **kw: _FakeStream(log, **kw),
    )
    monkeypatch.setitem(sys.modules, "sounddevice", fake)
    code, _, err = _run(capsys, "say", "One short sentence. And another one.", "--words")
    assert code == 0, err
    writes = [n for what, n in log if what == "write"]
    assert log[0] == ("open", 22050)
    assert max(writes) <= 22050 // 20  # short writes: Ctrl-C is never stuck in one
    assert [what for what, _ in log[-2:]] == ["stop", "close"]  # drained, then stopped
    assert sum(writes) > 22050
