"""The engine gate and the gated dialogue, with stand-ins (no model)."""

from __future__ import annotations

import threading
import time
from typing import Any

from assistant.dialogue.dialogue import ReplyDelta
from assistant.serve.backend.shared_engine import EngineGate, GatedDialogue


class FakeDialogue:
    """Engine work is shared: ``engine_busy`` is what other sessions leave running."""

    def __init__(self) -> None:
        self.engine_busy = False
        self.pending: list[ReplyDelta] = []
        self.inside = 0
        self.max_inside = 0
        self.options = "opts"
        self.order: list[int] = []

    def has_work(self) -> bool:
        return self.engine_busy

    def start_turn(self, turn_id: int, text: str, spec: int | None) -> str:
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        self.order.append(turn_id)
        time.sleep(0.001)
        self.inside -= 1
        return "started"

    def step(self) -> list[Any]:
        out, self.pending = self.pending, []
        return out

    def cut_turn(self, turn_id: int, chars: int, ms: int) -> None:
        return None


def test_a_reply_finished_by_another_sessions_step_is_still_collected() -> None:
    inner = FakeDialogue()
    gated = GatedDialogue(inner, EngineGate())  # type: ignore[arg-type]
    assert not gated.has_work()
    assert gated.start_turn(1, "hi", None) == "started"
    # Another session's worker ran the step that finished our reply: the engine is idle,
    # but our final delta has not been collected yet, so our worker must keep stepping.
    assert gated.has_work()
    assert gated.step() == []
    assert gated.has_work()
    inner.pending = [ReplyDelta(1, "done.", 3, done=True)]
    assert [d.done for d in gated.step()] == [True]
    assert not gated.has_work()
    gated.start_turn(2, "again", None)
    gated.cut_turn(2, 0, 0)  # a barge-in also ends it
    assert not gated.has_work()
    assert gated.options == "opts"  # attributes pass through


def test_gate_serialises_calls_from_many_threads_in_arrival_order() -> None:
    inner = FakeDialogue()
    gate = EngineGate()
    gated = GatedDialogue(inner, gate)  # type: ignore[arg-type]
    gate.__enter__()  # hold the gate while the threads line up
    threads = []
    for k in range(6):
        t = threading.Thread(target=gated.start_turn, args=(k, "", None))
        threads.append(t)
        t.start()
        time.sleep(0.02)  # a fixed arrival order
    gate.__exit__()
    for t in threads:
        t.join(5)
    assert inner.max_inside == 1
    assert inner.order == list(range(6))
    assert gate.try_run(lambda: "free") == "free"
    with gate:
        assert gate.try_run(lambda: "busy") is None
