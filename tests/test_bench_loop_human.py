"""bench/loop_human.py: in a conversation of several recordings each reply is counted for
the recording it answers, a recording answered in parts or spoken over the reply says
so, and its voice-to-voice is its last played reply's. The recordings' list matches the
sdist's transcriptions it names."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

from assistant.loop import event_log as log
from assistant.loop.metrics import compute_metrics
from assistant.replay.scenario import Placed


@pytest.fixture
def loop_human(bench_import: Callable[[str], ModuleType]) -> ModuleType:
    return bench_import("loop_human")


def reply(turn_id: int, started: int, speech_end: int, audio: int | None) -> list[log.Entry]:
    out: list[log.Entry] = [log.ResponseStartedEntry(
        t_ms=started, turn_id=turn_id, user_text=f"turn {turn_id}", prompt_tokens=10,
        prompt_tokens_computed=2, prompt_tokens_reused=8, speculation="hit")]
    if audio is not None:
        out.append(log.AudioStartedEntry(t_ms=audio, turn_id=turn_id, speech_end_ms=speech_end,
                                         endpoint_ms=audio - 10))
    return out


def test_replies_are_counted_for_the_recording_they_answer(loop_human: ModuleType) -> None:
    placed = [Placed("say", "a", 600, 2600), Placed("say", "b", 10_000, 12_000),
              Placed("say", "c", 20_000, 21_000)]
    entries = [
        *reply(1, 2900, 2600, 2900),  # a: answered once, 300 ms
        *reply(2, 10_800, 10_500, None),  # b: a reply in its pause, withdrawn ...
        *reply(3, 12_400, 12_000, 12_450),  # ... then the whole of it, 450 ms
        log.BargeInEntry(t_ms=20_200, turn_id=3, played_ms=7000, reason="speech"),
        *reply(4, 21_560, 21_000, 21_570),  # c: spoken over b's reply, 570 ms
    ]
    turns = compute_metrics(entries, sequence_tokens=0, history_tokens=0).turns
    runs = loop_human._runs(entries, turns, placed, ["a", "b", "c"], "semantic")
    assert [(r.name, r.replies, r.v2v_ms, r.over_reply) for r in runs] == [
        ("a", 1, 300, False), ("b", 2, 450, False), ("c", 1, 570, True)]
    assert runs[1].heard == "turn 2 | turn 3"
    report = loop_human.human_report(runs, [])
    summary = report.blocks[0]
    assert "| semantic | 450 | 546 | 570 | 0/3 |" in summary  # p50 / p90 / max, none over 800


def test_the_recordings_are_the_eleven_the_issue_names(loop_human: ModuleType) -> None:
    import human_speech

    kinds = [r.kind for r in human_speech.RECORDINGS]
    assert (kinds.count("reading"), kinds.count("cards"), kinds.count("command")) == (5, 5, 1)
    assert len({r.member for r in human_speech.RECORDINGS}) == 11
    assert {"four queen of clubs", "five five"} <= {r.text for r in human_speech.RECORDINGS}
