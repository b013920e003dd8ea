"""A tool round trip on Qwen2.5's real chat template (hermetic tokenizer): the registry's
specs in the prompt, the model's call text detected while it streams and parsed, the tool
run, its result appended, and the conversation still incremental."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from assistant.tools import (
    TimerService,
    ToolCall,
    ToolCallDetector,
    Verdict,
    assistant_message,
    build_registry,
    parse_tool_calls,
    run_tool,
)
from engine.chat_template import ChatTemplate
from tests.tools.chatml import chatml_tokenizer


def test_a_call_round_trip_through_the_template() -> None:
    tokenizer = chatml_tokenizer()
    registry = build_registry(["builtin:calculator", "builtin:set_timer"],
                              timers=TimerService(lambda: 0.0))
    template = ChatTemplate(tokenizer, tools=registry.specs_for_template())
    template.verify()
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a voice assistant."},
        {"role": "user", "content": "What is 12.5 times 4?"}]
    prompt = tokenizer.decode(template.render_ids(history, add_generation_prompt=True))
    tools_block = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in tools_block.splitlines()] == (
        registry.specs_for_template())

    # What a model trained on this template writes for the call (as the template writes
    # it), streamed in small pieces: nothing of it is speech.
    call = ToolCall("calculator", {"expression": "12.5 * 4"})
    generated = template.reply_text(history, assistant_message([call]))
    detector = ToolCallDetector()
    steps = [detector.feed(generated[at:at + 3]) for at in range(0, len(generated), 3)]
    assert "".join(step.speech for step in steps) == ""
    assert steps[-1].verdict is Verdict.TOOL_CALL
    reply = parse_tool_calls(detector.text)
    assert reply.calls == (call,) and reply.content == ""

    results = [asyncio.run(run_tool(registry.get(c.name), c.arguments_json, timeout_s=30))
               for c in reply.calls]
    assert [r.output for r in results] == ['{"expression":"12.5 * 4","result":50}']
    conversation = [*history, assistant_message(reply.calls),
                    *(r.message() for r in results),
                    {"role": "assistant", "content": "It is fifty."}]
    template.verify([conversation])
    result_ids = template.messages_ids(conversation[:3], conversation[3:4])
    assert tokenizer.decode(result_ids) == (
        '<|im_start|>user\n<tool_response>\n{"expression":"12.5 * 4","result":50}\n'
        "</tool_response><|im_end|>\n")
