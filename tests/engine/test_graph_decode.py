"""The static decode step that CUDA graphs replay (`engine.graph_decode.StaticDecode`), run
eagerly on CPU: bucketed spans, padded page rows and a device-side mask must give the
eager step's logits (transformers' within float tolerance), sliding windows included, and
its K/V writes must reach steps that read through the kept gathered copy."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.graph_decode import StaticDecode
from engine.paged_runner import PagedRunner
from engine.runner import DecodeItem
from tests.engine.test_model_parity import (
    FP32_TOL,
    make_runner,
    max_diff,
    random_tokens,
    reference_logits,
    shuffled_pages,
)


@pytest.fixture(params=["tiny_llama", "tiny_qwen2", "tiny_mistral"])
def tiny(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def static_for(runner: PagedRunner, bucket: int = 8) -> StaticDecode:
    return StaticDecode(runner.config, runner.weights, runner.kv, device=runner.device,
                        max_positions=runner.max_positions, attention=runner.attention,
                        capture=False, bucket=bucket)


def test_static_steps_match_transformers_across_buckets(tiny: Any) -> None:
    """30 positions over buckets of 8 (pages of 4, shuffled): every bucket boundary, rows
    padded to the bucket, and Mistral's window of 8 sliding past the first buckets."""
    runner = make_runner(tiny)
    static = static_for(runner)
    ids = random_tokens(30, seed=31)
    table = shuffled_pages(64, seed=32)
    ref = reference_logits(tiny, ids)
    runner.prefill(table, 0, ids[:3])
    for pos in range(3, len(ids)):
        logits = static(ids[pos], pos, table)
        assert logits.shape == (1, ref.shape[-1])
        assert max_diff(logits[0].float(), ref[pos]) < FP32_TOL, pos
    assert static.span_for(7) == 8 and static.span_for(8) == 16


def test_static_writes_reach_steps_that_read_the_gathered_copy(tiny_llama: Any) -> None:
    """Two sequences decode together (through `KVStorage.mirror`'s kept copy), one takes a
    static step alone, then both decode together again: the copy must not serve that
    sequence's page without the static step's K/V."""
    runner = make_runner(tiny_llama)
    static = static_for(runner)
    a_ids, b_ids = random_tokens(14, seed=33), random_tokens(14, seed=34)
    pages = shuffled_pages(64, seed=35)
    a_table, b_table = pages[:8], pages[8:16]
    a_ref, b_ref = reference_logits(tiny_llama, a_ids), reference_logits(tiny_llama, b_ids)
    runner.prefill(a_table, 0, a_ids[:9])
    runner.prefill(b_table, 0, b_ids[:9])
    both = runner.decode([DecodeItem(a_table, 9, a_ids[9]), DecodeItem(b_table, 9, b_ids[9])])
    assert runner.kv.mirrored
    assert max_diff(both[0], a_ref[9]) < FP32_TOL
    assert max_diff(static(a_ids[10], 10, a_table)[0].float(), a_ref[10]) < FP32_TOL
    both = runner.decode([DecodeItem(a_table, 11, a_ids[11]),
                          DecodeItem(b_table, 10, b_ids[10])])
    assert max_diff(both[0], a_ref[11]) < FP32_TOL
    assert max_diff(both[1], b_ref[10]) < FP32_TOL


def test_only_cuda_runners_take_graphs(tiny_llama: Any) -> None:
    runner = make_runner(tiny_llama)
    assert runner.device.type == "cpu" and runner.static_decode is None
    ids = random_tokens(6, seed=36)
    table = shuffled_pages(64, seed=37)
    runner.prefill(table, 0, ids[:5])
    eager = runner.decode([DecodeItem(table, 5, ids[5])])
    assert max_diff(eager[0], reference_logits(tiny_llama, ids)[5]) < FP32_TOL
    with torch.inference_mode():
        assert max_diff(static_for(runner)(ids[5], 5, table)[0].float(), eager[0]) < FP32_TOL


def test_the_runner_sends_batch_1_steps_to_its_static_decode(tiny_llama: Any) -> None:
    """On CUDA (`engine.cuda_graphs`) a runner holds a `StaticDecode`; here one runs eagerly
    in its place: single-sequence steps go through it, batches do not."""
    runner = make_runner(tiny_llama)
    static = static_for(runner)
    calls: list[int] = []
    real = static.__call__

    def counted(token_id: int, position: int, pages: Any) -> torch.Tensor:
        calls.append(position)
        return real(token_id, position, pages)

    runner.static_decode = counted  # type: ignore[assignment]
    ids = random_tokens(12, seed=38)
    table = shuffled_pages(64, seed=39)
    ref = reference_logits(tiny_llama, ids)
    runner.prefill(table, 0, ids[:10])
    one = runner.decode([DecodeItem(table, 10, ids[10])])
    assert calls == [10] and max_diff(one[0], ref[10]) < FP32_TOL
    runner.decode([DecodeItem(table, 11, ids[11]), DecodeItem(shuffled_pages(64, 40), 0, 5)])
    assert calls == [10]


def test_a_refused_capture_falls_back_to_eager_steps(tiny_llama: Any,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    runner = make_runner(tiny_llama)

    def refused(token_id: int, position: int, pages: Any) -> torch.Tensor:
        raise RuntimeError("operation not permitted when stream is capturing")

    runner.static_decode = refused  # type: ignore[assignment]
    ids = random_tokens(8, seed=41)
    table = shuffled_pages(64, seed=42)
    runner.prefill(table, 0, ids[:7])
    logits = runner.decode([DecodeItem(table, 7, ids[7])])
    assert max_diff(logits[0], reference_logits(tiny_llama, ids)[7]) < FP32_TOL
    assert runner.static_decode is None
    assert "CUDA graphs unavailable" in caplog.text
