"""Hermetic rules of the vLLM backend: prefix-cache expectations, replica routing, config.
(No server: these run everywhere.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from assistant.app.config import load_config
from assistant.app.errors import ConfigError
from assistant.llm.vllm.client import Endpoint
from assistant.llm.vllm.prefix_estimate import PrefixEstimate
from assistant.llm.vllm.router import NoReplica, Router

CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"


def test_expected_cached_counts_whole_blocks_and_never_the_last_token() -> None:
    est = PrefixEstimate(4)
    history = list(range(10))
    assert est.expected_cached(history) == 0
    est.record(history)  # blocks [0..3], [4..7]; 8, 9 are a partial block
    assert est.expected_cached(history + [50, 51]) == 8
    assert est.expected_cached(history[:8]) == 4  # the last token's block is recomputed
    assert est.expected_cached(history[:6] + [99, 7, 8]) == 4  # cut back, then extended
    assert est.expected_cached([1, *history]) == 0  # keys are chained from the start
    est.clear()
    assert est.expected_cached(history + [50]) == 0


def test_prefix_estimate_forgets_the_oldest_blocks_first() -> None:
    est = PrefixEstimate(2, max_blocks=2)
    est.record([1, 2, 3, 4])
    est.record([9, 9])
    assert est.cached_prefix([1, 2, 3, 4]) == 0
    assert est.cached_prefix([9, 9]) == 2


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def router(n: int, clock: Clock) -> Router:
    return Router([Endpoint(f"http://10.0.0.{i}:8000") for i in range(n)], block_size=32,
                  retry_after_s=10.0, clock=clock)


def test_a_conversation_sticks_to_one_replica_and_conversations_spread() -> None:
    r = router(3, Clock())
    picks = {key: r.pick(key).url for key in range(300)}
    assert all(r.pick(key).url == url for key, url in picks.items())
    counts = [list(picks.values()).count(rep.url) for rep in r.replicas]
    assert min(counts) > 60  # roughly a third each


def test_only_the_failed_replicas_conversations_move_and_it_is_retried_later() -> None:
    clock = Clock()
    r = router(3, clock)
    before = {key: r.pick(key) for key in range(200)}
    dead = r.replicas[0]
    r.failed(dead, ConnectionResetError("reset"))
    after = {key: r.pick(key) for key in range(200)}
    for key in before:
        if before[key] is dead:
            assert after[key] is not dead
            assert after[key] is r.ranked(key)[1]  # its next choice
        else:
            assert after[key] is before[key]
    health = {h.url: h for h in r.health()}
    assert not health[dead.url].up and health[dead.url].failures == 1
    assert "reset" in health[dead.url].last_error
    clock.now = 10.0  # due for a retry: a request is the probe
    assert any(r.pick(key) is dead for key in before)


def test_no_replica_left_is_a_clear_error() -> None:
    r = router(2, Clock())
    for rep in r.replicas:
        r.failed(rep, ConnectionRefusedError("refused"))
    with pytest.raises(NoReplica, match="refused"):
        r.pick(1)


def test_engine_url_takes_one_or_several_replicas() -> None:
    cfg = load_config(CONFIG, env={"ASSISTANT__ENGINE__URL": "http://a:1, http://b:2/"},
                      overrides={"engine.backend": "vllm"})
    assert cfg.engine.url == ("http://a:1", "http://b:2")
    cfg = load_config(CONFIG, env={}, overrides={"engine.backend": "vllm",
                                                 "engine.url": ["http://a:1"]})
    assert cfg.engine.url == ("http://a:1",)
    with pytest.raises(ConfigError, match="engine.url"):
        load_config(CONFIG, env={}, overrides={"engine.backend": "vllm"})
    with pytest.raises(ConfigError, match="HOST:PORT"):
        load_config(CONFIG, env={}, overrides={"engine.backend": "vllm",
                                               "engine.url": "a:1"})
    assert load_config(CONFIG, env={}).engine.backend == "local"


def test_no_server_fails_the_job_and_then_refuses_new_ones_leaving_the_sequence(
        llm_dir: Path) -> None:
    """Nothing listens at the only replica: the running job fails (JobsFailed, as the
    host expects), the next enqueue is refused at once and changes nothing."""
    from assistant.llm.protocol import JobsFailed
    from assistant.llm.vllm.backend import VLLMBackend
    from assistant.llm.vllm.connect import load_tokenizer
    from assistant.llm.vllm.remote_model import RemoteModel
    from engine.params import SamplingParams
    from tests.vllm.conftest import free_port

    r = Router([Endpoint(f"http://127.0.0.1:{free_port()}")], block_size=32)
    backend = VLLMBackend(r, RemoteModel("m", 2048, 49152, (2,), 32), load_tokenizer(llm_dir))
    seq = backend.sequence()
    seq.extend([1, 2, 3])
    job = backend.enqueue(seq, SamplingParams(max_new_tokens=4), prompt_ids=[4, 5])
    with pytest.raises(JobsFailed) as failed:
        while backend.has_work():
            backend.step()
    assert failed.value.jobs == (job,) and job.done
    assert isinstance(failed.value.cause, NoReplica)
    assert not backend.health()[0].up
    with pytest.raises(NoReplica):
        backend.enqueue(seq, SamplingParams(max_new_tokens=4), prompt_ids=[6])
    assert seq.tokens == (1, 2, 3, 4, 5)
    assert not backend.has_work()
    backend.check()
    seq.extend([6])  # the sequence stays usable


def test_replica_health_is_labelled_by_replica_on_metrics() -> None:
    from assistant.serve.metrics import ServerMetrics

    r = Router([Endpoint("http://10.0.0.1:8000"), Endpoint("http://10.0.0.2:8000")],
               block_size=32)
    r.failed(r.replicas[1], ConnectionRefusedError("refused"))
    text = ServerMetrics(lambda: {"replica_up": {h.url: int(h.up) for h in r.health()},
                                  "session_tokens": {"s1": 5}}).render().decode()
    assert 'assistant_engine_replica_up{replica="http://10.0.0.1:8000"} 1.0' in text
    assert 'assistant_engine_replica_up{replica="http://10.0.0.2:8000"} 0.0' in text
    assert 'assistant_engine_session_tokens{session="s1"} 5.0' in text
