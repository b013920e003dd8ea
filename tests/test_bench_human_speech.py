"""bench/human_speech.py: the held-out voices are apart from issue #47's 11, and a member
of the sdist is read as 16 kHz mono: a raw file as it is, a WAV at another rate
resampled, a span of a file cut before that. Runs on a small tar made here (the real sdist
is fetched only by the bench)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from audio.wav import write_wav


@pytest.fixture
def human_speech(bench_import: Callable[[str], ModuleType]) -> ModuleType:
    return bench_import("human_speech")


def _tone(rate: int, seconds: float, hz: float = 440.0) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _archive(tmp_path: Path, root: str, members: dict[str, bytes]) -> tarfile.TarFile:
    path = tmp_path / "sdist.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(root + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return tarfile.open(path, "r:gz")


def test_held_out_voices_are_not_the_issue_set(human_speech: ModuleType) -> None:
    issue = {r.name for r in human_speech.RECORDINGS}
    other = {r.name for r in human_speech.OTHER_VOICES}
    assert len(issue) == 11 and len(other) == len(human_speech.OTHER_VOICES) >= 8
    assert not issue & other
    assert not {r.member for r in human_speech.RECORDINGS} & {
        r.member for r in human_speech.OTHER_VOICES}
    # The meeting's turns are spans of one file that do not overlap.
    spans = sorted(r.span_s for r in human_speech.OTHER_VOICES if r.span_s is not None)
    assert len(spans) == 3 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    with pytest.raises(ValueError, match="no recording set 'mine'"):
        human_speech.human_recordings(Path("/nonexistent"), which="mine")


def test_members_are_read_as_16k_mono(human_speech: ModuleType, tmp_path: Path) -> None:
    wav_path = tmp_path / "m.wav"
    write_wav(wav_path, _tone(11025, 3.0), 11025)
    raw = (_tone(16000, 0.5) * 32767).astype("<i2").tobytes()
    root = human_speech._ROOT
    archive = _archive(tmp_path, root, {"m.wav": wav_path.read_bytes(), "r.raw": raw})
    rec = human_speech.Recording
    with archive:
        whole = human_speech._member_pcm(archive, rec("w", "m.wav", "", "meeting"))
        part = human_speech._member_pcm(archive, rec("p", "m.wav", "", "meeting",
                                                     span_s=(1.0, 2.5)))
        plain = human_speech._member_pcm(archive, rec("r", "r.raw", "", "command"))
    assert whole.dtype == np.float32 and abs(whole.size - 48_000) <= 1
    assert abs(part.size - 24_000) <= 1  # 1.5 s of it, at 16 kHz
    assert plain.size == 8_000 and np.allclose(plain, _tone(16000, 0.5), atol=1e-4)
    # Resampled, the tone keeps its pitch: its spectrum peaks at 440 Hz.
    peak_hz = np.argmax(np.abs(np.fft.rfft(part))) * 16_000 / part.size
    assert abs(peak_hz - 440) < 2
