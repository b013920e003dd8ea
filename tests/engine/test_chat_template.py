"""Chat templates rendered per message, on the packaged SmolLM2 tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import ChatTemplateError
from engine.chat_template import ChatTemplate

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi! What's 2+2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And the capital of France?"},
    {"role": "assistant", "content": "Paris, of course."},
]


@pytest.fixture(scope="module")
def tokenizer(llm_dir: Path) -> Any:
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(llm_dir), local_files_only=True)


def test_smollm2_template_verifies_and_exposes_its_end_of_turn(tokenizer: Any) -> None:
    template = ChatTemplate(tokenizer)
    template.verify()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert template.end_of_turn_text == "<|im_end|>\n"
    assert template.end_of_turn_ids == tuple(tokenizer.encode("<|im_end|>\n",
                                                              add_special_tokens=False))
    assert template.stop_token_ids == (im_end,)


def test_each_turn_is_a_token_prefix_of_the_next_prompt(tokenizer: Any) -> None:
    template = ChatTemplate(tokenizer)
    for k in range(1, len(CONVERSATION)):
        history = template.render_ids(CONVERSATION[:k])
        if CONVERSATION[k]["role"] == "assistant":
            history = template.render_ids(CONVERSATION[:k], add_generation_prompt=True)
        following = template.render_ids(CONVERSATION[:k + 1])
        assert following[:len(history)] == history
    ids = template.render_ids(CONVERSATION)
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(CONVERSATION, tokenize=False)


def test_generated_ids_stay_in_history_as_they_are(tokenizer: Any) -> None:
    template = ChatTemplate(tokenizer)
    history = CONVERSATION[:2]
    prompt = template.render_ids(history, add_generation_prompt=True)
    # A reply tokenised differently from how the tokenizer would encode its text.
    generated = [t for word in ("Fo", "ur", ".") for t in template.encode(word)]
    assert generated != template.encode("Four.")
    cached = prompt + generated + list(template.end_of_turn_ids)
    reply = {"role": "assistant", "content": tokenizer.decode(generated)}
    next_prompt = cached + template.turn_ids([*history, reply], "Thanks")
    assert tokenizer.decode(next_prompt) == tokenizer.apply_chat_template(
        [*history, reply, {"role": "user", "content": "Thanks"}], tokenize=False,
        add_generation_prompt=True)


def test_per_message_ids_absorb_smollm2s_default_system_prompt(tokenizer: Any) -> None:
    template = ChatTemplate(tokenizer)
    user = {"role": "user", "content": "Hello"}
    reply = {"role": "assistant", "content": "Hi."}
    # Rendering a message on its own re-inserts the default system prompt ...
    assert "SmolLM" in template.render_text([reply])
    # ... so message ids come from the difference of cumulative renders instead.
    assert "SmolLM" in template.message_text([], user)
    assert "SmolLM" not in template.message_text([user], reply)
    template.verify([[user, reply, {"role": "user", "content": "Bye"}]])


def test_verify_rejects_a_template_that_rerenders_earlier_turns(tokenizer: Any) -> None:
    # Like templates that drop earlier reasoning: only the last message is shown in full.
    summarising = ("{% for m in messages %}<|im_start|>{{ m.role }}\n"
                   "{% if loop.last or m.role != 'assistant' %}{{ m.content }}"
                   "{% else %}...{% endif %}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(ChatTemplateError, match="re-renders the earlier turns"):
        ChatTemplate(tokenizer, template=summarising).verify()


def test_verify_rejects_a_template_whose_generation_prompt_differs(tokenizer: Any) -> None:
    mismatched = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                  "<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>bot\n{% endif %}")
    with pytest.raises(ChatTemplateError, match="generation prompt"):
        ChatTemplate(tokenizer, template=mismatched).verify()
