"""Paged model forward vs the transformers reference: logits and greedy continuations.

Tiny random models (Llama with llama3 RoPE scaling, Qwen2 with biases, Mistral with a
sliding window) cover the kernels; the packaged SmolLM2 checks a real checkpoint.
Page tables are shuffled and non-contiguous throughout, and pages are small so that
chunks and decode steps cross page boundaries.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from engine.loader import runner_from_hf_model
from engine.paged_runner import PagedRunner, attention_backends_for
from engine.runner import DecodeItem, PrefillItem
from tests.engine.conftest import TINY_VOCAB

FP32_TOL = 1e-4
"""Max abs logit difference allowed vs transformers for the tiny fp32 models."""
SMOL_TOL = 1e-3
"""The same for SmolLM2 (larger logits, 30 layers)."""


@pytest.fixture(params=["tiny_llama", "tiny_qwen2", "tiny_mistral"])
def tiny(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def make_runner(hf_model: Any, *, page_size: int = 4, num_pages: int = 64,
                dtype: str = "float32") -> PagedRunner:
    return runner_from_hf_model(hf_model, device="cpu", dtype=dtype, page_size=page_size,
                                num_pages=num_pages)


def shuffled_pages(num_pages: int, seed: int) -> list[int]:
    pages = list(range(num_pages))
    random.Random(seed).shuffle(pages)
    return pages


def random_tokens(count: int, seed: int, vocab: int = TINY_VOCAB) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, vocab) for _ in range(count)]


def reference_logits(hf_model: Any, token_ids: list[int]) -> torch.Tensor:
    """transformers' full forward (no cache) over the whole sequence: ``[T, vocab]``."""
    with torch.inference_mode():
        return hf_model(torch.tensor([token_ids])).logits[0].float()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max())


def greedy(runner: PagedRunner, page_table: list[int], prompt: list[int],
           max_new_tokens: int) -> list[int]:
    """Greedy decode through the runner, stopping after an EOS token like `generate`."""
    logits = runner.prefill(page_table, 0, prompt)
    out: list[int] = []
    while True:
        token = int(logits[-1].argmax())
        out.append(token)
        if token in runner.eos_token_ids or len(out) == max_new_tokens:
            return out
        logits = runner.decode([DecodeItem(page_table, len(prompt) + len(out) - 1, token)])


def reference_greedy(hf_model: Any, prompt: list[int], max_new_tokens: int) -> list[int]:
    with torch.inference_mode():
        out = hf_model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens,
                                do_sample=False, attention_mask=torch.ones(1, len(prompt),
                                                                           dtype=torch.long))
    return [int(t) for t in out[0, len(prompt):]]


def test_prefill_matches_transformers(tiny: Any) -> None:
    runner = make_runner(tiny)
    ids = random_tokens(37, seed=1)
    table = shuffled_pages(64, seed=2)
    logits = runner.prefill(table, 0, ids, all_logits=True)
    assert logits.dtype == torch.float32 and logits.device.type == "cpu"
    assert max_diff(logits, reference_logits(tiny, ids)) < FP32_TOL
    last = runner.prefill(table, 0, ids)
    assert last.shape == (1, TINY_VOCAB)
    assert max_diff(last[0], logits[-1]) < 1e-6


