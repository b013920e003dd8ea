"""The repetition guard: a pure function of token ids, table-tested."""

from __future__ import annotations

from typing import Any

import pytest

from assistant.dialogue.loop_guard import LoopGuardOptions, Repetition, repeated_tail

OPTS = LoopGuardOptions(min_repeats=4, max_ngram=4)


@pytest.mark.parametrize(("ids", "expected"), [
    ([], None),
    ([5, 5, 5], None),  # three copies: not yet a loop
    ([1, 5, 5, 5, 5], Repetition((5,), 4, 1)),
    ([9, 1, 2, 1, 2, 1, 2, 1, 2], Repetition((1, 2), 4, 1)),
    ([1, 2, 3] * 4, Repetition((1, 2, 3), 4, 0)),
    ([1, 2, 3, 4, 5] * 4, None),  # longer than max_ngram
    ([1, 2, 1, 2, 1, 2, 1, 3], None),  # the tail breaks the run
    ([7, 7, 7, 7, 7, 7], Repetition((7,), 6, 0)),
])
def test_repeated_tail(ids: list[int], expected: Repetition | None) -> None:
    assert repeated_tail(ids, OPTS) == expected


def test_the_guard_can_be_turned_off() -> None:
    assert repeated_tail([5] * 50, LoopGuardOptions(min_repeats=0)) is None


def _looping_dialogue(guard: LoopGuardOptions) -> tuple[Any, Any, Any]:
    from assistant.dialogue.dialogue import Dialogue
    from assistant.dialogue.types import DialogueOptions
    from assistant.llm.local import LocalBackend
    from engine.chat_template import ChatTemplate
    from tests.engine.fake_runner import ByteTokenizer, make_engine
    from tests.replay.fakes import END, START, chatml, scripted_next_token

    tok = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
    engine, _ = make_engine(page_size=8, num_pages=256, vocab_size=tok.vocab_size,
                            eos_token_ids=(tok.special_ids[END],), tokenizer=tok,
                            next_token=scripted_next_token(tok, lambda _u: "Mr. " * 40))
    dialogue = Dialogue(LocalBackend(engine), ChatTemplate(tok, render=chatml),
                        DialogueOptions(max_new_tokens=150, loop_guard=guard))
    return engine, dialogue, tok


@pytest.mark.parametrize(("guard", "stopped"), [
    (LoopGuardOptions(min_repeats=4, max_ngram=8), True),
    (LoopGuardOptions(min_repeats=0), False),
])
def test_a_reply_that_loops_is_stopped_and_the_history_keeps_what_was_said(
        guard: LoopGuardOptions, stopped: bool) -> None:
    from assistant.dialogue.types import ReplyDelta

    engine, dialogue, _ = _looping_dialogue(guard)
    dialogue.start_turn(1, "who is it", None)
    deltas: list[ReplyDelta] = []
    while dialogue.has_work():
        if engine.has_work():
            engine.step()
        deltas += [o for o in dialogue.collect() if isinstance(o, ReplyDelta)]
    assert deltas[-1].done
    text = "".join(d.text for d in deltas)
    if stopped:
        assert deltas[-1].finish_reason == "repetition"
        assert text.count("Mr.") == 4  # four copies, not 37
    else:
        assert deltas[-1].finish_reason == "length" and text.count("Mr.") > 30
    closed = dialogue.finish_turn(1, 1000)
    assert closed.turn.text == text.strip() or closed.turn.text == text
    assert dialogue.in_sync()
    engine.check()
