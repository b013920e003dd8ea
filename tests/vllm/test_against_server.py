"""The vLLM backend against a real vLLM server, beside the local engine (fp32, greedy).

Each test drives a Dialogue (the same code ``talk``, ``replay`` and the daemon run) on
both backends and compares token ids, not just text.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assistant.llm.local import LocalBackend
from assistant.llm.vllm.backend import VLLMBackend
from assistant.llm.vllm.client import Endpoint
from assistant.llm.vllm.connect import TokenizerMismatch, VLLMOptions, connect
from assistant.llm.vllm.server import VLLMServer
from engine.events import FinishReason
from engine.params import SamplingParams
from tests.vllm.drive import Talk
from tests.vllm.proxy import Proxy

pytestmark = pytest.mark.slow

QUESTIONS = ("Hello! What is the capital of France?", "And what about Germany?",
             "Tell me a short joke about cats.")
OTHER_QUESTIONS = ("Hi there, which planet is the largest?", "How far is it from the Sun?",
                   "Name one of its moons.")
BLOCK = 32


@pytest.fixture(scope="module")
def local(llm_dir: Path) -> LocalBackend:
    from engine import Engine

    return LocalBackend(Engine.load(llm_dir, dtype="float32"))


@pytest.fixture(scope="module")
def local_replies(local: LocalBackend) -> tuple[list[str], tuple[int, ...]]:
    """The reference: the questions on the local engine (replies, final ids)."""
    talk = Talk(local)
    replies = []
    for q in QUESTIONS:
        replies.append(talk.reply(q))
        talk.finish()
    tokens = talk.tokens
    talk.close()
    return replies, tokens


def running_requests(url: str) -> float:
    for line in Endpoint(url).get_text("/metrics").splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:num_requests_running in /metrics")


def test_turns_and_ids_equal_the_local_engine(
        vllm_backend: VLLMBackend, local_replies: tuple[list[str], tuple[int, ...]]) -> None:
    talk = Talk(vllm_backend)
    replies = []
    for q in QUESTIONS:
        replies.append(talk.reply(q))
        talk.finish()
    assert replies == local_replies[0]
    assert all(replies)
    assert talk.tokens == local_replies[1]  # the whole conversation, id for id
    vllm_backend.check()
    talk.close()


def test_cached_tokens_cover_the_history_to_its_last_full_block(
        vllm_backend: VLLMBackend) -> None:
    talk = Talk(vllm_backend)
    histories = []
    # A conversation the server has never seen (its first block holds the nonce).
    nonce = uuid.uuid4().hex[:6]
    questions = (f"Hi, I am {nonce}. {OTHER_QUESTIONS[0]}", *OTHER_QUESTIONS[1:])
    for q in questions:
        histories.append(len(talk.tokens))
        talk.reply(q)
        talk.finish()
    talk.settle()  # the last request's usage report
    records = list(vllm_backend.records)
    assert len(records) == len(OTHER_QUESTIONS)
    for turn, (record, history) in enumerate(zip(records, histories, strict=True)):
        assert record.cached_tokens is not None
        assert record.cached_tokens % BLOCK == 0
        assert record.prompt_ids[:history] == talk.tokens[:history]
        # At least the client's whole-block expectation; more only where other
        # conversations on this shared server left the same blocks (the system prompt),
        # never past the nonce on the first turn.
        assert record.cached_tokens >= record.expected_cached
        if not turn:
            assert record.cached_tokens <= (history + 8) // BLOCK * BLOCK
        if turn:
            # Everything but the previous reply's closing ids was computed on the server
            # (the end token is sampled, never computed): every whole block before them.
            assert record.cached_tokens >= (history - 2) // BLOCK * BLOCK > 0
    talk.close()


def test_after_a_barge_in_the_next_prompt_is_the_local_sequence(
        vllm_backend: VLLMBackend, local: LocalBackend) -> None:
    talks = [Talk(local), Talk(vllm_backend)]
    replies = [t.reply(QUESTIONS[2]) for t in talks]
    assert replies[0] == replies[1]
    for t in talks:
        t.cut(len(replies[0]) // 2)  # the user heard half of it
    history = talks[0].tokens
    assert talks[1].tokens == history  # cut to the heard ids, closed, on both
    for t in talks:
        t.reply(QUESTIONS[0])
    talks[1].settle()
    sent = vllm_backend.records[-1].prompt_ids  # as the server echoed it
    assert len(sent) > len(history)
    assert sent == talks[0].tokens[:len(sent)]  # the local sequence: history, then prompt
    assert talks[0].tokens == talks[1].tokens
    for t in talks:
        t.finish()
        t.close()


def test_a_cancelled_stream_leaves_the_server_healthy(
        vllm_backend: VLLMBackend, vllm_server: VLLMServer) -> None:
    seq = vllm_backend.sequence()
    prompt = vllm_backend.tokenizer.encode("Count slowly from one to five hundred: one, two,",
                                           add_special_tokens=False)
    job = vllm_backend.enqueue(seq, SamplingParams(max_new_tokens=400, ignore_eos=True),
                               prompt_ids=prompt)
    got: list[int] = []
    while len(got) < 8:
        vllm_backend.step()
        got += [e.token_id for e in job.take_events()]
    vllm_backend.cancel(job)
    assert job.done and job.result is not None
    assert job.result.finish_reason is FinishReason.CANCELLED
    assert seq.tokens == (*prompt, *job.result.token_ids)
    assert not vllm_backend.has_work()
    deadline = time.monotonic() + 30
    while running_requests(vllm_server.url) > 0:  # the server aborted it
        assert time.monotonic() < deadline, "the cancelled request still runs on the server"
        time.sleep(0.1)
    assert Endpoint(vllm_server.url).get_text("/health") is not None
    again = vllm_backend.enqueue(seq, SamplingParams(max_new_tokens=4))
    while not again.done:
        vllm_backend.step()
    assert again.result is not None and again.result.sampled_tokens >= 1
    seq.release()
    vllm_backend.check()


@pytest.fixture
def two_replicas(vllm_server: VLLMServer, llm_dir: Path,
                 tokenizer: object) -> Iterator[tuple[VLLMBackend, list[Proxy]]]:
    proxies = [Proxy(vllm_server.opts.port), Proxy(vllm_server.opts.port)]
    backend = connect(VLLMOptions(tuple(p.url for p in proxies), retry_after_s=3600),
                      llm_dir, tokenizer=tokenizer)
    try:
        yield backend, proxies
    finally:
        backend.close()
        for p in proxies:
            p.kill()


def test_a_replica_killed_mid_conversation_fails_over(
        two_replicas: tuple[VLLMBackend, list[Proxy]],
        local_replies: tuple[list[str], tuple[int, ...]]) -> None:
    backend, proxies = two_replicas
    talk = Talk(backend)
    replies = [talk.reply(QUESTIONS[0])]
    talk.finish()
    talk.settle()
    first = backend.records[-1].replica
    victim = next(p for p in proxies if p.url == first)
    survivor = next(p for p in proxies if p.url != first)

    def kill_mid_reply(tokens: int) -> None:
        if tokens >= 3 and victim.url in {h.url for h in backend.health() if h.up}:
            victim.kill()

    replies.append(talk.reply(QUESTIONS[1], hook=kill_mid_reply))
    talk.finish()
    replies.append(talk.reply(QUESTIONS[2]))
    talk.finish()
    talk.settle()
    assert replies == local_replies[0]  # the reply went on, token for token
    assert talk.tokens == local_replies[1]
    health = {h.url: h for h in backend.health()}
    assert not health[victim.url].up and health[victim.url].failovers == 1
    assert health[survivor.url].up
    moved = [r for r in backend.records if r.failover]
    assert len(moved) == 1 and moved[0].replica == survivor.url
    assert backend.records[-1].replica == survivor.url  # the conversation stays there
    talk.close()


def test_assistant_models_reports_the_served_model(vllm_server: VLLMServer,
                                                   llm_dir: Path) -> None:
    from assistant.app.config import load_config
    from assistant.commands.models import inspect_models

    cfg = load_config(Path(__file__).resolve().parents[2] / "config.yaml", env={},
                      overrides={"engine.backend": "vllm", "engine.url": vllm_server.url})
    (llm,) = [r for r in inspect_models(cfg) if r.role == "llm"]
    assert llm.loads, llm.detail
    assert vllm_server.url in llm.detail and "tokenizer matches" in llm.detail


def test_a_server_whose_tokenizer_differs_is_refused(vllm_server: VLLMServer, llm_dir: Path,
                                                    tokenizer: Any) -> None:
    class Shifted:
        """Our tokenizer with every id moved by one: the same text, other ids."""

        def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
            return [t + 1 for t in tokenizer.encode(text, add_special_tokens=False)]

    with pytest.raises(TokenizerMismatch, match="another tokenizer"):
        connect(VLLMOptions((vllm_server.url,)), llm_dir, tokenizer=Shifted())


TIMER = {"type": "function", "function": {
    "name": "set_timer", "description": "Start a kitchen timer.",
    "parameters": {"type": "object", "additionalProperties": False,
                   "required": ["seconds", "label"],
                   "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}}}}


def _required_call(backend: Any) -> tuple[Any, tuple[int, ...]]:
    import dataclasses

    from tests.vllm.drive import options

    opts = dataclasses.replace(options(**{"llm.max_new_tokens": 64}), tools=(TIMER,),
                               tool_choice="required")
    talk = Talk(backend, opts)
    spoken = talk.reply("Set a timer for ten minutes for the pasta, please.")
    closed = talk.dialogue.finish_turn(talk.turn_id, 0)
    tokens = talk.tokens
    talk.close()
    assert spoken == ""  # a call is never speech
    return closed, tokens


def test_a_required_tool_call_is_the_same_valid_call_on_vllm(
        vllm_backend: VLLMBackend, local: LocalBackend) -> None:
    """The call's schema goes to the server as a structured-output request: the same
    ids as the local engine's constrained decode, a call that parses and validates."""
    import json

    local_closed, local_tokens = _required_call(local)
    remote_closed, remote_tokens = _required_call(vllm_backend)
    for closed in (local_closed, remote_closed):
        assert [c.name for c in closed.tool_calls] == ["set_timer"]
        arguments = json.loads(closed.tool_calls[0].arguments)
        assert set(arguments) == {"seconds", "label"}
        assert isinstance(arguments["seconds"], int | float)
    assert remote_tokens == local_tokens
    vllm_backend.check()
