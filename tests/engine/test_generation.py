"""Generation and scheduling on the fake runner: batching, priorities, cancellation."""

from __future__ import annotations

import threading

import pytest
import torch

from engine import (
    CacheExhaustedError,
    EngineError,
    FinishReason,
    Priority,
    SamplingParams,
)
from engine.errors import JobFailedError
from tests.engine.fake_runner import ByteTokenizer, FakeRunner, assert_cache_matches, make_engine

PS = 4


def greedy_reference(runner: FakeRunner, prompt: list[int], count: int) -> list[int]:
    tokens = list(prompt)
    out = []
    for _ in range(count):
        out.append(int(torch.argmax(runner.reference_logits(tokens))))
        tokens.append(out[-1])
    return out


def run_all(engine) -> None:  # type: ignore[no-untyped-def]
    while engine.has_work():
        engine.step()
        engine.check()


def test_greedy_generation_follows_the_reference_and_closes_the_turn() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=256)
    prompt = [5, 6, 7, 8, 9]
    params = SamplingParams(max_new_tokens=7, end_of_turn=(3, 4))
    with engine.sequence() as seq:
        events = list(seq.generate(params, prompt_ids=prompt))
        expected = greedy_reference(runner, prompt, 7)
        assert [e.token_id for e in events] == expected
        assert [e.index for e in events] == list(range(7))
        assert [e.finished for e in events] == [False] * 6 + [True]
        assert events[-1].finish_reason is FinishReason.LENGTH
        # All 7 generated tokens are in the cache, followed by the end-of-turn ids.
        assert seq.tokens == tuple(prompt + expected + [3, 4])
        assert_cache_matches(engine, runner)
        assert engine.stats().tokens_decoded == 6  # the 7th is written with end_of_turn


def test_concurrent_generations_share_one_decode_call_per_step() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=256)
    prompts = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6, 7], [9, 9]]
    seqs = [engine.sequence() for _ in prompts]
    jobs = [engine.enqueue(s, SamplingParams(max_new_tokens=6), prompt_ids=p)
            for s, p in zip(seqs, prompts, strict=True)]
    run_all(engine)
    # After the three prefills, every step decodes all running sequences together.
    assert max(runner.decode_batch_sizes) == 3
    assert runner.decode_calls == len(runner.decode_batch_sizes)
    assert sum(runner.decode_batch_sizes) == 3 * 5
    for job, prompt in zip(jobs, prompts, strict=True):
        assert job.result is not None
        assert list(job.result.token_ids) == greedy_reference(runner, prompt, 6)
    assert_cache_matches(engine, runner)
    for seq in seqs:
        seq.release()
    assert engine.stats().pages_used == 0


def test_live_jobs_decode_before_speculative_ones() -> None:
    engine, _ = make_engine(page_size=PS, vocab_size=256, max_batch=1)
    spec = engine.sequence(priority=Priority.SPECULATIVE)
    live = engine.sequence()
    spec_job = engine.enqueue(spec, SamplingParams(max_new_tokens=3), prompt_ids=[1, 2])
    live_job = engine.enqueue(live, SamplingParams(max_new_tokens=3), prompt_ids=[3, 4])
    order = []
    while engine.has_work():
        order += [e.job_id for e in engine.step()]
    # The speculative job arrived first, but the live one is prefilled first and holds
    # the only decode slot until it is done.
    assert order[0] == live_job.job_id
    live_events = [i for i, j in enumerate(order) if j == live_job.job_id]
    spec_after_first = [i for i, j in enumerate(order) if j == spec_job.job_id][1:]
    assert max(live_events) < min(spec_after_first)
    spec.release()
    live.release()


def test_prefill_chunks_interleave_with_decode_steps() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=256, prefill_chunk=4)
    with engine.sequence() as a, engine.sequence() as b:
        job_a = engine.enqueue(a, SamplingParams(max_new_tokens=20), prompt_ids=[1, 2, 3])
        engine.step()  # a's prompt and first token
        job_b = engine.enqueue(b, SamplingParams(max_new_tokens=2),
                               prompt_ids=list(range(10, 30)))
        steps_while_b_prefills = 0
        while job_b.state.value == "prefill":
            events = engine.step()
            assert [e.job_id for e in events if e.job_id == job_a.job_id], \
                "decode starved by prefill"
            steps_while_b_prefills += 1
        assert steps_while_b_prefills == 5  # 20 prompt tokens in chunks of 4
        run_all(engine)
        assert job_a.result is not None and job_b.result is not None
        assert job_b.result.prompt.computed == 20
        assert_cache_matches(engine, runner)


