"""Batched sampling: greedy rows in one op, others through their own seeded sampler."""

from __future__ import annotations

import pytest
import torch

from engine.params import SamplingParams
from engine.sampler import Sampler, argmax_rows, sample_batch


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


def test_penalize_divides_positive_and_multiplies_negative_scores_once_per_id() -> None:
    from engine.sampler import penalize

    logits = torch.tensor([2.0, -1.0, 3.0, 0.5])
    out = penalize(logits, [0, 1, 1, 1, 3], 2.0, exempt=[3])
    assert out.tolist() == [1.0, -2.0, 3.0, 0.5]  # 3 is exempt, 2 not recent
    assert logits.tolist() == [2.0, -1.0, 3.0, 0.5]  # the input is untouched
    assert penalize(logits, [0], 1.0) is logits


def test_repetition_penalty_turns_a_greedy_pick_and_batches_like_row_by_row() -> None:
    logits = torch.tensor([[4.0, 3.5, 0.0], [4.0, 3.5, 0.0], [4.0, 3.5, 0.0]])
    plain = SamplingParams()
    penalised = SamplingParams(repetition_penalty=1.5)
    recent = [[0], [0], [1]]
    samplers = [Sampler(plain), Sampler(penalised), Sampler(penalised)]
    # 4.0 / 1.5 < 3.5: the recent id 0 loses its lead; an unpenalised row keeps it.
    assert sample_batch(samplers, logits, recent) == [0, 1, 0]
    assert Sampler(penalised).window == 64 and Sampler(plain).window == 0


def test_penalty_spares_the_stop_ids() -> None:
    params = SamplingParams(repetition_penalty=3.0)
    logits = torch.tensor([1.0, 2.0, 1.5])
    assert Sampler(params).sample(logits, [1]) == 2
    assert Sampler(params, exempt=[1]).sample(logits, [1]) == 1


@pytest.mark.parametrize("bad", [dict(repetition_penalty=0.0), dict(repetition_window=-1)])
def test_penalty_parameters_are_validated(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**bad)  # type: ignore[arg-type]


def test_argmax_rows_takes_the_first_of_ties_and_nan_as_torch_does() -> None:
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    logits[1, [7, 30]] = 100.0  # a tie: the first wins
    logits[2, 11] = float("nan")  # NaN counts as the largest
    logits[3] = 0.0
    expected = [int(i) for i in torch.argmax(logits, dim=-1)]
    assert argmax_rows(logits) == expected and expected[1:] == [7, 11, 0]
    assert argmax_rows(logits.bfloat16()) == [int(i) for i in logits.bfloat16().argmax(-1)]
    assert argmax_rows(logits[::2]) == expected[::2]  # strided rows
