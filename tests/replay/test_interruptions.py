"""Tentative interruptions, end to end on the real models: a backchannel over the reply
pauses it and it plays on from the interrupted word; real words cut it for good."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from assistant.loop import event_log as log
from assistant.loop.setup import LoopModels
from assistant.replay.scenario import Say
from tests.replay.conftest import make_config, run_scenario
from tests.replay.test_acceptance import STORY, reply_start_gap


@pytest.mark.parametrize(("said", "voice"), [("Mm-hmm.", "piper"), ("Right.", "espeak")])
def test_a_backchannel_pauses_the_reply_which_then_plays_on(
        loop_models: LoopModels, tmp_path: Path, said: str, voice: Literal["piper", "espeak"]) -> None:
    cfg = make_config(**{"llm.max_new_tokens": 60})
    gap = reply_start_gap(cfg.vad.end_of_turn_ms, 1200)
    run = run_scenario(loop_models, [Say(STORY), Say(said, gap_ms=gap, voice=voice)], tmp_path,
                       cfg=cfg)
    paused = [e for e in run.of("interruption_paused") if isinstance(e, log.InterruptionPausedEntry)]
    resumed = [e for e in run.of("interruption_resumed")
               if isinstance(e, log.InterruptionResumedEntry)]
    assert len(paused) == len(resumed) == 1, [e.type for e in run.entries]
    assert run.of("barge_in") == [] and run.of("truncated") == []
    back = run.scenario.said()[1]
    assert back.start_ms < paused[0].t_ms < back.end_ms
    assert paused[0].t_ms < resumed[0].t_ms
    # It plays on from the start of the word it stopped in (never past what was heard).
    assert paused[0].played_ms - 1000 < resumed[0].resumed_from_ms <= paused[0].played_ms
    assert resumed[0].gap_ms > 0
    # The reply ends whole; the backchannel is in neither the history nor the cache.
    done = [e for e in run.of("response_done") if isinstance(e, log.ResponseDoneEntry)]
    assert len(done) == 1 and not done[0].interrupted
    assert done[0].spoken_ms > paused[0].played_ms
    assert [t["role"] for t in run.turns] == ["system", "user", "assistant"]
    assert run.turns[2]["text"] == done[0].text
    m = run.outcome.result.metrics
    assert m.sequence_matches_history and m.history_text_matches
    # The speaker is quiet during the pause and plays again after the resume.
    assert float(abs(run.heard(paused[0].t_ms + 60, resumed[0].t_ms - 20)).max(initial=0)) < 1e-3
    assert float(abs(run.heard(resumed[0].t_ms + 40, resumed[0].t_ms + 400)).max()) > 1e-2


def test_real_words_over_the_paused_reply_commit_the_cut(loop_models: LoopModels,
                                                         tmp_path: Path) -> None:
    cfg = make_config()
    gap = reply_start_gap(cfg.vad.end_of_turn_ms, 1200)
    run = run_scenario(loop_models, [Say(STORY), Say("Wait, tell me about cats instead.", gap_ms=gap)],
                       tmp_path, cfg=cfg)
    paused = [e for e in run.of("interruption_paused") if isinstance(e, log.InterruptionPausedEntry)]
    committed = [e for e in run.of("interruption_committed")
                 if isinstance(e, log.InterruptionCommittedEntry)]
    barge = [e for e in run.of("barge_in") if isinstance(e, log.BargeInEntry)]
    assert len(paused) == len(committed) == len(barge) == 1
    assert run.of("interruption_resumed") == []
    assert barge[0].t_ms == paused[0].t_ms  # the cut is where playback stopped
    assert committed[0].after_ms <= 1000, committed[0]
    cut = [e for e in run.of("truncated") if isinstance(e, log.TruncatedEntry)]
    assert len(cut) == 1 and cut[0].spoken_ms == paused[0].played_ms
    users = [t["text"] for t in run.turns if t["role"] == "user"]
    assert len(users) == 2 and "cats" in str(users[1]).lower()
    m = run.outcome.result.metrics
    assert m.sequence_matches_history and m.history_text_matches


@pytest.mark.parametrize(("said", "held"), [("Actually, what is the capital of Spain?", False),
                                            ("Hold on.", True)])
def test_an_interruption_is_held_to_the_fixed_silence_only_while_it_is_short(
        loop_models: LoopModels, tmp_path: Path, said: str, held: bool) -> None:
    # "Hold on." over the reply seldom is all the user has to say: its turn ends by the
    # fixed silence at the least. A question of its own ends by its scores, as any turn.
    cfg = make_config()
    gap = reply_start_gap(cfg.vad.end_of_turn_ms, 1200)
    run = run_scenario(loop_models, [Say(STORY), Say(said, gap_ms=gap)], tmp_path, cfg=cfg)
    assert len(run.of("barge_in")) == 1
    stops = [e for e in run.of("speech_stopped")
             if isinstance(e, log.SpeechStoppedEntry) and not e.discarded]
    assert len(stops) == 2
    waited = stops[1].t_ms - stops[1].speech_end_ms
    if held:
        assert waited >= cfg.vad.end_of_turn_ms
    else:
        assert waited < cfg.vad.end_of_turn_ms
    users = [t["text"] for t in run.turns if t["role"] == "user"]
    assert len(users) == 2
    m = run.outcome.result.metrics
    assert m.sequence_matches_history and m.history_text_matches
