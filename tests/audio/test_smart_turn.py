"""The audio end-of-turn model (Smart Turn v3.2 from the pipecat-ai package) on the
bundled demo conversation (Piper's voice): pauses inside the user's turns sound
unfinished, the turns' ends finished; and on recordings of real people
(tests/data/human): a request's end sounds finished, a reader's comma does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from assistant.app.config import AppConfig
from assistant.app.models import resolve_smart_turn
from audio.errors import ModelLoadError
from audio.smart_turn import COMPLETE_P, SmartTurn
from audio.wav import read_wav

RECORDING = Path(__file__).resolve().parents[1] / "data" / "demo_conversation.wav"
HUMAN = Path(__file__).resolve().parents[1] / "data" / "human"
FRAME = 320  # 20 ms at 16 kHz


@pytest.fixture(scope="module")
def smart_turn(default_config: AppConfig) -> SmartTurn:
    return SmartTurn(resolve_smart_turn(default_config))


def pauses(pcm: np.ndarray) -> list[tuple[int, int]]:
    """(speech end, silence after it) in samples, for each silence of 200 ms or more
    after speech: frames 12 dB over the recording's median level are speech."""
    level = np.array([np.sqrt(np.mean(pcm[i:i + FRAME] ** 2)) + 1e-9
                      for i in range(0, pcm.size - FRAME, FRAME)])
    loud = 20 * np.log10(level) > np.median(20 * np.log10(level)) + 12
    out, i = [], 0
    while i < loud.size:
        if not loud[i]:
            i += 1
            continue
        end = i
        while end < loud.size and loud[end]:
            end += 1
        quiet = end
        while quiet < loud.size and not loud[quiet]:
            quiet += 1
        if quiet - end >= 10:
            out.append((end * FRAME, (quiet - end) * FRAME))
        i = quiet
    return out


def test_pauses_inside_a_turn_sound_unfinished_and_turn_ends_finished(
        smart_turn: SmartTurn) -> None:
    pcm, rate = read_wav(RECORDING)
    assert rate == 16000
    pcm = pcm.astype(np.float32)
    found = pauses(pcm)
    inside = [end for end, gap in found if gap < 300 * 16]  # the speaker went on
    ends = [end for end, gap in found if gap >= 700 * 16]
    assert len(inside) >= 2 and len(ends) >= 2
    # Asked as the pipeline asks: the speech so far and 200 ms of its pause.
    for end in inside:
        assert smart_turn.p_complete(pcm[:end + 200 * 16]) < COMPLETE_P
    for end in ends:
        assert smart_turn.p_complete(pcm[:end + 200 * 16]) > COMPLETE_P


def speech_end(pcm: np.ndarray) -> int:
    """The sample after the last frame 15 dB over the recording's quietest tenth."""
    level = np.array([20 * np.log10(np.sqrt(np.mean(pcm[i:i + FRAME] ** 2)) + 1e-9)
                      for i in range(0, pcm.size - FRAME, FRAME)])
    loud = np.nonzero(level > np.percentile(level, 10) + 15)[0]
    return int(loud[-1] + 1) * FRAME


@pytest.mark.parametrize(("name", "finished"), [
    ("cards-002", True),  # "four, queen of clubs"
    ("goforward", True),  # "go forward ten meters"
    ("librivox-0880", False),  # "he was not an ill disposed young man," (read on)
])
def test_a_persons_request_sounds_finished_and_a_readers_comma_does_not(
        smart_turn: SmartTurn, name: str, finished: bool) -> None:
    pcm, rate = read_wav(HUMAN / f"{name}.wav")
    assert rate == 16000
    end = speech_end(pcm.astype(np.float32))
    assert 0.5 * 16000 < end < pcm.size
    p = smart_turn.p_complete(pcm[:end + 200 * 16].astype(np.float32))
    assert (p > COMPLETE_P) == finished, p


def test_audio_it_cannot_read_gives_nan_and_a_missing_model_a_clear_error(
        smart_turn: SmartTurn, tmp_path: Path) -> None:
    bad = np.zeros(8000, np.float32)
    bad[10] = np.nan
    assert np.isnan(smart_turn.p_complete(bad))
    assert np.isnan(smart_turn.p_complete(np.zeros(0, np.float32)))
    # Longer than the model's 8 s window: the last 8 s are heard.
    assert 0.0 <= smart_turn.p_complete(np.zeros(16000 * 10, np.float32)) <= 1.0
    with pytest.raises(ModelLoadError, match="no Smart Turn model file"):
        SmartTurn(tmp_path / "missing.onnx")
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="cannot load Smart Turn model"):
        SmartTurn(tmp_path / "broken.onnx")
