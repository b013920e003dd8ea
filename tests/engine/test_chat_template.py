"""Chat templates rendered per message: on the packaged SmolLM2 tokenizer, and with tools on
a hermetic byte-level tokenizer carrying Qwen2.5's and SmolLM2's template texts."""

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


# ---- tools ----------------------------------------------------------------------------------
# Hermetic: a byte-level ChatML tokenizer carrying Qwen2.5-Instruct's real chat template
# (tests/tools/data), which renders tools, tool calls and tool results; and SmolLM2's,
# which ignores them.

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
TOOL_CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Oslo and Bergen?"},
    {"role": "assistant", "content": "", "tool_calls": [
        CALL, {"type": "function",
               "function": {"name": "get_weather", "arguments": {"city": "Bergen"}}}]},
    {"role": "tool", "name": "get_weather", "content": '{"sky": "snow"}'},
    {"role": "tool", "name": "get_weather", "content": '{"sky": "rain"}'},
    {"role": "assistant", "content": "Snow in Oslo, rain in Bergen."},
    {"role": "user", "content": "Thanks!"},
]


@pytest.fixture(scope="module")
def qwen() -> Any:
    from tests.tools.chatml import chatml_tokenizer

    return chatml_tokenizer()


@pytest.fixture(scope="module")
def smol_chatml() -> Any:
    from tests.tools.chatml import SMOLLM2_TEMPLATE, chatml_tokenizer

    return chatml_tokenizer(SMOLLM2_TEMPLATE)


def test_qwen_template_with_tools_verifies_incrementally(qwen: Any) -> None:
    template = ChatTemplate(qwen, tools=[WEATHER_TOOL])
    template.verify()  # its probes include a call and a run of two tool results
    template.verify([TOOL_CONVERSATION])
    assert template.supports_tools()
    assert template.tools == (WEATHER_TOOL,)
    assert template.end_of_turn_text == "<|im_end|>\n"
    # The tools are in the first message's text, and every render has them.
    first = template.message_text([], TOOL_CONVERSATION[0])
    assert first.startswith("<|im_start|>system\nYou are terse.\n\n# Tools\n")
    assert '{"type": "function", "function": {"name": "get_weather"' in first
    ids = template.render_ids(TOOL_CONVERSATION, add_generation_prompt=True)
    assert qwen.decode(ids) == qwen.apply_chat_template(
        TOOL_CONVERSATION, tools=[WEATHER_TOOL], tokenize=False, add_generation_prompt=True)


def test_each_unit_is_a_token_prefix_of_the_next_prompt_with_tools(qwen: Any) -> None:
    template = ChatTemplate(qwen, tools=[WEATHER_TOOL])
    boundaries = [1, 2, 3, 5, 6, 7]  # the two tool results are one unit
    for before, after in zip(boundaries, boundaries[1:], strict=False):
        history = template.render_ids(TOOL_CONVERSATION[:before])
        following = template.render_ids(TOOL_CONVERSATION[:after])
        assert following[:len(history)] == history
    # The assistant's call turn is its generation prompt + the calls + end of turn, so
    # generated ids can stay in the cache as they are.
    history = TOOL_CONVERSATION[:2]
    call_turn = template.message_ids(history, TOOL_CONVERSATION[2])
    prompt = template.generation_prompt_ids(history)
    assert call_turn[:len(prompt)] == prompt
    assert tuple(call_turn[-len(template.end_of_turn_ids):]) == template.end_of_turn_ids


def test_tool_results_are_appended_as_one_run(qwen: Any) -> None:
    template = ChatTemplate(qwen, tools=[WEATHER_TOOL])
    history, results = TOOL_CONVERSATION[:3], TOOL_CONVERSATION[3:5]
    # Qwen2.5 wraps a run of results in one user turn: the first result alone is closed,
    # and re-opened when the second follows.
    with pytest.raises(ChatTemplateError, match="append a run of tool messages at once"):
        template.message_text(TOOL_CONVERSATION[:4], TOOL_CONVERSATION[4])
    text = template.messages_text(history, results)
    assert text == ('<|im_start|>user\n<tool_response>\n{"sky": "snow"}\n</tool_response>\n'
                    '<tool_response>\n{"sky": "rain"}\n</tool_response><|im_end|>\n')
    assert template.messages_ids(history, results) == template.encode(text)


def test_reply_text_is_what_the_model_writes_for_its_calls(qwen: Any) -> None:
    template = ChatTemplate(qwen, tools=[WEATHER_TOOL])
    history = TOOL_CONVERSATION[:2]
    assert template.reply_text(history, {"role": "assistant", "content": "",
                                         "tool_calls": [CALL]}) == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    assert template.reply_text(history, {"role": "assistant", "content": "Let me see.",
                                         "tool_calls": [CALL]}).startswith(
        "Let me see.\n<tool_call>\n")
    assert template.reply_text(history, {"role": "assistant", "content": "Hi."}) == "Hi."


def test_with_tools_makes_a_template_for_a_new_set_of_tools(qwen: Any) -> None:
    plain = ChatTemplate(qwen)
    tooled = plain.with_tools([WEATHER_TOOL])
    system = TOOL_CONVERSATION[0]
    assert "# Tools" not in plain.message_text([], system)
    assert "# Tools" in tooled.message_text([], system)
    assert plain.supports_tools()  # the template can; this one just has no tools
    assert plain.with_tools(None).tools == () == plain.tools
    assert tooled.generation_prompt_text(TOOL_CONVERSATION[:2]) == "<|im_start|>assistant\n"


def test_smollm2s_template_ignores_tools(smol_chatml: Any) -> None:
    plain = ChatTemplate(smol_chatml)
    tooled = plain.with_tools([WEATHER_TOOL])
    assert not plain.supports_tools()
    conversation = TOOL_CONVERSATION[:2]
    # The tools never reach the prompt, and a call renders as an empty reply.
    assert tooled.render_text(conversation) == plain.render_text(conversation)
    assert "get_weather" not in tooled.render_text(conversation, add_generation_prompt=True)
    assert tooled.reply_text(conversation, TOOL_CONVERSATION[2]) == ""
    tooled.verify([TOOL_CONVERSATION])  # still incremental (tool results as ChatML turns)


def test_a_render_function_renders_no_tools(qwen: Any) -> None:
    def chatml(messages: Any, add_generation_prompt: bool) -> str:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    custom = ChatTemplate(qwen, render=chatml)
    assert not custom.supports_tools()
    with pytest.raises(ChatTemplateError, match="renders no tools"):
        custom.with_tools([WEATHER_TOOL])
    with pytest.raises(ChatTemplateError, match="renders no tools"):
        ChatTemplate(qwen, render=chatml, tools=[WEATHER_TOOL])


def test_packaged_smollm2_has_no_tools_support(tokenizer: Any) -> None:
    template = ChatTemplate(tokenizer)
    assert not template.supports_tools()
    tooled = template.with_tools([WEATHER_TOOL])
    assert tooled.render_text(CONVERSATION) == template.render_text(CONVERSATION)
    tooled.verify()
