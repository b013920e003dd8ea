"""Engine-level parity on real forwards: a tiny random Llama and the packaged SmolLM2.

Whatever path the cache takes to build a sequence (extend after truncate, a diverging
fork, a prefix referenced from another sequence, a partial page copied), the next-token
logits must equal transformers' full forward over the same ids, and greedy continuations
must be identical.
"""

from __future__ import annotations

import io
import random
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant

from engine import Engine, PrefillStats, SamplingParams, Sequence
from engine.chat_template import ChatTemplate
from engine.loader import runner_from_hf_model
from tests.engine.conftest import TINY_VOCAB
from tests.engine.fake_runner import ByteTokenizer
from tests.engine.test_cache_properties import CacheMachine

TINY_TOL = 1e-4
SMOL_TOL = 1e-3


def hf_next_logits(hf_model: Any, tokens: tuple[int, ...] | list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return hf_model(torch.tensor([list(tokens)])).logits[0, -1].float()


def assert_parity(hf_model: Any, seq: Sequence, tol: float) -> None:
    ours = seq.next_logits()
    ref = hf_next_logits(hf_model, seq.tokens)
    diff = float((ours - ref).abs().max())
    assert diff < tol, f"{seq}: max abs logit diff {diff}"
    assert int(ours.argmax()) == int(ref.argmax())


def hf_greedy(hf_model: Any, prompt: list[int], count: int) -> list[int]:
    with torch.inference_mode():
        out = hf_model.generate(torch.tensor([prompt]), max_new_tokens=count, do_sample=False,
                                min_new_tokens=count, eos_token_id=None, pad_token_id=0)
    return [int(t) for t in out[0, len(prompt):]]


def run_parity_scenarios(engine: Engine, hf_model: Any, a: list[int], b: list[int],
                         tol: float) -> None:
    """`a` and `b`: token lists of 12+ tokens that differ from index 6 on."""
    # Extend after truncate (the cut falls inside a page).
    with engine.sequence() as seq:
        seq.extend(a)
        seq.truncate(7)
        seq.extend(b[7:])
        assert_parity(hf_model, seq, tol)
        engine.check()
    # A fork that diverges from its parent inside a shared partial page.
    with engine.sequence() as parent:
        parent.extend(a[:6])
        with parent.fork() as child:
            child.extend(b[6:])
            parent.extend(a[6:])
            assert_parity(hf_model, parent, tol)
            assert_parity(hf_model, child, tol)
            engine.check()
    # A prefix referenced from another sequence, and a partial page copied.
    with engine.sequence() as first, engine.sequence() as second:
        first.extend(a)
        stats = second.extend(a[:-1] + b[-3:])
        assert stats.referenced > 0 and stats.copied > 0, stats
        assert_parity(hf_model, second, tol)
        engine.check()


# ---- tiny random Llama ----------------------------------------------------------------


@pytest.fixture()
def tiny_engine(tiny_llama: Any) -> Engine:
    runner = runner_from_hf_model(tiny_llama, page_size=4, num_pages=64)
    return Engine(runner, ByteTokenizer(), max_batch=4, prefill_chunk=8)


def test_tiny_llama_cache_paths_match_transformers(tiny_engine: Engine, tiny_llama: Any
                                                   ) -> None:
    rng = random.Random(7)
    a = [rng.randrange(3, TINY_VOCAB) for _ in range(14)]
    b = a[:6] + [rng.randrange(3, TINY_VOCAB) for _ in range(8)]
    run_parity_scenarios(tiny_engine, tiny_llama, a, b, TINY_TOL)


def test_tiny_llama_batched_greedy_64_matches_generate(tiny_engine: Engine, tiny_llama: Any
                                                       ) -> None:
    rng = random.Random(8)
    shared = [rng.randrange(3, TINY_VOCAB) for _ in range(9)]
    prompts = [shared + [rng.randrange(3, TINY_VOCAB) for _ in range(n)] for n in (2, 5, 7)]
    seqs = [tiny_engine.sequence() for _ in prompts]
    jobs = [tiny_engine.enqueue(s, SamplingParams(max_new_tokens=64), prompt_ids=p)
            for s, p in zip(seqs, prompts, strict=True)]
    while tiny_engine.has_work():
        tiny_engine.step()
    tiny_engine.check()
    assert jobs[1].result is not None and jobs[1].result.prompt.referenced == 8
    for job, prompt in zip(jobs, prompts, strict=True):
        assert job.result is not None
        assert list(job.result.token_ids) == hf_greedy(tiny_llama, prompt, 64)
    for seq in seqs:
        seq.release()


def test_tiny_llama_prompts_prefilled_together_match_generate(tiny_llama: Any) -> None:
    """Unrelated prompts share one prefill forward, and the turns that end together close
    in one (`PagedRunner.prefill_many`): every continuation is still transformers'."""
    runner = runner_from_hf_model(tiny_llama, page_size=4, num_pages=64, eos_token_ids=())
    engine = Engine(runner, ByteTokenizer(), max_batch=4, prefill_chunk=32)
    batches: list[list[int]] = []
    prefill_many = runner.prefill_many

    def recorded(items: Any) -> torch.Tensor:
        batches.append([len(item.token_ids) for item in items])
        return prefill_many(items)

    runner.prefill_many = recorded  # type: ignore[method-assign]
    rng = random.Random(9)
    prompts = [[rng.randrange(3, TINY_VOCAB) for _ in range(n)] for n in (5, 9, 14)]
    seqs = [engine.sequence() for _ in prompts]
    params = SamplingParams(max_new_tokens=16, end_of_turn=(7,))
    jobs = [engine.enqueue(s, params, prompt_ids=p) for s, p in zip(seqs, prompts, strict=True)]
    while engine.has_work():
        engine.step()
    assert batches == [[5, 9, 14], [2, 2, 2]]  # the prompts; the closings
    for seq, job, prompt in zip(seqs, jobs, prompts, strict=True):
        assert job.result is not None
        assert list(job.result.token_ids) == hf_greedy(tiny_llama, prompt, 16)
        assert_parity(tiny_llama, seq, TINY_TOL)  # the closed turn's K/V is right
        seq.release()
    engine.check()


class RealCacheMachine(CacheMachine):
    """The fake-runner property machine on a real forward: logits vs a fresh prefill."""

    def __init__(self, hf_model: Any) -> None:
        super().__init__()
        # No end-of-sequence id: the machine's rules expect exactly `count` tokens, and a
        # random model's greedy pick is sometimes its EOS id.
        runner = runner_from_hf_model(hf_model, page_size=3, num_pages=24, eos_token_ids=())
        # One page holding all the 24 x 3 slots the machine's sequences can fill.
        self.fresh = runner_from_hf_model(hf_model, page_size=24 * 3, num_pages=1)
        self.engine = Engine(runner, ByteTokenizer(), max_batch=3, prefill_chunk=5)

    @invariant()
    def consistent(self) -> None:  # replaces the fake-runner invariant
        self.engine.check()
        for seq in self.engine.sequences():
            if len(seq) and seq._logits is not None:
                fresh = self.fresh.prefill([0], 0, list(seq.tokens))[0]
                assert float((seq._logits - fresh).abs().max()) < TINY_TOL, seq


def test_tiny_llama_random_operations_match_a_fresh_prefill(tiny_llama: Any) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(lambda: RealCacheMachine(tiny_llama),  # type: ignore[arg-type]
                              settings=settings(max_examples=6, stateful_step_count=15,
                                                deadline=None, suppress_health_check=[
                                                    HealthCheck.filter_too_much]))


# ---- SmolLM2 ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol(llm_dir: Any) -> tuple[Engine, Any]:
    import transformers

    hf_model = transformers.AutoModelForCausalLM.from_pretrained(
        str(llm_dir), local_files_only=True, dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(llm_dir), local_files_only=True)
    runner = runner_from_hf_model(hf_model, page_size=16, num_pages=256,
                                  eos_token_ids=(tokenizer.eos_token_id,))
    return Engine(runner, tokenizer, max_batch=4, prefill_chunk=64), hf_model


@pytest.mark.slow
def test_smollm2_cache_paths_match_transformers(smol: tuple[Engine, Any]) -> None:
    engine, hf_model = smol
    tok = engine.tokenizer
    a = tok.encode("The quick brown fox jumps over the lazy dog near the river bank today",
                   add_special_tokens=False)
    b = a[:6] + tok.encode(" while the cat sleeps on a warm mat by the fire",
                           add_special_tokens=False)
    assert len(a) >= 12 and len(b) >= 12
    # Pages of 16 are too long for these prompts: use a 4-token-page engine on the same
    # weights so every path crosses page boundaries.
    small = Engine(runner_from_hf_model(hf_model, page_size=4, num_pages=64), tok)
    run_parity_scenarios(small, hf_model, a, b, SMOL_TOL)


@pytest.mark.slow
def test_smollm2_greedy_64_after_reused_prefix_matches_generate(smol: tuple[Engine, Any]
                                                                ) -> None:
    engine, hf_model = smol
    template = ChatTemplate(engine.tokenizer)
    history = [{"role": "system", "content": "You are a helpful assistant."}]
    prompt = template.render_ids(history + [{"role": "user", "content": "Tell me a story."}],
                                 add_generation_prompt=True)
    with engine.sequence() as warm:
        warm.extend(prompt[:-3])  # the next sequence references most of the prompt
        with engine.sequence() as seq:
            params = SamplingParams(max_new_tokens=64, stop_token_ids=())
            job = engine.enqueue(seq, params, prompt_ids=prompt)
            while not job.done:
                engine.step()
    assert job.result is not None and job.result.prompt.reused >= len(prompt) - 19
    expected = hf_greedy(hf_model, prompt, 64)
    eos = set(engine.runner.eos_token_ids)
    ours = list(job.generated)
    # Compare up to (and including) an end-of-turn token, where our generation stops.
    stop = next((i + 1 for i, t in enumerate(expected) if t in eos), len(expected))
    assert ours == expected[:stop]
    engine.check()


@pytest.mark.slow
def test_chat_repl_undo_is_free_and_turns_compute_only_new_tokens(smol: tuple[Engine, Any]
                                                                  ) -> None:
    from assistant.commands.chat import ChatSession, chat_repl
    from assistant.dialogue.types import DialogueOptions
    from assistant.llm.local import LocalBackend

    engine, _ = smol
    template = ChatTemplate(engine.tokenizer)
    template.verify()
    options = DialogueOptions(system_prompt="Answer briefly.", max_new_tokens=12,
                              repetition_penalty=1.1)
    ticks = iter(range(1000))
    with ChatSession(LocalBackend(engine), template, options,
                     clock=lambda: float(next(ticks))) as session:
        def stats() -> Any:  # read on the chat's engine thread, which owns the engine
            return session.host.call(lambda _b: engine.stats()).result()

        out = io.StringIO()
        chat_repl(session, io.StringIO("What is two plus two?\n"), out)
        after_first = session.tokens()
        history = list(session.messages)
        second_prompt = template.turn_ids(history, "And three plus three?")
        computed_before = stats().tokens_computed
        chat_repl(session, io.StringIO("And three plus three?\n/stats\n/undo\n/quit\n"), out)
        _, second = session.turns
        # Turn 2 computed exactly its new tokens: the user message and the reply opening.
        assert second.prompt_computed == len(second_prompt)
        assert second.prompt_reused == len(after_first)
        assert session.tokens() == after_first  # /undo restored the exact token state
        assert session.messages == history
        # Nothing was computed by /undo: all compute since turn 1 belongs to turn 2.
        close = len(template.end_of_turn_ids)
        assert stats().tokens_computed - computed_before <= second.prompt_computed + close + 1
        text = out.getvalue()
        assert f"(undone; {len(after_first)} tokens in cache)" in text
        assert "turn 2: prompt" in text and "tokens/s" in text
        # /retry asks the last question again: its prompt comes from the cache (at most
        # the partly filled last page is computed again).
        computed = stats().tokens_computed
        record = session.retry(io.StringIO())
        assert record is not None and record.kind == "retry"
        assert record.prompt_computed <= stats().page_size
        assert stats().tokens_computed - computed <= stats().page_size + close + 1
        assert session.messages[:-1] == history[:-1]
        assert session.query(lambda d: d.in_sync())
    engine.check()
    assert engine.stats().pages_used == 0


def test_prefill_stats_add_up() -> None:
    stats = PrefillStats(3, 4, 5) + PrefillStats(1, 1, 1)
    assert (stats.total, stats.reused) == (15, 11)
