"""bench_serve's waterfalls: every session the factory made is read once, and the table's
p50s count only the turns that reached a stage."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from assistant.loop import event_log as log


class _Backend:
    def __init__(self, entries: list[log.Entry]) -> None:
        self.entries = entries

    def log_entries(self) -> list[log.Entry]:
        return list(self.entries)


def _turn(t0: int, turn_id: int, speculation: str, audio_after: int) -> list[log.Entry]:
    """One answered turn whose speech ended at ``t0`` (decided 300 ms later)."""
    return [log.PauseEntry(t0 + 200, t0),
            log.SpeechStoppedEntry(t0 + 300, t0),
            log.ResponseStartedEntry(t0 + 320, turn_id, "hi", 5, 5, 0, speculation),
            log.AudioStartedEntry(t0 + audio_after, turn_id, t0, t0 + 300)]


def test_each_level_reads_the_sessions_made_since_the_last_and_none_after_stop(
        bench_import: Callable[[str], ModuleType]) -> None:
    falls = bench_import("serve_falls")
    logs = [_turn(1000, 1, "hit", 400), _turn(1000, 1, "miss", 900) + _turn(5000, 2, "hit", 500)]
    made = iter([_Backend(e) for e in logs] + [_Backend(_turn(0, 1, "hit", 450))])
    sessions = falls.SessionLogs(lambda _settings: next(made))
    sessions(None)
    first = sessions.take()
    sessions(None)
    second = sessions.take()
    assert [w.first_audio for w in first] == [400]
    assert [w.first_audio for w in second] == [900, 500]
    assert sessions.take() == []  # read once
    sessions.stop()
    sessions(None)  # made after stop: not kept
    assert sessions.take() == []

    rows = {row[0]: row[1:] for row in falls.p50_rows({1: first, 8: second})}
    assert rows["first_audio"] == ["400", "700"]
    assert rows["endpoint_decided"] == ["300", "300"]
    assert rows["speculation_started"] == ["-", "-"]
    assert rows["speculation hits"] == ["1/1", "1/2"]
    header, slow = falls.slowest_rows(second, count=1)
    assert header == ["turn 1 (miss)"]
    assert dict((r[0], r[1]) for r in slow)["first_audio"] == "900"


def test_a_stage_some_turns_did_not_reach_says_how_many_did(
        bench_import: Callable[[str], ModuleType]) -> None:
    falls = bench_import("serve_falls")
    scored = _turn(1000, 1, "none", 600)
    scored.insert(1, log.AudioEndScoreEntry(1250, 0.9, 50))
    level = falls.SessionLogs(lambda _s: _Backend(scored + _turn(4000, 2, "none", 500)))
    level(None)
    rows = {row[0]: row[1:] for row in falls.p50_rows({2: level.take()})}
    assert rows["audio_end_score"] == ["250 (1/2)"]
    assert rows["first_audio"] == ["550"]
