"""The ASR batcher's queueing, with fake batch runners (no model)."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import numpy as np
import pytest

from audio.asr_batch import BatcherClosed, CallBatcher, _BatchedModel


class Recorder:
    """A batch runner that records each batch and answers ``(key, item * 10)``."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.batches: list[tuple[Hashable, list[Any]]] = []
        self.fail = fail

    def __call__(self, key: Hashable, items: list[Any]) -> list[Any]:
        self.batches.append((key, list(items)))
        if self.fail is not None:
            raise self.fail
        return [(key, item * 10) for item in items]


def _together(batcher: CallBatcher, calls: list[tuple[Hashable, Any]]) -> list[Any]:
    """Each call from its own thread, every thread a caller (`CallBatcher.caller`) before
    any calls, so the batcher sees them all pending together."""
    results: list[Any] = [None] * len(calls)
    inside = threading.Barrier(len(calls))

    def one(i: int) -> None:
        with batcher.caller():
            inside.wait()
            try:
                results[i] = batcher.call(*calls[i])
            except BaseException as exc:
                results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return results


def test_calls_from_several_threads_run_as_one_batch_each_with_its_own_result() -> None:
    run = Recorder()
    batcher = CallBatcher(run, window_ms=60_000)
    try:
        results = _together(batcher, [("k", i) for i in range(4)])
    finally:
        batcher.close()
    assert results == [("k", 0), ("k", 10), ("k", 20), ("k", 30)]
    assert len(run.batches) == 1 and sorted(run.batches[0][1]) == [0, 1, 2, 3]
    assert batcher.stats().calls == 4 and batcher.stats().largest == 4


def test_only_calls_with_the_same_key_share_a_batch_and_max_batch_holds() -> None:
    run = Recorder()
    batcher = CallBatcher(run, max_batch=2, window_ms=60_000)
    try:
        results = _together(batcher, [("a", 1), ("b", 2), ("a", 3), ("a", 4)])
    finally:
        batcher.close()
    assert results == [("a", 10), ("b", 20), ("a", 30), ("a", 40)]
    assert all(len(items) <= 2 for _, items in run.batches)
    assert sorted(i for k, items in run.batches if k == "a" for i in items) == [1, 3, 4]
    assert [items for k, items in run.batches if k == "b"] == [[2]]


def test_a_lone_caller_does_not_wait_for_the_window() -> None:
    run = Recorder()
    batcher = CallBatcher(run, window_ms=60_000)  # a wait would hang the test
    try:
        with batcher.caller():
            assert batcher.call("k", 5) == ("k", 50)
        assert batcher.call("k", 6) == ("k", 60)  # not a caller at all
    finally:
        batcher.close()


def test_a_failure_in_a_batch_goes_to_each_caller() -> None:
    boom = RuntimeError("decoder failed")
    batcher = CallBatcher(Recorder(fail=boom), window_ms=60_000)
    try:
        results = _together(batcher, [("k", i) for i in range(3)])
    finally:
        batcher.close()
    assert results == [boom, boom, boom]


def test_a_wrong_number_of_results_is_an_error_for_each_caller() -> None:
    batcher = CallBatcher(lambda key, items: [1], window_ms=60_000)
    try:
        results = _together(batcher, [("k", i) for i in range(2)])
    finally:
        batcher.close()
    assert all(isinstance(r, RuntimeError) for r in results)


def test_close_wakes_a_waiting_caller_and_refuses_later_calls() -> None:
    release = threading.Event()
    started = threading.Event()

    def run(key: Hashable, items: list[Any]) -> list[Any]:
        started.set()
        release.wait(30)
        return items

    batcher = CallBatcher(run, window_ms=0)
    outcome: list[Any] = []

    def waiting(item: int) -> None:
        try:
            outcome.append(batcher.call("k", item))
        except BatcherClosed as exc:
            outcome.append(exc)

    busy = threading.Thread(target=waiting, args=(1,))
    busy.start()
    assert started.wait(30)  # the batcher thread is inside run(): the next call waits
    queued = threading.Thread(target=waiting, args=(2,))
    queued.start()
    closing = threading.Thread(target=batcher.close)
    closing.start()
    release.set()
    for t in (busy, queued, closing):
        t.join(30)
    assert not any(t.is_alive() for t in (busy, queued, closing))
    assert len(outcome) == 2 and 1 in outcome  # the call already running finishes
    # The queued one, woken by close or run after it, in either order with the first.
    (other,) = [o for o in outcome if o != 1]
    assert other == 2 or isinstance(other, BatcherClosed), outcome
    with pytest.raises(BatcherClosed):
        batcher.call("k", 3)


def test_close_wakes_a_caller_whose_batch_waits_for_others() -> None:
    run = Recorder()
    batcher = CallBatcher(run, window_ms=60_000)
    outcome: list[Any] = []

    def lone() -> None:
        with batcher.caller():
            try:
                outcome.append(batcher.call("k", 1))
            except BatcherClosed as exc:
                outcome.append(exc)

    with batcher.caller():  # a caller that never calls: the batch would wait a minute
        t = threading.Thread(target=lone)
        t.start()
        batcher.close()
        t.join(30)
    assert not t.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], BatcherClosed) and run.batches == []


class _Result:
    def __init__(self, ids: list[int], score: float) -> None:
        self.sequences_ids = [ids]
        self.scores = [score]


class FakeWhisper:
    """CTranslate2's ``generate`` as a greedy decoder would answer it: row ``i`` (its
    encoder output's value) wants ``i`` tokens; ``max_length`` cuts prompt + tokens."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def generate(self, enc: Any, prompts: list[list[int]], max_length: int = 448,
                 **kwargs: Any) -> list[_Result]:
        rows = np.asarray(enc)
        self.calls.append((rows.shape[0], max_length))
        out = []
        for row, prompt in zip(rows, prompts, strict=True):
            wanted = int(row.flat[0])
            n = min(wanted, max_length - len(prompt))
            out.append(_Result(list(range(n)), score=float(max_length if n < wanted else -1)))
        return out


def test_a_row_cut_near_its_own_limit_is_decoded_again_alone() -> None:
    fake = FakeWhisper()
    batched = _BatchedModel(fake, lambda key, item: None, batch_encode=False, sot=7)
    prompt = [7, 8]
    items = [(np.full((1, 2, 3), 3, np.float32), prompt, {"max_length": 100}),
             (np.full((1, 2, 3), 50, np.float32), prompt, {"max_length": 10}),
             (np.full((1, 2, 3), 40, np.float32), prompt, {"max_length": 448})]
    results = batched.run(("generate",), items)
    assert fake.calls == [(3, 448), (1, 10)]  # one batch at the largest limit, one redo
    assert [len(r.sequences_ids[0]) for r in results] == [3, 8, 40]
    assert results[1].scores == [10.0]  # the redo's own result, cut at its own limit
