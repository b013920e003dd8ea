"""The whole loop on recordings of real people (tests/data/human, from the pocketsphinx
sdist's test data; see its README), on the virtual clock: every other replay test speaks
with a synthetic voice.

A person's short request, inner pause and all ("five, [pause] five"), is answered once,
whole, as soon as its scores allow; a reader who stops at a comma sounds unfinished, and
the audio model's veto holds the turn though the words read as a whole sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from assistant.loop import event_log as log
from assistant.loop.setup import LoopModels
from assistant.replay.scenario import Recorded
from tests.replay.conftest import Run, run_scenario, words

HUMAN = Path(__file__).resolve().parents[1] / "data" / "human"


def replay_recording(models: LoopModels, name: str, tmp: Path) -> Run:
    return run_scenario(models, [Recorded(HUMAN / f"{name}.wav")], tmp)


@pytest.mark.parametrize(("name", "heard"), [
    ("cards-002", {"queen", "of"}),
    ("cards-004", {"5"}),
    ("goforward", {"go", "forward"}),
])
def test_a_persons_short_request_is_answered_once_whole_by_its_scores(
        loop_models: LoopModels, tmp_path: Path, name: str, heard: set[str]) -> None:
    run = replay_recording(loop_models, name, tmp_path)
    started = [e for e in run.entries if isinstance(e, log.ResponseStartedEntry)]
    assert len(started) == 1, [e.type for e in run.entries]
    said = words(started[0].user_text)
    assert heard <= set(said), started[0].user_text
    if name == "cards-004":  # "five, five": both, not a turn ended at the inner pause
        assert said.count("5") + said.count("five") == 2, started[0].user_text
    # Ended by the scores (the least silence, a speculation hit), not by the fixed rule's
    # 550 ms nor an audio veto's wait.
    m = run.outcome.result.metrics
    v2v = m.voice_to_voice_ms
    assert len(v2v) == 1 and v2v[0] < run.cfg.vad.end_of_turn_ms, v2v
    assert m.turns[0].speculation == "hit"
    assert m.sequence_matches_history


def test_a_reader_stopping_at_a_comma_is_held_by_the_audio_models_veto(
        loop_models: LoopModels, tmp_path: Path) -> None:
    # "He was not an ill disposed young man," -- the novel's sentence goes on.
    run = replay_recording(loop_models, "librivox-0880", tmp_path)
    text = [e for e in run.entries if isinstance(e, log.EndOfTurnScoreEntry)]
    audio = [e for e in run.entries if isinstance(e, log.AudioEndScoreEntry)]
    assert text and audio
    # The words read as a finished sentence: the text alone would end the turn at once ...
    assert text[-1].p_end is not None and text[-1].p_end >= run.cfg.vad.semantic_p_complete
    # ... but the voice goes on, and the turn waits the audio model's wait.
    assert audio[-1].p_complete is not None and audio[-1].p_complete < 0.5
    v2v = run.outcome.result.metrics.voice_to_voice_ms
    assert len(v2v) == 1 and v2v[0] >= run.cfg.vad.smart_turn_wait_ms, v2v
