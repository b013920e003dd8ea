"""The engine thread: one owner of the backend, many conversations, failures kept apart.

Deterministic: the host thread is held at known points with events (never ordered by
sleeps), on the fake-runner engine with the scripted chat model of the replay tests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import ReplyDelta, TurnClosed, TurnStart
from assistant.llm.host import EngineFailed, EngineHost, HostClosed
from assistant.llm.local import LocalBackend
from assistant.llm.protocol import LLMBackend
from assistant.loop.engine_client import DialogueClient, TurnWithdrawn
from tests.replay.fakes import scripted_dialogue, scripted_engine, scripted_reply

TIMEOUT = 10


class Inbox:
    """What one session was posted, with a way to wait for a kind of output."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, item: Any) -> None:
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def wait_for(self, pred: Callable[[Any], bool]) -> Any:
        with self._cond:
            assert self._cond.wait_for(lambda: any(pred(i) for i in self.items), TIMEOUT)
            return next(i for i in self.items if pred(i))

    def reply(self, turn_id: int) -> str:
        return "".join(i.text for i in self.items
                       if isinstance(i, ReplyDelta) and i.turn_id == turn_id)


class HeldBackend(LocalBackend):
    """A local backend whose next step can be held open by the test."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.hold = threading.Event()
        self.hold.set()
        self.in_step = threading.Event()
        self.steps = 0

    def step(self) -> None:
        self.in_step.set()
        assert self.hold.wait(TIMEOUT)
        self.steps += 1
        super().step()


def _host() -> tuple[EngineHost, HeldBackend, Callable[[LLMBackend], Dialogue]]:
    engine, template = scripted_engine()
    backend = HeldBackend(engine)
    return EngineHost(backend), backend, scripted_dialogue(template, max_new_tokens=60)


def _done(turn_id: int) -> Callable[[Any], bool]:
    return lambda i: isinstance(i, ReplyDelta) and i.turn_id == turn_id and i.done


def test_two_conversations_share_batched_steps_and_each_gets_only_its_own_outputs() -> None:
    host, backend, build = _host()
    a_box, b_box = Inbox(), Inbox()
    try:
        a = DialogueClient(host, build, a_box, name="a")
        b = DialogueClient(host, build, b_box, name="b")
        a.start_turn(1, "hello there", None)
        b.start_turn(1, "what time is it", None)
        a_box.wait_for(_done(1))
        b_box.wait_for(_done(1))
        assert a_box.reply(1) == scripted_reply("hello there")
        assert b_box.reply(1) == scripted_reply("what time is it")
        runner: Any = backend.engine.runner
        assert max(runner.decode_batch_sizes) == 2  # one decode served both conversations
        a.finish_turn(1, 1000)
        closed = a_box.wait_for(lambda i: isinstance(i, TurnClosed))
        assert closed.turn.text == scripted_reply("hello there")
        a.close()
        b.close()
        assert host.call(lambda be: be.stats().sequences).result(TIMEOUT) == 0
        host.call(lambda be: be.check()).result(TIMEOUT)
    finally:
        host.close()


def test_submitting_never_waits_for_an_engine_step_in_progress() -> None:
    host, backend, build = _host()
    box = Inbox()
    try:
        client = DialogueClient(host, build, box)
        # The turn's first step blocks inside the engine thread (held from before the
        # turn starts: a short scripted reply could otherwise finish before the hold).
        backend.in_step.clear()
        backend.hold.clear()
        client.start_turn(1, "tell me a story", None)
        assert backend.in_step.wait(TIMEOUT)
        # The host is inside a step: these only queue and return (the test would hang
        # here if submit took a lock the step holds).
        done = threading.Event()

        def submit() -> None:
            client.cut_turn(1, 0, 0)
            client.speculate(7, "next")
            done.set()

        threading.Thread(target=submit).start()
        assert done.wait(TIMEOUT)
        backend.hold.set()
        closed = box.wait_for(lambda i: isinstance(i, TurnClosed))
        assert closed.turn.interrupted and closed.kept_tokens == 0
    finally:
        backend.hold.set()
        host.close()


def test_a_failing_command_is_reported_to_its_session_only() -> None:
    host, _backend, build = _host()
    a_box, b_box = Inbox(), Inbox()
    try:
        a = DialogueClient(host, build, a_box, name="a")
        b = DialogueClient(host, build, b_box, name="b")
        a.finish_turn(5, 0)  # no such turn: a DialogueError on the engine thread
        b.start_turn(1, "hello there", None)
        failed = a_box.wait_for(lambda i: isinstance(i, EngineFailed))
        assert failed.session == "a" and "not the open turn" in str(failed.error)
        b_box.wait_for(_done(1))
        assert not any(isinstance(i, EngineFailed) for i in b_box.items)
        a.start_turn(1, "still here?", None)  # the failing session's dialogue is intact
        a_box.wait_for(_done(1))
    finally:
        host.close()


def test_a_generation_that_fails_is_retired_and_reported_to_its_owner_only() -> None:
    host, backend, build = _host()
    a_box, b_box = Inbox(), Inbox()
    tokenizer: Any = backend.engine.tokenizer
    poison = tokenizer.encode("Q")[0]
    real_decode = tokenizer.decode

    def decode(ids: list[int]) -> str:
        if poison in ids:
            raise ValueError("undecodable")
        return str(real_decode(ids))

    try:
        a = DialogueClient(host, build, a_box, name="a")
        b = DialogueClient(host, build, b_box, name="b")
        tokenizer.decode = decode
        a.start_turn(1, "Q", None)  # its reply "You said Q..." cannot be decoded
        b.start_turn(1, "hello there", None)
        failed = a_box.wait_for(lambda i: isinstance(i, EngineFailed))
        assert "undecodable" in str(failed.error)
        b_box.wait_for(_done(1))
        assert b_box.reply(1) == scripted_reply("hello there")
        assert not any(isinstance(i, EngineFailed) for i in b_box.items)
        host.call(lambda be: be.check()).result(TIMEOUT)
    finally:
        tokenizer.decode = real_decode
        host.close()


def test_closing_a_session_during_its_build_releases_what_the_build_made() -> None:
    host, backend, build = _host()
    building, release_build = threading.Event(), threading.Event()

    def slow_build(be: LLMBackend) -> Dialogue:
        building.set()
        assert release_build.wait(TIMEOUT)
        return build(be)

    try:
        client = DialogueClient(host, slow_build, Inbox())
        assert building.wait(TIMEOUT)
        closing = threading.Thread(target=client.close)
        closing.start()
        release_build.set()
        closing.join(TIMEOUT)
        assert host.call(lambda be: be.stats().sequences).result(TIMEOUT) == 0
        assert host.sessions == 0
    finally:
        release_build.set()
        host.close()


def test_a_withdrawal_that_overtakes_its_turn_start_leaves_the_history_intact() -> None:
    host, backend, build = _host()
    box = Inbox()
    try:
        client = DialogueClient(host, build, box)
        client.idle().result(TIMEOUT)  # built (host calls are control: they would overtake)
        assert host.call(lambda be: be.stats().sequences).result(TIMEOUT) == 1
        tokens = asyncio.run(client.query(lambda d: d.sequence.tokens))
        gate = threading.Event()
        host.call(lambda be: gate.wait(TIMEOUT))  # hold the engine thread while we queue
        client.speculate(1, "hello")  # low priority: still queued when the start is dropped
        client.start_turn(1, "hello", 1)
        client.withdraw_turn(1)  # control: runs before the start it cancels
        gate.set()
        client.idle().result(TIMEOUT)
        assert any(isinstance(i, TurnWithdrawn) for i in box.items)
        assert not any(isinstance(i, (EngineFailed, TurnStart)) for i in box.items)
        state = asyncio.run(client.query(
            lambda d: (d.in_sync(), d.sequence.tokens, d.live_turn_id)))
        assert state == (True, tokens, None)
        client.close()
        assert host.call(lambda be: be.stats().sequences).result(TIMEOUT) == 0
    finally:
        host.close()


def test_an_idle_host_does_no_steps_and_a_closed_host_refuses_work() -> None:
    host, backend, build = _host()
    box = Inbox()
    client = DialogueClient(host, build, box)
    client.idle().result(TIMEOUT)
    assert backend.steps == 0  # built, nothing to generate: no step ran
    host.close()
    with pytest.raises(HostClosed):
        host.call(lambda be: be.stats()).result(TIMEOUT)
    assert backend.engine.stats().sequences == 0  # the host released every conversation


def _tight_host(num_pages: int) -> tuple[EngineHost, Any, Callable[[LLMBackend], Dialogue]]:
    from assistant.speech.voice import ClauseRule
    from engine.chat_template import ChatTemplate
    from tests.engine.fake_runner import ByteTokenizer, make_engine
    from tests.replay.fakes import END, START, chatml, scripted_next_token

    tok = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
    engine, _ = make_engine(page_size=4, num_pages=num_pages, vocab_size=tok.vocab_size,
                            eos_token_ids=(tok.special_ids[END],), tokenizer=tok,
                            next_token=scripted_next_token(tok, scripted_reply))
    # A draft's first clause up to 60 characters: the page counts below are its pages.
    build = scripted_dialogue(ChatTemplate(tok, render=chatml), max_new_tokens=120,
                              speculation_max_tokens=40,
                              clauses=ClauseRule(min_chars=6, first_max_chars=60))
    return EngineHost(LocalBackend(engine)), engine, build


def test_out_of_pages_speculative_drafts_yield_to_a_live_reply() -> None:
    host, engine, build = _tight_host(num_pages=40)
    a_box, b_box = Inbox(), Inbox()
    try:
        a = DialogueClient(host, build, a_box, name="a")
        b = DialogueClient(host, build, b_box, name="b")
        a.speculate(1, "please tell me everything about the history of the roman empire")
        a.idle().result(TIMEOUT)
        assert host.call(lambda be: be.stats().pages_used).result(TIMEOUT) == 35
        b.start_turn(1, "what is the capital of france and why", None)
        b_box.wait_for(_done(1))
        assert b_box.reply(1) == scripted_reply("what is the capital of france and why")
        assert not any(isinstance(i, EngineFailed) for i in a_box.items + b_box.items)
        # A's draft (its fork) was released; both conversations live on.
        assert host.call(lambda be: be.stats().sequences).result(TIMEOUT) == 2
        host.call(lambda be: be.check()).result(TIMEOUT)
    finally:
        host.close()


def test_out_of_pages_with_nothing_to_shed_fails_the_biggest_conversation_only() -> None:
    host, engine, build = _tight_host(num_pages=50)
    a_box, b_box = Inbox(), Inbox()
    try:
        a = DialogueClient(host, build, a_box, name="a")
        b = DialogueClient(host, build, b_box, name="b")
        a.start_turn(1, "please tell me everything about the history of the roman empire", None)
        b.start_turn(1, "hi", None)
        failed = a_box.wait_for(lambda i: isinstance(i, EngineFailed))
        assert "exhausted" in str(failed.error)
        b_box.wait_for(_done(1))
        assert b_box.reply(1) == scripted_reply("hi")
        assert not any(isinstance(i, EngineFailed) for i in b_box.items)
        host.call(lambda be: be.check()).result(TIMEOUT)
    finally:
        host.close()


def test_each_conversation_gets_a_fair_share_of_the_cache_and_owners_are_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    from assistant.llm.host import fair_share

    engine, template = scripted_engine()
    backend = LocalBackend(engine)
    host = EngineHost(backend, stats_interval_s=0.0)
    build = scripted_dialogue(template, max_new_tokens=60)
    capacity = backend.capacity_tokens
    assert capacity is not None and fair_share(capacity, 2) == capacity // 3

    def limits(*clients: DialogueClient) -> list[int | None]:
        return [asyncio.run(c.query(lambda d: d.context_limit)) for c in clients]

    try:
        a = DialogueClient(host, build, Inbox(), name="a")
        assert limits(a) == [fair_share(capacity, 1)]
        b = DialogueClient(host, build, Inbox(), name="b")
        assert limits(a, b) == [fair_share(capacity, 2)] * 2
        b.start_turn(1, "hello there", None)
        b.idle().result(TIMEOUT)
        host.call(lambda be: None).result(TIMEOUT)  # one more pass: stats refreshed
        owners = {o.session: o for o in host.owners()}
        assert set(owners) == {"a", "b"} and owners["a"].sequences == 1
        assert owners["b"].tokens > owners["a"].tokens
        b.close()
        assert limits(a) == [fair_share(capacity, 1)]  # b's share went back to a
        # A sequence nobody owns is reported when a session closes.
        host.call(lambda be: be.sequence()).result(TIMEOUT)
        with caplog.at_level("WARNING", logger="assistant.llm.host"):
            a.close()
        assert "1 engine sequences belong to no session" in caplog.text
    finally:
        host.close()


def test_a_share_never_drops_below_one_whole_turn() -> None:
    host, engine, build = _tight_host(num_pages=40)  # 160 tokens for everybody
    try:
        clients = [DialogueClient(host, build, Inbox(), name=f"s{i}") for i in range(4)]
        limit = asyncio.run(clients[0].query(lambda d: d.context_limit))
        options = asyncio.run(clients[0].query(lambda d: d.options))
        assert limit is not None and limit >= options.max_new_tokens + options.user_turn_allowance
    finally:
        host.close()
