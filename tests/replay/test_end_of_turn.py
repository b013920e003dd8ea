"""The semantic end of turn on recorded speech (real models, virtual clock): a thinking
pause mid-sentence is not the end of the turn, a complete question is answered after a
short silence. The fixed 550 ms rule is run beside it on the same audio."""

from __future__ import annotations

from pathlib import Path

import pytest

from assistant.loop import event_log as log
from assistant.loop.setup import LoopModels
from assistant.replay.scenario import Say
from tests.replay.conftest import Run, make_config, run_scenario

pytestmark = pytest.mark.slow

HEAD = "I was wondering how much there might be"
TAIL = "prudently in his power to do for them."


def replay(models: LoopModels, parts: list[Say], tmp: Path, mode: str) -> Run:
    (tmp / mode).mkdir()
    return run_scenario(models, parts, tmp / mode, make_config(**{"vad.end_of_turn": mode}))


def endpoint_delays(run: Run) -> list[int]:
    return [e.t_ms - e.speech_end_ms for e in run.entries
            if isinstance(e, log.SpeechStoppedEntry) and not e.discarded]


def test_a_thinking_pause_mid_sentence_is_one_turn(loop_models: LoopModels,
                                                   tmp_path: Path) -> None:
    parts = [Say(HEAD), Say(TAIL, gap_ms=700)]
    semantic = replay(loop_models, parts, tmp_path, "semantic")
    started = [e for e in semantic.entries if isinstance(e, log.ResponseStartedEntry)]
    assert len(started) == 1, [e.type for e in semantic.entries]
    assert "power" in started[0].user_text.lower()
    assert "wondering" in started[0].user_text.lower()
    scores = [e for e in semantic.entries if isinstance(e, log.EndOfTurnScoreEntry)]
    assert scores and scores[0].p_end is not None and scores[0].silence_ms > 700
    assert semantic.outcome.result.metrics.sequence_matches_history
    # The fixed rule cuts the same audio in two: a reply starts inside the pause.
    fixed = replay(loop_models, parts, tmp_path, "fixed")
    assert len(fixed.of("response_started")) == 2


def test_a_complete_question_is_answered_after_a_short_silence(loop_models: LoopModels,
                                                               tmp_path: Path) -> None:
    parts = [Say("What is the capital of France?")]
    semantic = replay(loop_models, parts, tmp_path, "semantic")
    fixed = replay(loop_models, parts, tmp_path, "fixed")
    (fast,), (slow,) = endpoint_delays(semantic), endpoint_delays(fixed)
    assert fast <= 300 < 550 <= slow, (fast, slow)
    m = semantic.outcome.result.metrics
    assert m.speculation_hit_rate == 1.0 and m.sequence_matches_history
    assert m.voice_to_voice_ms[0] < fixed.outcome.result.metrics.voice_to_voice_ms[0] - 200


def test_the_waterfall_of_a_hit_is_complete_and_ordered(loop_models: LoopModels,
                                                        tmp_path: Path) -> None:
    from assistant.loop.waterfall import STAGES, waterfalls

    run = replay(loop_models, [Say("Which planet do we live on?")], tmp_path, "semantic")
    (w,) = waterfalls(run.entries)
    assert w.speculation == "hit"
    times = [getattr(w, name) for name in STAGES]
    assert None not in times, w
    t = dict(zip(STAGES, times, strict=True))
    assert 0 < t["pause_detected"] <= t["speculation_started"] <= t["end_of_turn_score"]
    assert t["end_of_turn_score"] <= t["endpoint_decided"] <= t["final_transcript"]
    assert t["first_clause_drafted"] <= t["first_clause_synthesised"] <= t["first_audio"]
    assert t["final_transcript"] <= t["reply_started"] <= t["first_audio"]
