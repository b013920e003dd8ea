"""A new system prompt mid-conversation (a client's changed instructions): the context
with it is recomputed in the background and swapped in between turns, history ==
sequence throughout, and the next reply sees it."""

from __future__ import annotations

import dataclasses

import pytest

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueError, DialogueOptions
from tests.assistant.test_context_window import make, run_turn, run_until_hidden
from tests.engine.fake_runner import assert_cache_matches


def new_prompt(dialogue: Dialogue, text: str) -> None:
    dialogue.set_options(dataclasses.replace(dialogue.options, system_prompt=text))


def test_a_new_system_prompt_is_computed_in_the_background_and_swapped_in() -> None:
    engine, runner, dialogue = make(0)  # no context limit: only the prompt changes
    peak: list[int] = []
    run_turn(engine, dialogue, 1, "hello there", peak)
    run_turn(engine, dialogue, 2, "what is new", peak)
    before = dialogue.conversation.token_ids
    turns_before = dialogue.conversation.messages()[1:]
    new_prompt(dialogue, "Answer like a pirate, in one sentence.")
    # Nothing changed yet: the live context still holds the old prompt.
    assert dialogue.in_sync() and dialogue.conversation.token_ids == before
    assert dialogue.has_work()  # the recompute, at speculative priority
    while dialogue.has_work():
        engine.step()
        dialogue.collect()
    dialogue.collect()
    conv = dialogue.conversation
    assert conv.messages()[0] == {"role": "system",
                                  "content": "Answer like a pirate, in one sentence."}
    assert conv.messages()[1:] == turns_before  # the turns stay as they were said
    assert dialogue.in_sync() and dialogue.history_text_matches()
    assert dialogue.options.system_prompt == "Answer like a pirate, in one sentence."
    assert_cache_matches(engine, runner)
    # The next turn computes only its own prompt: the new context was ready.
    computed = engine.stats().tokens_computed
    start = dialogue.start_turn(3, "and now", None)
    assert start.prompt_tokens_computed == start.prompt_tokens
    assert engine.stats().tokens_computed - computed <= start.prompt_tokens + 1
    dialogue.abort()


def test_a_turn_started_before_the_recompute_finished_computes_the_rest_first() -> None:
    engine, runner, dialogue = make(0)
    peak: list[int] = []
    run_turn(engine, dialogue, 1, "hello there", peak)
    new_prompt(dialogue, "Be terse.")
    # The user's next turn comes at once: the new prompt is in its context all the same.
    dialogue.start_turn(2, "one more thing", None)
    assert dialogue.conversation.messages()[0]["content"] == "Be terse."
    assert dialogue.conversation.messages()[-1]["content"] == "one more thing"
    while dialogue.has_work():
        engine.step()
        dialogue.collect()
    dialogue.finish_turn(2, 1000)
    assert dialogue.in_sync() and dialogue.history_text_matches()
    assert_cache_matches(engine, runner)


def test_a_prompt_change_and_a_context_limit_share_one_recompute() -> None:
    engine, runner, dialogue = make(300)
    peak: list[int] = []
    turn = run_until_hidden(engine, dialogue, peak)
    new_prompt(dialogue, "From now on, answer in French.")
    for more in range(turn + 1, turn + 6):
        run_turn(engine, dialogue, more, f"tell me fact {more}", peak)
        assert dialogue.in_sync() and len(dialogue.sequence) <= 300
    assert dialogue.conversation.messages()[0]["content"] == "From now on, answer in French."
    assert dialogue.history_text_matches()
    assert max(peak) <= 300
    assert_cache_matches(engine, runner)


def test_a_conversation_without_a_system_prompt_cannot_get_one() -> None:
    engine, _runner, dialogue = make(0)
    bare = Dialogue(dialogue.backend, dialogue.conversation.renderer,
                    DialogueOptions(system_prompt="", max_new_tokens=8))
    with pytest.raises(DialogueError, match="no system prompt"):
        new_prompt(bare, "Be brief.")
    with pytest.raises(DialogueError, match="cannot become empty"):
        new_prompt(dialogue, "")
    bare.close()
    dialogue.close()
    del engine
