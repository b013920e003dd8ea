"""The model's maximum positions: extends past it fail cleanly, generations stop before it."""

from __future__ import annotations

import pytest

from engine import ContextLimitError, EngineError, FinishReason, SamplingParams
from tests.engine.fake_runner import assert_cache_matches, make_engine


def test_extend_past_max_positions_is_an_error_that_changes_nothing() -> None:
    engine, runner = make_engine(page_size=4, max_positions=10)
    with engine.sequence() as seq:
        seq.extend(list(range(5, 13)))
        with pytest.raises(ContextLimitError, match="maximum of 10 positions"):
            seq.extend([20, 21, 22])
        assert seq.tokens == tuple(range(5, 13))
        engine.check()
        seq.extend([20, 21])  # exactly at the limit is fine
        assert len(seq) == 10
        engine.check()
    assert issubclass(ContextLimitError, EngineError)


def test_generation_stops_in_time_to_close_the_turn() -> None:
    engine, runner = make_engine(page_size=4, vocab_size=256, max_positions=16)
    params = SamplingParams(max_new_tokens=50, end_of_turn=(3, 4))
    with engine.sequence() as seq:
        events = list(seq.generate(params, prompt_ids=[5, 6, 7, 8, 9, 10]))
        assert events[-1].finish_reason is FinishReason.LENGTH
        assert len(seq) <= 16
        assert seq.tokens[-2:] == (3, 4)
        assert len(events) == 16 - 6 - 2  # every position but the closing ids was used
        assert_cache_matches(engine, runner)
        engine.check()


def test_prompt_past_the_limit_fails_the_job_not_the_engine() -> None:
    engine, _ = make_engine(page_size=4, max_positions=8)
    with engine.sequence() as seq, pytest.raises(EngineError):
        list(seq.generate(SamplingParams(max_new_tokens=4), prompt_ids=list(range(5, 15))))
    engine.check()
