"""``assistant chat`` on a small KV budget: it never dies, never leaves the context, and
its history always equals the engine's sequence (scripted chat model, fake runner). The
conversation lives on the chat's engine thread: the tests look at it through queries."""

from __future__ import annotations

import io
from typing import Any

import pytest

from assistant.commands.chat import ChatSession, chat_repl
from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueOptions
from assistant.llm.host import EngineHost
from assistant.llm.local import LocalBackend
from engine.chat_template import ChatTemplate
from tests.engine.fake_runner import ByteTokenizer, assert_cache_matches, make_engine
from tests.replay.fakes import END, START, chatml, scripted_next_token, scripted_reply


def session(num_pages: int, *, page_size: int = 16, max_new: int = 48,
            ) -> tuple[Any, Any, ChatSession]:
    tok = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
    engine, runner = make_engine(page_size=page_size, num_pages=num_pages,
                                 vocab_size=tok.vocab_size, eos_token_ids=(tok.special_ids[END],),
                                 tokenizer=tok, next_token=scripted_next_token(tok, scripted_reply))
    options = DialogueOptions(system_prompt="Be brief.", max_new_tokens=max_new,
                              user_turn_allowance=48, repetition_penalty=1.1)
    return engine, runner, ChatSession(LocalBackend(engine), ChatTemplate(tok, render=chatml),
                                       options)


def test_300_turns_on_24_pages_complete_inside_the_limit_with_history_equal_to_sequence() -> None:
    engine, runner, chat = session(num_pages=24)  # 384 tokens, as engine.num_pages=24
    limit = chat.query(lambda d: d.context_limit)
    assert limit is not None and limit <= 24 * 16
    with chat:
        for turn in range(1, 301):
            question = f"q{turn}: and item {turn % 17}?"
            out = io.StringIO()
            chat_repl(chat, io.StringIO(question + "\n"), out, prompt="")
            assert "error" not in out.getvalue()
            reply = out.getvalue().strip()
            assert reply and scripted_reply(question).startswith(reply)
            assert chat.query(Dialogue.in_sync) and len(chat.tokens()) <= limit
            if turn % 50 == 0:
                chat.host.call(lambda _b: engine.check()).result()
                chat.host.call(lambda _b: assert_cache_matches(engine, runner)).result()
        record = chat.query(lambda d: d.conversation.to_json())
        assert len(record) == 1 + 2 * 300  # the record keeps every turn
        assert sum(not t["in_context"] for t in record) > 500
        out = io.StringIO()
        chat_repl(chat, io.StringIO("/stats\n"), out, prompt="")
        assert "hidden" in out.getvalue()
    assert engine.stats().pages_used == 0


def test_a_turn_too_big_for_the_cache_is_a_message_and_the_chat_goes_on() -> None:
    engine, runner, chat = session(num_pages=12, page_size=8, max_new=24)  # 96 tokens
    with chat:
        out = io.StringIO()
        chat_repl(chat, io.StringIO("hello\n" + "tell me " * 40 + "\nhi again\n"), out,
                  prompt="")
        lines = [line for line in out.getvalue().splitlines() if line]
        assert lines[0] == scripted_reply("hello")[:len(lines[0])] and lines[0]
        assert any("error:" in line and "that turn was dropped" in line for line in lines)
        assert scripted_reply("hi again").startswith(lines[-1]) and lines[-1]
        assert chat.query(Dialogue.in_sync)
        chat.host.call(lambda _b: engine.check()).result()
    assert engine.stats().pages_used == 0


