"""``assistant chat`` on a small KV budget: it never dies, never leaves the context, and
its history always equals the engine's sequence (scripted chat model, fake runner). The
conversation lives on the chat's engine thread: the tests look at it through queries."""

from __future__ import annotations

import io
from typing import Any

from assistant.commands.chat import ChatSession, chat_repl
from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueOptions
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

