"""The decode step's layer loops in TorchScript (`engine.scripted_step`): the same logits,
bit for bit, as the Python loop, wherever they run; the Python loop wherever they do not."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.cpu_features import CpuFeatures
from engine.loader import runner_from_hf_model
from engine.paged_runner import PagedRunner
from engine.quantize import Fp16PackedLinear
from engine.runner import DecodeItem
from engine.scripted_step import ScriptedLayers
from engine.weight_formats import DENSE_ROWS, FP16_ROWS, dense_copy_for, dense_rows_for

MODELS = ["tiny_llama", "tiny_qwen2", "tiny_mistral"]  # plain, Q/K/V biases, sliding window
FBGEMM = "fbgemm" in torch.backends.quantized.supported_engines
needs_fbgemm = pytest.mark.skipif(not FBGEMM, reason="fbgemm's float16 GEMM is not built in")


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


@needs_fbgemm
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("weights", ["int4", "int8", "bf16"])
def test_the_float16_loop_matches_the_python_loop_bit_for_bit(
        name: str, weights: str, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps the float16 GEMMs serve: int8/int4 batches of `FP16_ROWS` rows or more with
    float16 copies (forced here, whatever this CPU is), and every step of the bf16
    format, whose projections are those GEMMs."""
    monkeypatch.setattr("engine.weight_formats.dense_copy_for", lambda mode, device: "fp16")
    model = request.getfixturevalue(name)
    scripted, plain = runners(model, weights)
    layers = scripted.scripted
    assert layers is not None and plain.scripted is None
    runs: list[int] = []
    run = layers.run
    monkeypatch.setattr(layers, "run",
                        lambda x, *a, **k: runs.append(x.shape[0]) or run(x, *a, **k))
    # Five sequences of different lengths on scattered pages (gathered, with a mask; past
    # mistral's 8-token window), then for bf16 one on consecutive pages (read in place).
    cases = [([[9, 8, 7], list(range(20, 31)), [1, 2], [5, 6, 7, 8], [11] * 9],
              [[40, 12, 50, 13, 60], [41, 14, 51, 15, 61, 16], [42, 17, 52, 18, 62],
               [43, 19, 53, 20, 63], [44, 21, 54, 22, 64, 23]])]
    if weights == "bf16":
        cases.append(([[3, 4, 5, 6, 7]], [list(range(0, 6))]))
    for prompts, tables in cases:
        for a, b in decode_both(scripted, plain, prompts, tables, steps=6):
            assert torch.equal(a, b)
    assert torch.equal(scripted.kv.k, plain.kv.k) and torch.equal(scripted.kv.v, plain.kv.v)
    assert runs == [5] * 6 + ([1] * 6 if weights == "bf16" else [])


def test_a_batch_takes_the_loop_of_its_projections(tiny_llama: Any,
                                                   each_cpu: CpuFeatures) -> None:
    """Each CPU's copy, if any (engine.dense_prefill): bfloat16 copies (AMX, AVX512-BF16)
    run in the Python loop, float16 copies (AVX2) in the scripted float16 loop."""
    scripted, _ = runners(tiny_llama, "int4")
    kind = dense_copy_for("auto")
    assert kind == ("fp16" if each_cpu.capability == "AVX2"
                    else "bf16" if each_cpu.bf16_in_hardware else None)
    rows = dense_rows_for("layers.0.qkv", kind)
    assert rows == (FP16_ROWS if kind == "fp16" else DENSE_ROWS)
    assert scripted.scripted is not None
    assert scripted.scripted.covers(rows - 1)
    assert scripted.scripted.covers(rows) is (kind == "fp16" and FBGEMM)


def test_fp32_and_int8_without_float16_copies_run_the_python_loop(
        tiny_llama: Any, each_cpu: CpuFeatures) -> None:
    for weights, dense in (("fp32", "auto"), ("int8", "never"), ("int8", "always")):
        runner = runner_from_hf_model(tiny_llama, page_size=4, num_pages=16, weights=weights,
                                      dense_prefill=dense)
        fp16 = isinstance(getattr(runner.weights.layers[0].qkv, "dense", None),
                          Fp16PackedLinear)
        assert fp16 is (dense == "always" and dense_copy_for("always") == "fp16")
        if fp16:
            assert runner.scripted is not None  # the float16 loop (tested above)
            continue
        assert runner.scripted is None
        assert ScriptedLayers.build(runner.weights.layers) is None