def test_cancel_stops_at_once_and_release_frees_pages() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=256)
    seq = engine.sequence()
    job = engine.enqueue(seq, SamplingParams(max_new_tokens=50), prompt_ids=[1, 2, 3])
    for _ in range(6):
        engine.step()
    (event,) = engine.cancel(job)
    assert event.finished and event.finish_reason is FinishReason.CANCELLED
    assert event.token_id == -1
    assert job.done and not engine.has_work()
    assert job.result is not None and job.result.finish_reason is FinishReason.CANCELLED
    # The sequence holds the prompt and every generated token whose K/V was written.
    assert seq.tokens == (1, 2, 3) + job.result.token_ids
    # Each step decoded (the first also prefilled); the last sampled token is pending.
    assert len(job.result.token_ids) == job.result.decode_steps == 6
    assert job.result.sampled_tokens == 7
    assert job.generated[:6] == job.result.token_ids
    assert_cache_matches(engine, runner)
    used = engine.stats().pages_used
    assert used > 0
    seq.release()
    assert engine.stats().pages_used == 0


def test_cancel_from_another_thread_is_honoured_at_the_next_step() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=256)
    with engine.sequence() as seq:
        job = engine.enqueue(seq, SamplingParams(max_new_tokens=50), prompt_ids=[1, 2])
        engine.step()
        thread = threading.Thread(target=job.cancel)
        thread.start()
        thread.join()
        events = engine.step()
        assert [e.finish_reason for e in events] == [FinishReason.CANCELLED]
        assert not engine.has_work()
        assert_cache_matches(engine, runner)


def test_releasing_a_sequence_cancels_its_job_and_frees_its_pages() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=256)
    keep = engine.sequence()
    spec = keep.fork(priority=Priority.SPECULATIVE)
    keep.extend([1, 2, 3])
    job = engine.enqueue(spec, SamplingParams(max_new_tokens=30), prompt_ids=[4, 5, 6, 7, 8])
    for _ in range(4):
        engine.step()
    spec.release()
    assert job.done and job.result is not None
    assert job.result.finish_reason is FinishReason.CANCELLED
    assert engine.stats().pages_used == len(keep.page_table)
    assert_cache_matches(engine, runner)
    keep.release()


def test_closing_the_generate_iterator_cancels_the_job() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=256)
    with engine.sequence() as seq:
        stream = seq.generate(SamplingParams(max_new_tokens=40), prompt_ids=[1, 2, 3])
        first = [next(stream) for _ in range(3)]
        assert [e.index for e in first] == [0, 1, 2]
        stream.close()  # type: ignore[attr-defined]
        assert not engine.has_work()
        assert_cache_matches(engine, runner)


def test_sampling_is_reproducible_per_seed() -> None:
    engine, _ = make_engine(page_size=PS, vocab_size=256)

    def sample(seed: int) -> list[int]:
        with engine.sequence() as seq:
            params = SamplingParams(max_new_tokens=12, temperature=1.0, top_k=50,
                                    top_p=0.9, seed=seed)
            return [e.token_id for e in seq.generate(params, prompt_ids=[7, 7, 7])]

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)


def test_one_job_per_sequence_and_no_generation_from_nothing() -> None:
    engine, _ = make_engine(page_size=PS, vocab_size=256)
    with engine.sequence() as seq:
        with pytest.raises(EngineError, match="empty sequence"):
            list(seq.generate(SamplingParams(max_new_tokens=2)))
        engine.enqueue(seq, SamplingParams(max_new_tokens=2), prompt_ids=[1])
        with pytest.raises(EngineError, match="already has a generation"):
            engine.enqueue(seq, SamplingParams(max_new_tokens=2))
        run_all(engine)


def test_decode_reports_exhaustion_clearly_and_stays_consistent() -> None:
    engine, runner = make_engine(page_size=PS, num_pages=2, vocab_size=256)
    with engine.sequence() as seq:
        job = engine.enqueue(seq, SamplingParams(max_new_tokens=20),
                             prompt_ids=[1, 2, 3, 4, 5, 6])
        with pytest.raises(CacheExhaustedError, match="none of the 2 pages"):
            run_all(engine)
        assert_cache_matches(engine, runner)
        assert len(seq) == 8  # two full pages: the next token has nowhere to go
        engine.cancel(job)
    assert engine.stats().pages_used == 0


