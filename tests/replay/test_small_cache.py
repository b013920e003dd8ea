"""A long spoken conversation on a 24-page KV cache (``engine.num_pages=24``): every turn
is answered, the oldest exchanges leave the model's context, history == sequence.

Real models, virtual clock; the engine is loaded again with 24 pages (the speech models
are shared with the other replay tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from assistant.loop.setup import LoopModels
from assistant.replay.scenario import Say
from tests.replay.conftest import make_config, run_scenario

pytestmark = pytest.mark.slow

QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Name a fruit that is yellow.",
    "What color is the sky at night?",
    "Which animal says moo?",
]


def test_a_long_conversation_on_24_pages_keeps_answering(loop_models: LoopModels,
                                                        llm_dir: Path, tmp_path: Path) -> None:
    from assistant.llm.host import EngineHost
    from assistant.llm.local import LocalBackend
    from engine import Engine

    cfg = make_config(**{"engine.num_pages": 24})
    engine = Engine.load(llm_dir, page_size=cfg.engine.page_size,
                         num_pages=24)
    small = LoopModels(engine, loop_models.template, loop_models.transcriber,
                       loop_models.synthesizer, EngineHost(LocalBackend(engine)))
    try:
        run = run_scenario(small, [Say(q, gap_ms=8000) for q in QUESTIONS], tmp_path, cfg)
        started = run.of("response_started")
        assert len(started) == len(QUESTIONS), [e.type for e in run.entries]
        assert not run.of("engine_failed") and not run.of("error")
        m = run.outcome.result.metrics
        assert m.sequence_matches_history and m.history_text_matches
        record = run.turns
        assert len(record) == 1 + 2 * len(QUESTIONS)  # the record keeps everything said
        assert any(not t.get("in_context", True) for t in record)  # the model does not
        assert record[0]["role"] == "system" and record[0].get("in_context", True)
        small.host.call(lambda backend: backend.check()).result(30)
    finally:
        small.close()
    assert engine.stats().sequences == 0
