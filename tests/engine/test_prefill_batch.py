"""Several jobs' prompt chunks in one prefill forward, and finished turns closed together.

On the fake runner: which jobs share a forward (`FakeRunner.prefill_batch_sizes`), what each
computes or reuses, and that every sequence's pages and logits still match a fresh prefill.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from engine import Engine, Priority, SamplingParams
from engine.errors import JobFailedError
from engine.prefill_batch import SHARE_MIN
from engine.runner import PrefillItem
from tests.engine.fake_runner import FakeRunner, assert_cache_matches
from tests.engine.fake_runner import make_engine as make_fake_engine

GREEDY = SamplingParams(max_new_tokens=4, temperature=0.0)


def make_engine(**options: int) -> tuple[Engine, FakeRunner]:
    """A fake engine whose vocabulary is the byte tokenizer's."""
    return make_fake_engine(vocab_size=256, **options)


def prompt(seed: int, length: int) -> list[int]:
    return [(seed * 31 + i * 7) % 250 for i in range(length)]


def run(engine, seqs, prompts, params=GREEDY):  # type: ignore[no-untyped-def]
    jobs = [engine.enqueue(seq, params, prompt_ids=p)
            for seq, p in zip(seqs, prompts, strict=True)]
    while engine.has_work():
        engine.step()
    return jobs


def test_short_prompts_share_one_forward_and_match_separate_prefills() -> None:
    engine, runner = make_engine()
    seqs = [engine.sequence() for _ in range(3)]
    prompts = [prompt(1, 9), prompt(2, 13), prompt(3, 6)]
    jobs = run(engine, seqs, prompts)
    assert runner.prefill_batch_sizes[0] == 3
    assert [job.result.prompt.computed for job in jobs] == [9, 13, 6]
    # The same prompts one at a time give the same tokens.
    alone, _ = make_engine()
    for p, job in zip(prompts, jobs, strict=True):
        with alone.sequence() as seq:
            assert run(alone, [seq], [p])[0].result.token_ids == job.result.token_ids
    assert_cache_matches(engine, runner)


def test_the_token_budget_splits_prompts_across_steps() -> None:
    engine, runner = make_engine(prefill_chunk=10)
    seqs = [engine.sequence() for _ in range(3)]
    jobs = run(engine, seqs, [prompt(1, 6), prompt(2, 6), prompt(3, 6)])
    # 6 + 4 fill the first forward; the rest of the second and the third follow.
    assert runner.prefill_batch_sizes[:2] == [2, 2]
    assert all(job.result.prompt.computed == 6 for job in jobs)
    assert_cache_matches(engine, runner)


def test_a_prompt_that_can_reuse_a_chunk_being_written_waits_for_it() -> None:
    engine, runner = make_engine(page_size=4)
    shared = prompt(7, 24)
    seqs = [engine.sequence() for _ in range(3)]
    jobs = run(engine, seqs, [shared + [1, 2], shared + [3, 4, 5], prompt(9, 10)])
    # The unrelated prompt joins the first forward; the second waits and references the
    # first one's six full pages.
    assert runner.prefill_batch_sizes[0] == 2
    assert [job.result.prompt.computed for job in jobs] == [26, 3, 10]
    assert jobs[1].result.prompt.referenced == 24
    assert_cache_matches(engine, runner)


def test_a_shared_run_shorter_than_share_min_is_computed_in_the_same_forward() -> None:
    engine, runner = make_engine(page_size=64)
    head = prompt(5, SHARE_MIN - 1)
    seqs = [engine.sequence() for _ in range(2)]
    jobs = run(engine, seqs, [head + [1, 2, 3], head + [4, 5, 6]])
    assert runner.prefill_batch_sizes[0] == 2
    assert [job.result.prompt.computed for job in jobs] == [len(head) + 3] * 2
    assert_cache_matches(engine, runner)


def test_live_and_speculative_prompts_do_not_share_a_forward() -> None:
    engine, runner = make_engine()
    live = engine.sequence()
    guess = engine.sequence(priority=Priority.SPECULATIVE)
    run(engine, [guess, live], [prompt(1, 8), prompt(2, 8)])
    assert runner.prefill_batch_sizes[:2] == [1, 1]
    assert_cache_matches(engine, runner)


def test_turns_finishing_together_close_in_one_forward() -> None:
    end_of_turn = (10, 13)
    engine, runner = make_engine()
    seqs = [engine.sequence() for _ in range(4)]
    prompts = [prompt(i, 7 + i) for i in range(4)]
    params = SamplingParams(max_new_tokens=3, temperature=0.0, end_of_turn=end_of_turn)
    jobs = run(engine, seqs, prompts, params)
    # One forward for the prompts, one for the four closings (last token + end_of_turn).
    assert runner.prefill_batch_sizes == [4, 4]
    for seq, p, job in zip(seqs, prompts, jobs, strict=True):
        assert seq.tokens == (*p, *job.result.token_ids, *end_of_turn)
    assert_cache_matches(engine, runner)


class FailingBatches:
    """Wraps a fake runner: `prefill_many` of more than one item fails `failures` times."""

    def __init__(self, runner, failures: int) -> None:  # type: ignore[no-untyped-def]
        self._runner = runner
        self.failures = failures

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._runner, name)

    def prefill_many(self, items: Sequence[PrefillItem]) -> torch.Tensor:
        if len(items) > 1 and self.failures > 0:
            self.failures -= 1
            raise RuntimeError("batched forward failed")
        return self._runner.prefill_many(items)


def test_a_failed_prompt_forward_fails_its_jobs_and_returns_their_pages() -> None:
    engine, runner = make_engine()
    engine._cache.runner = FailingBatches(runner, failures=1)  # type: ignore[assignment]
    seqs = [engine.sequence() for _ in range(2)]
    for seq, p in zip(seqs, [prompt(1, 9), prompt(2, 9)], strict=True):
        engine.enqueue(seq, GREEDY, prompt_ids=p)
    with pytest.raises(JobFailedError) as failure:
        engine.step()
    assert len(failure.value.job_ids) == 2
    assert all(len(seq) == 0 and not seq.page_table for seq in seqs)
    assert_cache_matches(engine, runner)


def test_closings_fall_back_to_one_forward_each_when_the_batched_one_fails() -> None:
    end_of_turn = (10,)
    engine, runner = make_engine()
    seqs = [engine.sequence() for _ in range(3)]
    prompts = [prompt(i, 8) for i in range(3)]
    params = SamplingParams(max_new_tokens=4, temperature=0.0, end_of_turn=end_of_turn)
    jobs = [engine.enqueue(seq, params, prompt_ids=p)
            for seq, p in zip(seqs, prompts, strict=True)]
    engine.step()  # the prompts, together, and a decode step
    assert runner.prefill_batch_sizes == [3] and not any(job.done for job in jobs)
    engine._cache.runner = FailingBatches(runner, failures=1)  # type: ignore[assignment]
    single = runner.prefill_calls
    while engine.has_work():
        engine.step()
    for seq, p, job in zip(seqs, prompts, jobs, strict=True):
        assert job.result is not None
        assert seq.tokens == (*p, *job.result.token_ids, *end_of_turn)
    assert runner.prefill_batch_sizes == [3]  # the closings' batched forward failed
    assert runner.prefill_calls == single + 3  # then each closed with its own
    assert_cache_matches(engine, runner)
