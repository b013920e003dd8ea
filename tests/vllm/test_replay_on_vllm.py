"""The full loop (VAD, ASR, dialogue, TTS, barge-in) on vLLM gives the local engine's
conversation: the bundled recording, replayed on a virtual clock on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from assistant.app.config import AppConfig, load_config
from assistant.llm.host import EngineHost
from assistant.llm.vllm.backend import VLLMBackend
from assistant.loop.setup import LoopModels, load_models
from assistant.replay.run import ReplayOptions, ReplayOutcome, replay_sync

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "demo_conversation.wav"


def config() -> AppConfig:
    # The servers run float32 weights: the local engine must too to give the same replies.
    return load_config(ROOT / "config.yaml", env={},
                       overrides={"llm.max_new_tokens": 40, "engine.weights": "fp32"})


@pytest.fixture(scope="module")
def local_models(llm_dir: Path) -> Iterator[LoopModels]:
    del llm_dir  # converted by the session fixture; load_models finds it in the cache
    models = load_models(config(), deterministic_tts=True)
    yield models
    models.close()


def replay(models: LoopModels, tmp: Path) -> ReplayOutcome:
    tmp.mkdir(parents=True, exist_ok=True)
    return replay_sync(models, config(), RECORDING, ReplayOptions(heard_path=tmp / "heard.wav"))


def test_a_barge_in_conversation_replays_the_same_on_vllm(
        local_models: LoopModels, vllm_backend: VLLMBackend, tmp_path: Path) -> None:
    remote = LoopModels(None, local_models.template, local_models.transcriber,
                        local_models.synthesizer, EngineHost(vllm_backend, name="vllm"))
    try:
        on_vllm = replay(remote, tmp_path / "vllm")
    finally:
        remote.close()
    here = replay(local_models, tmp_path / "local")
    turns = on_vllm.result.conversation
    assert turns == here.result.conversation
    assert any(t.get("interrupted") for t in turns), "the recording has a barge-in"
    assert on_vllm.result.metrics.sequence_matches_history
    # Replies (not the speculative drafts aborted before their usage) reuse the history.
    reported = [r.cached_tokens for r in vllm_backend.records if r.cached_tokens is not None]
    assert len(reported) >= 2 and all(c > 0 for c in reported[1:])
