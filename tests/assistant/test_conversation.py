"""Conversation history and reply-token bookkeeping, with a byte tokenizer (no model)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from assistant.dialogue.conversation import INTERRUPTED_MARKER, Conversation
from assistant.dialogue.reply import ReplyTokens
from engine.chat_template import ChatTemplate, Message
from tests.engine.fake_runner import ByteTokenizer


def chatml(messages: Sequence[Message], add_generation_prompt: bool) -> str:
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def make_template() -> tuple[ChatTemplate, ByteTokenizer]:
    tok = ByteTokenizer(merges=["assistant", "user"], specials=["<|im_start|>", "<|im_end|>"])
    return ChatTemplate(tok, render=chatml), tok


def test_history_tokens_decode_to_the_rendered_conversation() -> None:
    template, tok = make_template()
    conv = Conversation(template, "Be brief.")
    user_ids, header = conv.user_prompt_ids("hi")
    conv.add_user("hi", user_ids, turn_id=1)
    generated = tok.encode("Hello!")
    turn = conv.add_assistant("Hello!", header, generated, generated_tokens=len(generated),
                              interrupted=False, spoken_ms=700, turn_id=1)
    assert turn.token_ids == (*header, *generated, *template.end_of_turn_ids)
    assert conv.num_tokens == len(conv.token_ids)
    assert tok.decode(list(conv.token_ids)) == chatml(conv.messages(), False)
    assert [t.role for t in conv.turns] == ["system", "user", "assistant"]
    js = conv.to_json()
    assert js[2]["spoken_ms"] == 700 and js[2]["interrupted"] is False
    assert js[2]["tokens"] == len(turn.token_ids)
    # The next user turn only appends.
    before = conv.token_ids
    user2, header2 = conv.user_prompt_ids("and?")
    conv.add_user("and?", user2)
    assert conv.token_ids[: len(before)] == before
    assert tok.decode(list(conv.token_ids) + list(header2)) == chatml(conv.messages(), True)


@pytest.mark.parametrize("marker", [False, True])
def test_interrupted_turn_keeps_only_kept_ids_and_optional_marker(marker: bool) -> None:
    template, tok = make_template()
    conv = Conversation(template, "", interrupted_marker=marker)
    assert conv.turns == ()
    user_ids, header = conv.user_prompt_ids("tell me")
    conv.add_user("tell me", user_ids)
    kept = tok.encode("Once upon")
    turn = conv.add_assistant("Once upon", header, kept, generated_tokens=40, interrupted=True,
                              spoken_ms=900)
    tail = tok.encode(INTERRUPTED_MARKER) if marker else []
    assert turn.token_ids == (*header, *kept, *tail, *template.end_of_turn_ids)
    assert turn.text == "Once upon" and turn.interrupted
    assert turn.generated_tokens == 40
    assert conv.to_json()[-1]["interrupted"] is True


def test_withdrawn_user_turn_is_popped() -> None:
    template, _ = make_template()
    conv = Conversation(template, "S")
    before = conv.num_tokens
    user_ids, _ = conv.user_prompt_ids("a")
    conv.add_user("a", user_ids)
    popped = conv.pop()
    assert popped.text == "a" and conv.num_tokens == before
    conv.pop()
    with pytest.raises(ValueError):
        conv.pop()


def _reply(pieces: list[str]) -> ReplyTokens:
    r = ReplyTokens()
    for i, p in enumerate(pieces):
        r.add(100 + i, p)
    return r


def test_cut_keeps_tokens_that_end_before_the_heard_offset() -> None:
    r = _reply(["Hello", ",", " wor", "ld", ".", " How", " are", " you", "?"])
    assert r.text == "Hello, world. How are you?"
    # Heard through "world" (offset 12): "Hello" "," " wor" "ld" kept; "." not heard.
    cut = r.cut_at(12)
    assert cut.n_tokens == 4 and cut.text == "Hello, world" and cut.char_end == 12
    # Word ends exclude trailing punctuation: heard through "Hello" keeps no comma.
    cut = r.cut_at(5)
    assert cut.n_tokens == 1 and cut.text == "Hello"
    assert r.cut_at(11).text == "Hello, wor"  # offsets are characters, not words
    assert r.cut_at(0).n_tokens == 0 and r.cut_at(0).text == ""
    assert r.cut_at(len(r.text)).n_tokens == len(r)
    assert r.ids[:4] == (100, 101, 102, 103)


def test_cut_never_keeps_a_token_whose_text_was_held_back() -> None:
    # Token 2 released nothing; its text came out with token 3 (" world").
    r = _reply(["Hello", ",", "", " world", "!"])
    assert r.cut_at(6).n_tokens == 2  # "Hello," heard: token 2 belongs to " world"
    assert r.cut_at(12).n_tokens == 4
    assert r.text_of(2) == "Hello," and r.text_of(5) == "Hello, world!"
    # Held-back text flushed at the end counts toward the last token.
    r2 = _reply(["Hi", ""])
    r2.add_text(" there")
    assert r2.cut_at(2).n_tokens == 1 and r2.cut_at(8).n_tokens == 2
    assert r2.text == "Hi there"
