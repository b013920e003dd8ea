"""bench/stage_time.py: a stage's calls are timed and counted on any thread while the
timer is installed, and the classes are as before once it is removed."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from audio.smart_turn import SmartTurn
from audio.tts import Synthesizer
from bench.stage_time import STAGES, StageTimer


def test_a_stage_call_on_another_thread_is_timed_and_counted(monkeypatch: Any) -> None:
    def slow_p(self: SmartTurn, pcm: Any) -> float:
        time.sleep(0.05)
        return 0.9

    monkeypatch.setattr(SmartTurn, "p_complete", slow_p)
    model = SmartTurn.__new__(SmartTurn)  # no model file needed: the call is replaced
    timer = StageTimer()
    with timer.installed():
        before = timer.snapshot()
        results: list[float] = []
        t = threading.Thread(target=lambda: results.append(model.p_complete(np.zeros(160))))
        t.start()
        t.join()
        spent = timer.since(before, timer.snapshot())
    assert results == [0.9]
    assert spent["smart turn"].calls == 1
    assert 0.04 <= spent["smart turn"].seconds < 1.0
    assert all(spent[s].calls == 0 for s in STAGES if s != "smart turn")


def test_the_wrapped_calls_are_restored_after_use_and_after_an_error() -> None:
    original = (SmartTurn.__dict__["p_complete"], Synthesizer.__dict__["synthesize_span"])
    timer = StageTimer()
    try:
        with timer.installed():
            assert SmartTurn.__dict__["p_complete"] is not original[0]
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert (SmartTurn.__dict__["p_complete"], Synthesizer.__dict__["synthesize_span"]) == original
