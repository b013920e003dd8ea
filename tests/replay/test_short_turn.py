"""The end of a short request (issue #47): its only pause is the end of the turn, so the
speculation starts where the speech stops -- at the silence's onset, on the decode made
there -- not 100 ms later when the silence counts as a pause; the end of the turn adopts
its draft (fakes, virtual clock: the times are the rules' own)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from assistant.loop import event_log as log
from assistant.turns.end_of_turn import EndOfTurnOptions, endpoint_silence_ms
from assistant.turns.options import TurnOptions
from tests.replay.fakes import CountingTranscriber, silence, voice
from tests.replay.test_pipeline_fake import _run


def test_a_short_request_is_drafted_from_the_silence_onset_and_adopted(
        tmp_path: Path) -> None:
    # "Five, five": 600 ms of speech, no pause inside it; speech ends at 900 ms.
    turns = TurnOptions(end_of_turn=EndOfTurnOptions(mode="semantic"))
    r = asyncio.run(_run(np.concatenate([silence(300), voice(600), silence(2000)]), tmp_path,
                         turns, True, CountingTranscriber(), score_end_of_turn=True))
    stopped = r.of(log.SpeechStoppedEntry)[0]
    onset, pause = stopped.speech_end_ms + 100, stopped.speech_end_ms + 200
    assert [p.t_ms for p in r.of(log.PauseEntry)] == [pause]
    (spec,) = r.of(log.SpeculationStartedEntry)
    assert spec.t_ms == onset  # not at the pause
    drafted = r.of(log.SpeculationDraftedEntry)
    assert drafted and drafted[0].t_ms == onset
    assert [e.t_ms for e in r.of(log.PresynthesizedEntry)] == [onset]
    (score,) = r.of(log.EndOfTurnScoreEntry)
    assert score.t_ms == onset
    # The turn ends by the score's silence (set at the pause), not the fixed fallback.
    assert score.p_end is not None
    wait = endpoint_silence_ms(score.p_end, turns.end_of_turn, spec.text)
    assert wait != turns.end_of_turn.fallback_ms and score.silence_ms == wait
    assert 0 <= stopped.t_ms - stopped.speech_end_ms - wait <= 20  # (a 20 ms VAD frame)
    (hit,) = r.of(log.SpeculationHitEntry)
    assert hit.spec_id == spec.spec_id
    started = r.of(log.ResponseStartedEntry)[0]
    assert started.speculation == "hit" and started.prompt_tokens_computed == 0
    assert r.of(log.SpeculationMissEntry) == []


def test_words_replaced_before_the_silence_counts_are_no_miss(tmp_path: Path) -> None:
    # A 120 ms gap between words: a silence onset (100 ms), no pause (200 ms). Its
    # speculation is replaced at the end's onset: cancelled, not counted as a miss.
    turns = TurnOptions(end_of_turn=EndOfTurnOptions(mode="semantic"))
    signal = np.concatenate([silence(300), voice(500), silence(140), voice(500), silence(2000)])
    r = asyncio.run(_run(signal, tmp_path, turns, True, CountingTranscriber(), score_end_of_turn=True))
    specs = r.of(log.SpeculationStartedEntry)
    assert len(specs) == 2 and len(r.of(log.PauseEntry)) == 1
    assert [c.spec_id for c in r.of(log.SpeculationCancelledEntry)] == [specs[0].spec_id]
    assert r.of(log.SpeculationMissEntry) == []
    assert r.result.metrics.speculation_hit_rate == 1.0
