"""Batched sampling: greedy rows in one op, others through their own seeded sampler."""

from __future__ import annotations

import pytest
import torch

from engine.params import SamplingParams
from engine.sampler import Sampler, sample_batch


def test_sample_batch_matches_row_by_row_sampling() -> None:
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(), SamplingParams(temperature=0.8, seed=3), SamplingParams(),
              SamplingParams(temperature=1.0, top_k=5, seed=4), SamplingParams()]
    batched = sample_batch([Sampler(p) for p in params], logits)
    single = [Sampler(p).sample(logits[row]) for row, p in enumerate(params)]
    assert batched == single
    assert batched[0] == int(logits[0].argmax())


def test_sample_batch_all_greedy_and_shape_check() -> None:
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(1))
    assert sample_batch([Sampler(SamplingParams())] * 3, logits) == logits.argmax(-1).tolist()
    with pytest.raises(ValueError):
        sample_batch([Sampler(SamplingParams())], logits)
