"""The live-audio fixture: a private PulseAudio server with virtual devices (one per
test session), and short recordings cut from the bundled demo conversation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from audio.virtual_server import VirtualAudioServer, missing_packages
from audio.wav import read_wav, write_wav

DEMO_WAV = Path(__file__).resolve().parents[1] / "data" / "demo_conversation.wav"
"""The user's side of the demo: a question, a request for a story, then "Stop, please.
That is enough." cutting the story off."""


@pytest.fixture(scope="session")
def audio_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VirtualAudioServer]:
    missing = missing_packages()
    if missing:
        pytest.skip("live audio tests need the Debian packages " + " ".join(missing)
                    + " (`make sysdeps` installs them when run as root)")
    with VirtualAudioServer(tmp_path_factory.mktemp("pulse")) as server:
        yield server


def _utterances(pcm: np.ndarray, rate: int) -> list[tuple[int, int]]:
    """(start, end) samples of the demo's utterances (pauses over 1 s separate them)."""
    frame = rate // 100
    loud = np.sqrt(np.mean(np.square(pcm[: pcm.size // frame * frame].reshape(-1, frame)),
                           axis=1)) > 0.01
    spans: list[tuple[int, int]] = []
    for i in np.flatnonzero(loud):
        if spans and i - spans[-1][1] < 100:
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
    return [(a * frame, b * frame) for a, b in spans]


@pytest.fixture(scope="session")
def demo_utterances(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Each utterance of the demo as its own WAV (0.3 s of silence before, 1 s after)."""
    pcm, rate = read_wav(DEMO_WAV)
    pcm = np.asarray(pcm, np.float32)
    out = tmp_path_factory.mktemp("utterances")
    paths = []
    for k, (a, b) in enumerate(_utterances(pcm, rate)):
        clip = np.concatenate([np.zeros(rate * 3 // 10, np.float32), pcm[a:b],
                               np.zeros(rate, np.float32)])
        path = out / f"utterance{k}.wav"
        write_wav(path, clip, rate)
        paths.append(path)
    assert len(paths) == 3, "the demo recording has three utterances"
    return paths
