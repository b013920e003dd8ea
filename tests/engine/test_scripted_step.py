"""The decode step's layer loop in TorchScript (`engine.scripted_step`): the same logits,
bit for bit, as the Python loop, wherever it runs; the Python loop wherever it does not."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.loader import runner_from_hf_model
from engine.paged_runner import PagedRunner
from engine.runner import DecodeItem
from engine.scripted_step import ScriptedLayers
from engine.weight_formats import DENSE_ROWS, FP16_ROWS, dense_copy_for, dense_rows_for

MODELS = ["tiny_llama", "tiny_qwen2", "tiny_mistral"]  # plain, Q/K/V biases, sliding window


def runners(model: Any, weights: str, *, page_size: int = 4) -> tuple[PagedRunner, PagedRunner]:
    scripted = runner_from_hf_model(model, page_size=page_size, num_pages=96, weights=weights)
    plain = runner_from_hf_model(model, page_size=page_size, num_pages=96, weights=weights)
    plain.scripted = None
    return scripted, plain


def decode_both(scripted: PagedRunner, plain: PagedRunner, prompts: list[list[int]],
                tables: list[list[int]], steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Prefill each prompt on both runners, then decode `steps` batched steps greedily on
    each; the logits of every step, side by side."""
    out = []
    for runner in (scripted, plain):
        for table, ids in zip(tables, prompts, strict=True):
            runner.prefill(table, 0, ids)
    tokens = [ids[-1] for ids in prompts]
    positions = [len(ids) for ids in prompts]
    for _ in range(steps):
        items = [DecodeItem(t, p, tok) for t, p, tok in zip(tables, positions, tokens,
                                                             strict=True)]
        a, b = scripted.decode(items), plain.decode(items)
        out.append((a, b))
        tokens = [int(t) for t in a.argmax(-1)]
        positions = [p + 1 for p in positions]
    return out


@pytest.mark.parametrize("name", MODELS)
def test_scripted_decode_matches_the_python_loop_bit_for_bit(
        name: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    model = request.getfixturevalue(name)
    scripted, plain = runners(model, "int4")
    layers = scripted.scripted
    assert layers is not None
    runs = []
    run = layers.run
    monkeypatch.setattr(layers, "run", lambda *a, **k: runs.append(1) or run(*a, **k))
    # One sequence on consecutive pages (read in place), then three of different lengths
    # on scattered pages (gathered, with a mask; past mistral's 8-token window).
    cases = [([[3, 4, 5, 6, 7]], [list(range(0, 6))]),
             ([[9, 8, 7], list(range(20, 31)), [1, 2]],
              [[40, 12, 50, 13, 60], [41, 14, 51, 15, 61, 16], [42, 17, 52, 18, 62]])]
    for prompts, tables in cases:
        for a, b in decode_both(scripted, plain, prompts, tables, steps=6):
            assert torch.equal(a, b)
    assert len(runs) == 12  # every step ran in TorchScript


def test_a_batch_that_takes_the_16_bit_copies_runs_the_python_loop(tiny_llama: Any) -> None:
    scripted, _ = runners(tiny_llama, "int4")  # this CPU's copy, if any (engine.dense_prefill)
    rows = dense_rows_for("layers.0.qkv", dense_copy_for("auto"))
    assert rows == (FP16_ROWS if dense_copy_for("auto") == "fp16" else DENSE_ROWS)
    assert scripted.scripted is not None
    assert scripted.scripted.covers(rows - 1)
    assert not scripted.scripted.covers(rows)


@pytest.mark.parametrize("weights", ["fp32", "bf16", "int8"])
def test_other_weight_formats_run_the_python_loop(tiny_llama: Any, weights: str) -> None:
    runner = runner_from_hf_model(tiny_llama, page_size=4, num_pages=16, weights=weights)
    assert runner.scripted is None
    assert ScriptedLayers.build(runner.weights.layers) is None
