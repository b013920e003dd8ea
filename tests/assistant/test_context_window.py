"""A long conversation stays inside the model's context: oldest exchanges leave, the
kept window is recomputed exactly in the background, history == sequence throughout."""

from __future__ import annotations

from typing import Any

import pytest

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueError, DialogueOptions, ReplyDelta
from assistant.llm.local import LocalBackend
from assistant.speech.voice import ClauseRule
from engine.chat_template import ChatTemplate
from tests.engine.fake_runner import ByteTokenizer, assert_cache_matches, make_engine
from tests.replay.fakes import END, START, chatml, scripted_next_token, scripted_reply


def make(limit: int, num_pages: int = 512, max_new: int = 80) -> tuple[Any, Any, Dialogue]:
    tok = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
    engine, runner = make_engine(page_size=4, num_pages=num_pages, vocab_size=tok.vocab_size,
                                 eos_token_ids=(tok.special_ids[END],), tokenizer=tok,
                                 next_token=scripted_next_token(tok, scripted_reply))
    dialogue = Dialogue(LocalBackend(engine), ChatTemplate(tok, render=chatml), DialogueOptions(
        system_prompt="Be brief.", max_new_tokens=max_new, max_context_tokens=limit,
        user_turn_allowance=40, clauses=ClauseRule(min_chars=6)))
    return engine, runner, dialogue


def run_turn(engine: Any, dialogue: Dialogue, turn_id: int, text: str, peak: list[int]) -> str:
    dialogue.start_turn(turn_id, text, None)
    reply = ""
    while dialogue.has_work():
        if engine.has_work():
            engine.step()
        peak.append(max(len(s) for s in engine.sequences()))
        reply += "".join(o.text for o in dialogue.collect() if isinstance(o, ReplyDelta))
    dialogue.finish_turn(turn_id, 1000)
    # Between turns the window's background recompute runs and is swapped in.
    while dialogue.has_work():
        engine.step()
        dialogue.collect()
    dialogue.collect()
    return reply


def test_a_long_conversation_never_passes_the_limit_and_history_equals_the_sequence() -> None:
    limit = 300
    engine, runner, dialogue = make(limit)
    peak: list[int] = []
    for turn in range(1, 61):
        text = f"question number {turn} about item {turn * 7}"
        assert run_turn(engine, dialogue, turn, text, peak) == scripted_reply(text)
        assert dialogue.in_sync()
        assert len(dialogue.sequence) <= limit
        assert_cache_matches(engine, runner)
    assert max(peak) <= limit
    conv = dialogue.conversation
    record = conv.to_json()
    assert len(record) == 1 + 2 * 60  # everything said is kept in the record
    hidden = [t for t in record if not t["in_context"]]
    assert hidden and all(t["role"] != "system" for t in hidden)
    assert record[0]["in_context"] and record[-1]["in_context"]
    # What the model sees starts at a user turn right after the system prompt.
    assert [m["role"] for m in conv.messages()[:2]] == ["system", "user"]
    assert conv.messages()[-1]["content"] == scripted_reply("question number 60 about item 420")
    assert dialogue.history_text_matches()


def run_until_hidden(engine: Any, dialogue: Dialogue, peak: list[int]) -> int:
    """Turns until the window first hides the oldest exchange; the last turn's id."""
    turn = 0
    while not dialogue.conversation.hidden_turns:
        turn += 1
        run_turn(engine, dialogue, turn, f"tell me fact {turn}", peak)
    return turn


def test_the_window_is_computed_in_the_background_not_at_the_turn_start() -> None:
    engine, runner, dialogue = make(300)
    peak: list[int] = []
    turn = run_until_hidden(engine, dialogue, peak)
    # The swap happened between turns: the next turn's prompt is all that is computed.
    before = engine.stats().tokens_computed
    dialogue.start_turn(turn + 1, "and one more", None)
    user_ids, header = dialogue.conversation.user_prompt_ids("ignored")  # shape only
    assert engine.stats().tokens_computed - before <= len("and one more") + 40
    del user_ids, header


def test_a_turn_that_cannot_fit_at_all_is_a_clear_error() -> None:
    engine, _, dialogue = make(120)
    with pytest.raises(DialogueError, match="does not fit in the context"):
        dialogue.start_turn(1, "x" * 200, None)
    assert dialogue.in_sync()


def test_a_small_cache_is_a_limit_too_one_conversation_never_runs_out_of_pages() -> None:
    """24 pages of 16 tokens (as ``engine.num_pages=24``): the conversation keeps inside
    its share of the cache, so no step ever runs out of pages, for 120 turns."""
    from assistant.llm.host import fair_share

    engine, runner, dialogue = make(0, num_pages=96, max_new=40)  # 96 pages of 4 tokens
    capacity = dialogue.backend.capacity_tokens
    assert capacity == 384
    dialogue.set_token_budget(fair_share(capacity, 1))
    assert dialogue.context_limit == 256
    peak: list[int] = []
    for turn in range(1, 121):
        text = f"question {turn}: what about item {turn * 3}?"
        reply = run_turn(engine, dialogue, turn, text, peak)
        assert reply and scripted_reply(text).startswith(reply)  # max_new cuts it short
        assert dialogue.in_sync() and len(dialogue.sequence) <= 256
    assert max(peak) <= 256
    assert dialogue.conversation.hidden_turns > 100
    assert_cache_matches(engine, runner)