def test_forwards_run_under_the_runners_attention_backends(tiny_llama: Any) -> None:
    """On CUDA the runner leaves cuDNN attention out (it plans per key length, and every
    decode step has a new one); the choice holds for prefill and decode alike: a backend
    the CPU lacks fails both, the math backend computes the same logits."""
    from torch.nn.attention import SDPBackend

    assert attention_backends_for(torch.device("cpu")) is None
    cuda = attention_backends_for(torch.device("cuda"))
    assert cuda is not None and SDPBackend.CUDNN_ATTENTION not in cuda
    assert SDPBackend.FLASH_ATTENTION in cuda and SDPBackend.EFFICIENT_ATTENTION in cuda
    runner = make_runner(tiny_llama)
    ids = random_tokens(13, seed=21)
    table = shuffled_pages(64, seed=22)
    prefilled = runner.prefill(table, 0, ids[:-1], all_logits=True)
    decoded = runner.decode([DecodeItem(table, len(ids) - 1, ids[-1])])
    runner.attention_backends = [SDPBackend.MATH]
    assert max_diff(runner.prefill(table, 0, ids[:-1], all_logits=True), prefilled) < 1e-5
    assert max_diff(runner.decode([DecodeItem(table, len(ids) - 1, ids[-1])]), decoded) < 1e-5
    runner.attention_backends = [SDPBackend.EFFICIENT_ATTENTION]  # CUDA only
    with pytest.raises(RuntimeError):
        runner.prefill(table, 0, ids[:-1])
    with pytest.raises(RuntimeError):
        runner.decode([DecodeItem(table, len(ids) - 1, ids[-1])])


