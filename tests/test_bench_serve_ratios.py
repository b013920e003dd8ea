"""bench/bench_serve.py's peer: each turn under load is set against the same question
asked alone, so a level's ratio does not depend on which questions its sessions drew."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def bench_serve(bench_import: Callable[[str], ModuleType]) -> ModuleType:
    return bench_import("bench_serve")


def test_sessions_rotate_through_the_questions(bench_serve: ModuleType) -> None:
    assert bench_serve.asks(6, 3, 6)[5] == [5, 0, 1]
    even = Counter(q for session in bench_serve.asks(6, 3, 6) for q in session)
    assert sorted(even) == list(range(6)) and set(even.values()) == {3}
    # 8 sessions draw the first questions more often: a plain p50 ratio would mix that in.
    sessions = bench_serve.asks(8, 3, 6)
    assert sessions[0] == [0, 1, 2] and sessions[7] == [1, 2, 3]
    uneven = Counter(q for session in sessions for q in session)
    assert uneven[1] == 5 and uneven[5] == 3
    assert bench_serve.asks(1, 6, 6) == [[0, 1, 2, 3, 4, 5]]


def test_a_turn_is_set_against_the_same_question_alone(bench_serve: ModuleType) -> None:
    alone = {0: 0.2, 1: 0.4, 2: 1.0}
    # Slow questions under load are no slowdown when they were as slow alone.
    asked = [(2, 1.1), (2, 1.0), (0, 0.4), (1, 0.4), (5, 9.0)]  # 5: never timed alone
    assert bench_serve.slowdown_p50(asked, alone) == pytest.approx(1.05)
    assert bench_serve.slowdown_p50([(5, 1.0)], alone) is None
    assert bench_serve.slowdown_p50([], alone) is None


def test_a_question_alone_is_the_median_of_its_asks(bench_serve: ModuleType) -> None:
    # One slow ask of question 0 (a long end-of-turn wait) does not set its time alone.
    alone = bench_serve.medians([(0, 0.3), (1, 0.5), (0, 1.2), (0, 0.32)])
    assert alone == {0: pytest.approx(0.32), 1: pytest.approx(0.5)}
    assert bench_serve.slowdown_p50([(0, 0.64)], alone) == pytest.approx(2.0)