def test_generation_after_truncate_recomputes_only_the_last_token() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=256)
    with engine.sequence() as seq:
        list(seq.generate(SamplingParams(max_new_tokens=5), prompt_ids=[1, 2, 3, 4, 5, 6]))
        seq.truncate(6)
        before = runner.prefill_tokens
        copied = engine.stats().tokens_copied
        again = [e.token_id for e in seq.generate(SamplingParams(max_new_tokens=5))]
        assert again == greedy_reference(runner, [1, 2, 3, 4, 5, 6], 5)
        # One token recomputed for the logits. The last sampled token is not computed at
        # the end either: the first run's cut-off page still holds it, so it is copied.
        assert runner.prefill_tokens - before == 1
        assert engine.stats().tokens_copied == copied + 1
        assert_cache_matches(engine, runner)


def test_a_sequence_refuses_edits_while_it_generates() -> None:
    engine, runner = make_engine(page_size=PS, vocab_size=256)
    with engine.sequence() as seq:
        job = engine.enqueue(seq, SamplingParams(max_new_tokens=10), prompt_ids=[1, 2, 3])
        engine.step()
        for edit in (lambda: seq.extend([4]), lambda: seq.truncate(1)):
            with pytest.raises(EngineError, match="generation running"):
                edit()
        with seq.fork() as copy:  # reading is fine
            assert copy.tokens == seq.tokens
        engine.cancel(job)
        seq.truncate(1)
        assert_cache_matches(engine, runner)


def test_a_failing_job_is_named_and_the_other_jobs_of_the_step_go_on() -> None:
    class PoisonTokenizer(ByteTokenizer):
        """Decoding token 66 ('B') raises: only the job that samples it is affected."""

        def decode(self, token_ids: list[int]) -> str:
            if 66 in token_ids:
                raise ValueError("cannot decode token 66")
            return super().decode(token_ids)

    def next_token(tokens: tuple[int, ...]) -> int:
        return 66 if tokens[0] == 9 else 65

    engine, runner = make_engine(page_size=PS, vocab_size=256, next_token=next_token,
                                 tokenizer=PoisonTokenizer())
    with engine.sequence() as good, engine.sequence() as bad:
        ok = engine.enqueue(good, SamplingParams(max_new_tokens=4), prompt_ids=[1, 2])
        doomed = engine.enqueue(bad, SamplingParams(max_new_tokens=4), prompt_ids=[9, 2])
        failures = []
        while engine.has_work():
            try:
                engine.step()
            except JobFailedError as exc:
                failures.append(exc.job_ids)
                engine.cancel(next(j for j in engine.jobs if j.job_id in exc.job_ids))
        assert failures == [(doomed.job_id,)]
        assert ok.result is not None and ok.result.token_ids == (65, 65, 65, 65)
        assert_cache_matches(engine, runner)


def test_repetition_penalty_looks_at_the_sequence_so_a_fork_continues_identically() -> None:
    """The penalty reads the sequence's last ids (prompt included), not the job's own
    tokens, so generating N then N more on a fork equals generating 2N at once."""
    from engine.sampler import penalize

    engine, runner = make_engine(page_size=PS, vocab_size=16)
    params = SamplingParams(max_new_tokens=12, repetition_penalty=4.0, repetition_window=8)
    prompt = [5, 6, 7, 8, 9, 5, 6]
    with engine.sequence() as whole:
        at_once = [e.token_id for e in whole.generate(params, prompt_ids=prompt)]
    half = SamplingParams(max_new_tokens=6, repetition_penalty=4.0, repetition_window=8)
    with engine.sequence() as first:
        head = [e.token_id for e in first.generate(half, prompt_ids=prompt)]
        with first.fork() as second:
            tail = [e.token_id for e in second.generate(half)]
    assert head + tail == at_once
    tokens, expected = list(prompt), []
    for _ in range(12):
        logits = penalize(runner.reference_logits(tokens), tokens[-8:], 4.0)
        expected.append(int(torch.argmax(logits)))
        tokens.append(expected[-1])
    assert at_once == expected
    assert at_once != greedy_reference(runner, prompt, 12)  # the penalty changed the path