def test_undo_retry_and_the_other_commands_keep_the_cache_equal_to_the_history() -> None:
    engine, _runner, chat = session(num_pages=64)
    with chat:
        out = io.StringIO()
        chat_repl(chat, io.StringIO("/undo\n/retry\nhello\n"), out, prompt="")
        after_first, history = chat.tokens(), chat.messages
        assert out.getvalue() == ("(nothing to undo)\n(nothing to retry)\n"
                                  f"{scripted_reply('hello')}\n\n")  # a newline at EOF
        out = io.StringIO()
        chat_repl(chat, io.StringIO("how are you\n/undo\n/retry\n/stats\n/help\n/nope\n"
                                    "/quit\nnever read\n"), out, prompt="")
        lines = out.getvalue().splitlines()
        assert lines[:3] == [scripted_reply("how are you"),
                             f"(undone; {len(after_first)} tokens in cache)",
                             scripted_reply("hello")]  # /retry asked "hello" again
        assert [line.split(":")[0] for line in lines[3:6]] == ["turn 1", "turn 2", "retry 3"]
        assert "hidden" in lines[6] and "pages used" in lines[7]
        assert lines[8].startswith("commands: /undo") and lines[9].startswith("unknown command")
        assert len(lines) == 10  # /quit ended the REPL
        assert chat.messages == history and chat.tokens() == after_first
        assert [t.kind for t in chat.turns] == ["turn", "turn", "retry"]
        assert chat.query(Dialogue.in_sync)
    assert engine.stats().pages_used == 0


class FailingStep(LocalBackend):
    """A local backend whose ``fail_at``-th step raises (a fault in the engine)."""

    def __init__(self, engine: Any, fail_at: int) -> None:
        super().__init__(engine)
        self.steps, self.fail_at = 0, fail_at

    def step(self) -> None:
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("boom")
        super().step()


def test_a_step_failing_mid_reply_withdraws_the_turn_and_the_chat_goes_on() -> None:
    tok = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
    engine, _runner = make_engine(page_size=16, num_pages=64, vocab_size=tok.vocab_size,
                                  eos_token_ids=(tok.special_ids[END],), tokenizer=tok,
                                  next_token=scripted_next_token(tok, scripted_reply))
    backend = FailingStep(engine, fail_at=10**9)
    options = DialogueOptions(system_prompt="Be brief.", max_new_tokens=48)
    with ChatSession(backend, ChatTemplate(tok, render=chatml), options) as chat:
        out = io.StringIO()
        chat_repl(chat, io.StringIO("hello\n"), out, prompt="")
        before, history = chat.tokens(), chat.messages
        backend.fail_at = backend.steps + 5  # the host steps only while there is work
        out = io.StringIO()
        chat_repl(chat, io.StringIO("how are you\nhi again\n"), out, prompt="")
        lines = out.getvalue().splitlines()
        assert scripted_reply("how are you").startswith(lines[0]) and lines[0]
        assert lines[1] == "(error: boom; that turn was dropped)"
        assert lines[2] == scripted_reply("hi again")
        assert chat.messages[:len(history)] == history and len(chat.messages) == 5
        assert chat.tokens()[:len(before)] == before
        assert chat.query(Dialogue.in_sync)
        chat.host.call(lambda _b: engine.check()).result()
    assert engine.stats().pages_used == 0


def test_chats_on_one_engine_host_share_its_cache_and_leave_it_running() -> None:
    tok = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
    engine, _runner = make_engine(page_size=16, num_pages=128, vocab_size=tok.vocab_size,
                                  eos_token_ids=(tok.special_ids[END],), tokenizer=tok,
                                  next_token=scripted_next_token(tok, scripted_reply))
    backend = LocalBackend(engine)
    options = DialogueOptions(system_prompt="Be brief.", max_new_tokens=48)
    host = EngineHost(backend)
    try:
        with ChatSession(backend, ChatTemplate(tok, render=chatml), options, host=host) as a:
            alone = a.query(lambda d: d.context_limit)
            with ChatSession(backend, ChatTemplate(tok, render=chatml), options,
                             host=host) as b:
                assert host.sessions == 2
                assert b.query(lambda d: d.context_limit) < alone  # a fair share each
                for chat, name in ((a, "ann"), (b, "bob"), (a, "again")):
                    out = io.StringIO()
                    chat_repl(chat, io.StringIO(f"I am {name}\n"), out, prompt="")
                    assert out.getvalue().strip() == scripted_reply(f"I am {name}")
                assert [m["content"] for m in b.messages][1:] == [
                    "I am bob", scripted_reply("I am bob")]
                assert len(a.messages) == 5
            assert host.sessions == 1 and a.query(Dialogue.in_sync)
        assert host.call(lambda be: be.stats().pages_used).result() == 0
    finally:
        host.close()
    with pytest.raises(ValueError):
        ChatSession(LocalBackend(engine), ChatTemplate(tok, render=chatml), options, host=host)
