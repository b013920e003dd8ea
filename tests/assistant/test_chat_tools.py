"""``assistant chat`` with local tools: a reply that calls one is followed by its result
and the answer to it, on the engine thread like every chat turn (scripted model)."""

from __future__ import annotations

import io

from assistant.commands.chat import ChatSession, chat_repl
from assistant.dialogue.types import DialogueOptions
from assistant.llm.local import LocalBackend
from assistant.loop.tool_worker import MAX_ROUNDS, LocalTools
from assistant.speech.voice import ClauseRule
from assistant.tools import ToolOptions, ToolRegistry, tool_from_function
from tests.replay.tool_fakes import call_text, tool_engine


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def _session(reply: object) -> ChatSession:
    engine, template = tool_engine(reply)  # type: ignore[arg-type]
    tools = LocalTools(ToolRegistry([tool_from_function(add)]), ToolOptions())
    options = DialogueOptions(system_prompt="Be brief.", max_new_tokens=200,
                              clauses=ClauseRule(min_chars=6),
                              tools=tuple(tools.registry.specs_for_template()))
    return ChatSession(LocalBackend(engine), template, options, tools=tools)


def test_a_chat_reply_that_calls_a_tool_is_answered_with_its_result() -> None:
    def reply(role: str, content: str) -> str:
        if role == "tool":
            return f"The sum is {content}."
        return call_text("add", a=2, b=40) if "add" in content else "Hello."

    out = io.StringIO()
    with _session(reply) as session:
        chat_repl(session, io.StringIO("please add 2 and 40\nhi\n/quit\n"), out)
        messages = session.messages
        tokens = session.tokens()
        history_ids = session.query(lambda d: d.conversation.token_ids)
    text = out.getvalue()
    assert '[add({"a": 2, "b": 40})] -> 42' in text
    assert "The sum is 42." in text and "Hello." in text
    assert "tool_call" not in text  # the call itself is not shown as the reply
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool",
                                             "assistant", "user", "assistant"]
    assert tokens == history_ids


def test_a_chat_model_that_keeps_calling_stops_after_the_rounds() -> None:
    out = io.StringIO()
    with _session(lambda role, content: call_text("add", a=1, b=1)) as session:
        chat_repl(session, io.StringIO("add forever\n/quit\n"), out)
        roles = [m["role"] for m in session.messages]
    assert out.getvalue().count("-> 2") == MAX_ROUNDS
    assert roles.count("tool") == MAX_ROUNDS