def test_prefill_takes_attention_output_in_any_layout(tiny_llama: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's attention kernels may return their output in a layout no view can regroup
    (seen on an H200: "view size is not compatible with input tensor's size and stride");
    prefill reshapes it, and the logits are the same."""
    runner = make_runner(tiny_llama)
    ids = random_tokens(11, seed=23)
    table = shuffled_pages(64, seed=24)
    expected = runner.prefill(table, 0, ids, all_logits=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def strided(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = sdpa(*args, **kwargs)
        return out.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", strided)
    assert max_diff(runner.prefill(table, 0, ids, all_logits=True), expected) < 1e-6


def test_chunked_prefill_matches_transformers(tiny: Any) -> None:
    runner = make_runner(tiny)
    ids = random_tokens(37, seed=3)
    table = shuffled_pages(64, seed=4)
    chunks, start = [], 0
    for size in (5, 1, 7, 3, 21):  # starts mid-page, crosses several pages
        chunks.append(runner.prefill(table, start, ids[start:start + size], all_logits=True))
        start += size
    assert max_diff(torch.cat(chunks), reference_logits(tiny, ids)) < FP32_TOL


def test_prefill_then_decode_matches_transformers(tiny: Any) -> None:
    runner = make_runner(tiny)
    ids = random_tokens(30, seed=5)  # longer than the Mistral sliding window of 8
    table = shuffled_pages(64, seed=6)
    ref = reference_logits(tiny, ids)
    runner.prefill(table, 0, ids[:10])
    for pos in range(10, len(ids)):
        step = runner.decode([DecodeItem(table, pos, ids[pos])])
        assert step.shape == (1, TINY_VOCAB)
        assert max_diff(step[0], ref[pos]) < FP32_TOL, pos


def test_prefill_many_matches_transformers(tiny: Any) -> None:
    """Several sequences' new tokens in one forward: a fresh prompt on scattered pages, one
    continuing a history already in its pages (past the Mistral window), a single token,
    and one on consecutive pages (read in place); then each decodes from what was written."""
    runner = make_runner(tiny)
    seqs = [random_tokens(n, seed=40 + n) for n in (9, 20, 6, 11)]
    scattered = shuffled_pages(48, seed=7)
    tables = [scattered[0:8], scattered[8:16], scattered[16:24], list(range(50, 58))]
    starts = [0, 12, 5, 0]
    for table, ids, start in zip(tables, seqs, starts, strict=True):
        if start:
            runner.prefill(table, 0, ids[:start])
    logits = runner.prefill_many([PrefillItem(table, start, ids[start:])
                                  for table, ids, start in zip(tables, seqs, starts,
                                                               strict=True)])
    assert logits.shape == (4, TINY_VOCAB) and logits.dtype == torch.float32
    refs = [reference_logits(tiny, ids + [ids[0]]) for ids in seqs]
    for row, ref in enumerate(refs):
        assert max_diff(logits[row], ref[len(seqs[row]) - 1]) < FP32_TOL, row
    # One token each runs as a decode step.
    step = runner.prefill_many([PrefillItem(table, len(ids), [ids[0]])
                                for table, ids in zip(tables, seqs, strict=True)])
    for row, ref in enumerate(refs):
        assert max_diff(step[row], ref[-1]) < FP32_TOL, row


@pytest.mark.parametrize("first", [0, 9])
def test_consecutive_pages_read_in_place_match_transformers(tiny: Any, first: int) -> None:
    """One sequence on consecutive pages is attended in place (a view of the storage, no
    gather): chunked prefill and decode still match the reference."""
    runner = make_runner(tiny)
    ids = random_tokens(30, seed=11)  # longer than the Mistral sliding window of 8
    table = list(range(first, first + 8))
    ref = reference_logits(tiny, ids)
    chunk = runner.prefill(table, 0, ids[:6], all_logits=True)
    assert max_diff(chunk, ref[:6]) < FP32_TOL
    assert max_diff(runner.prefill(table, 6, ids[6:13], all_logits=True), ref[6:13]) < FP32_TOL
    for pos in range(13, len(ids)):
        step = runner.decode([DecodeItem(table, pos, ids[pos])])
        assert max_diff(step[0], ref[pos]) < FP32_TOL, pos


def test_batched_decode_of_different_lengths(tiny: Any) -> None:
    runner = make_runner(tiny)
    pages = shuffled_pages(64, seed=7)
    tables = [pages[0:20:2], pages[1:20:2], pages[20:40]]  # interleaved, disjoint
    seqs = [random_tokens(n, seed=10 + n) for n in (9, 18, 29)]
    refs = [reference_logits(tiny, s) for s in seqs]
    prompt_lens = [len(s) - 4 for s in seqs]
    for table, seq, n in zip(tables, seqs, prompt_lens, strict=True):
        runner.prefill(table, 0, seq[:n])
    for step in range(4):
        items = [DecodeItem(t, n + step, s[n + step])
                 for t, s, n in zip(tables, seqs, prompt_lens, strict=True)]
        logits = runner.decode(items)
        assert logits.shape == (3, TINY_VOCAB)
        for row, (ref, n) in enumerate(zip(refs, prompt_lens, strict=True)):
            assert max_diff(logits[row], ref[n + step]) < FP32_TOL, (row, step)


def test_prefix_pages_shared_and_partial_page_copied(tiny: Any) -> None:
    runner = make_runner(tiny)  # page_size 4
    a = random_tokens(10, seed=20)
    table_a = [5, 17, 3]  # positions 0-3, 4-7, 8-9
    runner.prefill(table_a, 0, a)
    # B shares A's first 9 tokens: two full pages by reference, one slot copied.
    b = a[:9] + random_tokens(7, seed=21)
    table_b = [5, 17, 40, 41]
    runner.copy_slots(3, 40, 1)
    logits_b = runner.prefill(table_b, 9, b[9:], all_logits=True)
    assert max_diff(logits_b, reference_logits(tiny, b)[9:]) < FP32_TOL
    # A's own pages were not disturbed by B's writes.
    a_next = a + [7]
    step = runner.decode([DecodeItem(table_a, 10, 7)])
    assert max_diff(step[0], reference_logits(tiny, a_next)[10]) < FP32_TOL


def test_copy_slots_of_wrong_tokens_changes_logits(tiny_llama: Any) -> None:
    """The partial-page copy is load-bearing: copying from the wrong page breaks parity."""
    runner = make_runner(tiny_llama)
    a = random_tokens(10, seed=20)
    runner.prefill([5, 17, 3], 0, a)
    runner.prefill([30, 31, 32], 0, random_tokens(10, seed=22))
    b = a[:9] + random_tokens(7, seed=21)
    runner.copy_slots(32, 40, 1)  # the wrong source page
    logits_b = runner.prefill([5, 17, 40, 41], 9, b[9:], all_logits=True)
    assert max_diff(logits_b, reference_logits(tiny_llama, b)[9:]) > 1e-3


@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_page_sizes(tiny_llama: Any, page_size: int) -> None:
    runner = make_runner(tiny_llama, page_size=page_size, num_pages=48)
    ids = random_tokens(40, seed=30)
    table = shuffled_pages(48, seed=page_size)
    ref = reference_logits(tiny_llama, ids)
    first = runner.prefill(table, 0, ids[:17], all_logits=True)
    second = runner.prefill(table, 17, ids[17:35], all_logits=True)
    assert max_diff(torch.cat([first, second]), ref[:35]) < FP32_TOL
    for pos in range(35, 40):
        assert max_diff(runner.decode([DecodeItem(table, pos, ids[pos])])[0], ref[pos]) < FP32_TOL


def test_greedy_continuation_matches_generate(tiny: Any) -> None:
    runner = make_runner(tiny)
    prompt = random_tokens(6, seed=40)
    ours = greedy(runner, shuffled_pages(64, seed=41), prompt, 64)
    assert ours == reference_greedy(tiny, prompt, 64)


def test_bfloat16_runs_close_to_float32(tiny_llama: Any) -> None:
    ids = random_tokens(20, seed=50)
    table = shuffled_pages(64, seed=51)
    exact = make_runner(tiny_llama).prefill(table, 0, ids, all_logits=True)
    low = make_runner(tiny_llama, dtype="bfloat16").prefill(table, 0, ids, all_logits=True)
    assert low.dtype == torch.float32
    assert torch.isfinite(low).all()
    assert max_diff(low, exact) < 0.05 * float(exact.abs().max())


# --- the packaged SmolLM2 (one load per session; kept to a few forwards) -------------------


@pytest.fixture(scope="module")
def smol(llm_dir: Any) -> tuple[PagedRunner, Any, Any]:
    import transformers

    from engine.loader import load_runner

    runner, tokenizer = load_runner(llm_dir, page_size=16, num_pages=32)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(
        str(llm_dir), local_files_only=True, dtype=torch.float32).eval()
    return runner, tokenizer, hf_model


def smol_prompt(tokenizer: Any) -> list[int]:
    messages = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    return [int(t) for t in ids]


@pytest.mark.slow
def test_smollm2_chunked_prefill_and_decode_match(smol: tuple[PagedRunner, Any, Any]) -> None:
    runner, tokenizer, hf_model = smol
    ids = smol_prompt(tokenizer) + [int(t) for t in tokenizer.encode(" Once upon a time")]
    table = shuffled_pages(32, seed=60)
    ref = reference_logits(hf_model, ids)
    split = 21  # mid-page
    head = runner.prefill(table, 0, ids[:split], all_logits=True)
    tail = runner.prefill(table, split, ids[split:-3], all_logits=True)
    assert max_diff(torch.cat([head, tail]), ref[:-3]) < SMOL_TOL
    for pos in range(len(ids) - 3, len(ids)):
        assert max_diff(runner.decode([DecodeItem(table, pos, ids[pos])])[0], ref[pos]) < SMOL_TOL


@pytest.mark.slow
def test_smollm2_greedy_64_matches_generate(smol: tuple[PagedRunner, Any, Any]) -> None:
    runner, tokenizer, hf_model = smol
    prompt = smol_prompt(tokenizer)
    ours = greedy(runner, shuffled_pages(32, seed=61), prompt, 64)
    assert ours == reference_greedy(hf_model, prompt, 64)


@pytest.mark.slow
def test_smollm2_eos_includes_end_of_turn(smol: tuple[PagedRunner, Any, Any]) -> None:
    runner, tokenizer, _ = smol
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in runner.eos_token_ids
