"""How a conversation shows the model its tools.

A chat template that renders tools (Qwen2.5's, Llama 3.x's: ``supports_tools()``) gets
them through ``with_tools``: the model sees them the way it was trained to. A template
that ignores them (SmolLM2's plain ChatML) gets the tools described in the system prompt
instead, asking for calls in the Hermes form (``<tool_call>{"name": ..., "arguments":
...}</tool_call>``) that :mod:`assistant.tools.calls` parses; a model that was never
trained on tools follows that poorly (SmolLM2-135M does not choose tools well), but the
loop's plumbing is the same.

``tool_choice``: ``auto`` (the model decides), ``none`` (no tools shown: the model can
only speak), ``required`` (it must call one) or a tool's name (it must call that one).
The last two are told in the prompt here and enforced by decoding the reply to the user
under the call's JSON schema (:func:`forced_call_schema`); the reply to the tools'
results is free (else a required call would follow every result, for ever).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assistant.dialogue.conversation import Conversation, Turn

__all__ = ["DEFAULT_TOOL_SYSTEM_PROMPT", "any_call_schema", "forced_call_schema", "retool", "shown_tools",
           "tools_prompt", "with_tools"]

DEFAULT_TOOL_SYSTEM_PROMPT = "You are a helpful voice assistant."
"""The system prompt of a conversation with tools and none configured: the tools live in
the first message, and a conversation's first message must be a system prompt for it to
change later (tools or instructions)."""


def shown_tools(tools: Sequence[Mapping[str, Any]], tool_choice: str
                ) -> tuple[Mapping[str, Any], ...]:
    """The tool definitions the model is shown under ``tool_choice``."""
    if tool_choice == "none":
        return ()
    if tool_choice not in ("auto", "required"):
        return tuple(t for t in tools if _name(t) == tool_choice)
    return tuple(tools)


def with_tools(renderer: Any, system_prompt: str, tools: Sequence[Mapping[str, Any]],
               tool_choice: str = "auto") -> tuple[Any, str]:
    """(renderer, system prompt) for a conversation with ``tools``."""
    shown = shown_tools(tools, tool_choice)
    if not shown:
        return renderer, system_prompt
    system = system_prompt or DEFAULT_TOOL_SYSTEM_PROMPT
    supports = getattr(renderer, "supports_tools", None)
    if supports is not None and supports():
        return renderer.with_tools(list(shown)), system + _choice_line(tool_choice)
    return renderer, system + "\n\n" + tools_prompt(shown, tool_choice)


def retool(conversation: Conversation, renderer: Any, system_prompt: str,
           tools: Sequence[Mapping[str, Any]], tool_choice: str) -> Turn:
    """The system turn that shows ``tools`` (new instructions, new tools), to swap in
    with ``ContextWindow.change_system``; ``conversation`` renders with ``renderer``'s
    tools from now on. Raises ValueError (``conversation`` unchanged) if its system
    prompt cannot change."""
    shown, text = with_tools(renderer, system_prompt, tools, tool_choice)
    old, conversation.renderer = conversation.renderer, shown
    try:
        return conversation.system_turn(text)
    except ValueError:
        conversation.renderer = old
        raise


def tools_prompt(tools: Sequence[Mapping[str, Any]], tool_choice: str = "auto") -> str:
    """The tools described in words, for a template that does not render them."""
    lines = ["You can call these tools. Each is a JSON schema of its arguments:"]
    for tool in tools:
        fn = tool.get("function", tool)
        lines.append(json.dumps({"name": fn.get("name"), "description": fn.get("description", ""),
                                 "parameters": fn.get("parameters", {})}, ensure_ascii=False))
    lines.append('To call a tool, reply with only <tool_call>{"name": "<tool name>", '
                 '"arguments": {<arguments>}}</tool_call>. You will then get its result '
                 "and answer the user with it. Otherwise, just answer.")
    return "\n".join(lines) + _choice_line(tool_choice)


def forced_call_schema(tools: Sequence[Mapping[str, Any]], tool_choice: str) -> str | None:
    """The JSON schema (as JSON text) a reply to the user must match when ``tool_choice``
    requires a call (``required``: one of the tools; a name: that one), else None. The
    backend then decodes the call under it (`SamplingParams.json_schema`): its arguments
    are valid by construction, and the reply is the call as a JSON object."""
    if tool_choice in ("auto", "none"):
        return None
    return any_call_schema(tools, tool_choice)


def any_call_schema(tools: Sequence[Mapping[str, Any]], tool_choice: str) -> str | None:
    """The JSON schema (as JSON text) of a call of any tool shown under ``tool_choice``
    (None: none shown): what a free reply's call is decoded under once it opens one."""
    shown = shown_tools(tools, tool_choice)
    if not shown:
        return None
    from engine.grammar import tool_call_schema

    by_name = {}
    for tool in shown:
        fn = tool.get("function", tool)
        by_name[str(fn["name"])] = fn.get("parameters") or {"type": "object",
                                                            "properties": {}}
    return json.dumps(tool_call_schema(by_name))


def _choice_line(tool_choice: str) -> str:
    if tool_choice == "required":
        return "\nAlways answer by calling one of the tools."
    if tool_choice not in ("auto", "none"):
        return f"\nAnswer by calling the tool {tool_choice}."
    return ""


def _name(tool: Mapping[str, Any]) -> str:
    return str(tool.get("function", tool).get("name", ""))
