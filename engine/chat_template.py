"""Chat templates rendered incrementally, so consecutive turns share a token prefix.

A conversation is tokenised message by message: the ids of message k are the tokens of
the text the template adds when message k is appended (``render(m[:k+1])`` minus
``render(m[:k])``). Token boundaries then fall on message boundaries, the history of turn k
is a token prefix of turn k+1's prompt, and an assistant message can be kept in history
as the ids that were generated (generation prompt + generated ids + end-of-turn ids),
never re-tokenised. This needs a template that renders earlier messages the same way
whatever follows them; `verify()` checks that and raises `ChatTemplateError` otherwise
(e.g. templates that strip earlier reasoning, or insert a default system prompt only in
some renders).

Tools: a template made with ``tools=`` (OpenAI-style function definitions, as
``apply_chat_template(tools=...)`` takes them) renders them into every render, so they
are part of the first message's ids; changing them means a new template and a new
context. Assistant messages may carry ``tool_calls`` (``[{"type": "function",
"function": {"name", "arguments": {...}}}]``) and tool results are ``{"role": "tool",
"name", "content"}`` messages. A run of consecutive tool messages is one unit: templates
such as Qwen2.5's wrap the whole run in one turn, so the run is appended at once
(`messages_ids`), never one result at a time. Whether a template shows tools at all is
`supports_tools()` (SmolLM2's does not: it ignores ``tools=`` and renders no calls).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.errors import ChatTemplateError

__all__ = ["ChatTemplate", "Message", "ToolDefinition"]

Message = Mapping[str, Any]
"""``{"role": "system" | "user" | "assistant" | "tool", "content": str}``; an assistant
message may add ``tool_calls``, a tool message ``name``."""
ToolDefinition = Mapping[str, Any]
"""``{"type": "function", "function": {"name", "description", "parameters"}}``."""

_PROBE = "\x1fPROBE\x1f"  # assistant content used to find the template's turn framing
_PROBE_TOOL = "zz_probe_tool_7f3a"  # a tool name no template writes on its own
_PROBE_RESULT = '{"probe": 1}'
_PROBE_CONVERSATIONS: tuple[tuple[Message, ...], ...] = (
    ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there."},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}),
    ({"role": "user", "content": "Hi there."},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}),
)

Render = Callable[[Sequence[Message], bool], str]
"""(messages, add_generation_prompt) -> text."""


class ChatTemplate:
    """Per-message token ids for a tokenizer's chat template.

    `template` replaces the tokenizer's own template text; `render` replaces the
    tokenizer's ``apply_chat_template`` altogether (for tests or templates given as a
    function; it renders no tools). `tools` are rendered into every render.
    """

    def __init__(self, tokenizer: Any, *, template: str | None = None,
                 render: Render | None = None,
                 tools: Sequence[ToolDefinition] | None = None) -> None:
        self._tokenizer = tokenizer
        self._template = template
        self._custom_render = render
        self._tools = tuple(dict(t) for t in tools or ())
        if render is not None and self._tools:
            raise ChatTemplateError("a template given as a render function renders no tools")
        self._framing: tuple[str, str] | None = None

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def tools(self) -> tuple[dict[str, Any], ...]:
        """The tool definitions every render shows (empty: none)."""
        return self._tools

    def with_tools(self, tools: Sequence[ToolDefinition] | None) -> ChatTemplate:
        """The same template rendering `tools` (a new conversation's, since the tools
        are part of its first message)."""
        if self._custom_render is not None:
            raise ChatTemplateError("a template given as a render function renders no tools")
        return ChatTemplate(self._tokenizer, template=self._template, tools=tools)

    def supports_tools(self) -> bool:
        """Whether the template shows the model its tools and writes an assistant
        message's tool calls (checked by rendering a probe tool; a template that ignores
        ``tools=``, as SmolLM2's ChatML does, is False)."""
        if self._custom_render is not None:
            return False
        probe = self.with_tools([{"type": "function", "function": {
            "name": _PROBE_TOOL, "description": "A probe.",
            "parameters": {"type": "object", "properties": {}}}}])
        user: Message = {"role": "user", "content": "Hi."}
        call: Message = {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": _PROBE_TOOL, "arguments": {}}}]}
        try:
            shown = _PROBE_TOOL in probe.render_text([user], add_generation_prompt=True)
            called = _PROBE_TOOL in ChatTemplate(
                self._tokenizer, template=self._template).render_text([user, call])
        except Exception:  # a template that raises on tools or tool calls
            return False
        return shown and called

    def _render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        if self._custom_render is not None:
            return self._custom_render(messages, add_generation_prompt)
        kwargs: dict[str, Any] = {"tokenize": False,
                                  "add_generation_prompt": add_generation_prompt}
        if self._template is not None:
            kwargs["chat_template"] = self._template
        if self._tools:
            kwargs["tools"] = [dict(t) for t in self._tools]
        text = self._tokenizer.apply_chat_template([dict(m) for m in messages], **kwargs)
        return str(text)

    # ---- text ------------------------------------------------------------------------

    def render_text(self, messages: Sequence[Message], *,
                    add_generation_prompt: bool = False) -> str:
        if not messages and not add_generation_prompt:
            return ""
        return self._render(list(messages), add_generation_prompt)

    def message_text(self, history: Sequence[Message], message: Message) -> str:
        """The text the template adds for `message` after `history`."""
        return self.messages_text(history, [message])

    def messages_text(self, history: Sequence[Message], messages: Sequence[Message]) -> str:
        """The text the template adds for `messages`, appended together after `history`
        (a run of tool results is appended this way)."""
        before = self.render_text(history)
        after = self.render_text([*history, *messages])
        if not after.startswith(before):
            roles = ", ".join(repr(m.get("role")) for m in messages)
            raise ChatTemplateError(_divergence(
                f"appending a {roles} message re-renders the earlier turns"
                + (" (append a run of tool messages at once)"
                   if history and history[-1].get("role") == "tool" else ""),
                before, after))
        return after[len(before):]

    def reply_text(self, history: Sequence[Message], message: Message) -> str:
        """What the template writes between an assistant message's generation prompt and
        its end of turn: the content and, for a message with ``tool_calls``, the calls as
        the template writes them (what a model trained on it generates)."""
        opening = self.generation_prompt_text(history)
        added = self.message_text(history, message)
        closing = self.end_of_turn_text
        if not added.startswith(opening) or not added.endswith(closing):
            raise ChatTemplateError(_divergence(
                "an assistant message does not render as generation prompt + reply + "
                "end-of-turn", opening + "..." + closing, added))
        return added[len(opening):len(added) - len(closing)]

    def generation_prompt_text(self, history: Sequence[Message]) -> str:
        """The text that opens the assistant's reply after `history`."""
        before = self.render_text(history)
        after = self.render_text(history, add_generation_prompt=True)
        if not after.startswith(before):
            raise ChatTemplateError(_divergence(
                "adding the generation prompt re-renders the conversation", before, after))
        return after[len(before):]

    # ---- ids -------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self._tokenizer.encode(text, add_special_tokens=False)]

    def message_ids(self, history: Sequence[Message], message: Message) -> list[int]:
        return self.encode(self.message_text(history, message))

    def messages_ids(self, history: Sequence[Message],
                     messages: Sequence[Message]) -> list[int]:
        return self.encode(self.messages_text(history, messages))

    def generation_prompt_ids(self, history: Sequence[Message]) -> list[int]:
        return self.encode(self.generation_prompt_text(history))

    def render_ids(self, messages: Sequence[Message], *,
                   add_generation_prompt: bool = False) -> list[int]:
        """The conversation's ids, built message by message (a run of tool messages as
        one)."""
        ids: list[int] = []
        for start, end in _units(messages):
            ids += self.messages_ids(messages[:start], messages[start:end])
        if add_generation_prompt:
            ids += self.generation_prompt_ids(messages)
        return ids

    def turn_ids(self, history: Sequence[Message], user_text: str) -> list[int]:
        """Ids to extend a conversation with for a new user message, up to the assistant's
        generation prompt."""
        user = {"role": "user", "content": user_text}
        return self.message_ids(history, user) + self.generation_prompt_ids([*history, user])

    @property
    def end_of_turn_text(self) -> str:
        """What follows an assistant message's content (ChatML: ``<|im_end|>\\n``)."""
        return self._assistant_framing()[1]

    @property
    def end_of_turn_ids(self) -> tuple[int, ...]:
        """Ids that close an assistant turn; appended to the cache after a reply."""
        return tuple(self.encode(self.end_of_turn_text))

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Special tokens in the end-of-turn text: sampling one ends the reply."""
        special = set(getattr(self._tokenizer, "all_special_ids", ()) or ())
        return tuple(t for t in dict.fromkeys(self.end_of_turn_ids) if t in special)

    # ---- verification ---------------------------------------------------------------

    def verify(self, conversations: Sequence[Sequence[Message]] | None = None) -> None:
        """Raise `ChatTemplateError` unless every turn's history renders, and tokenises,
        as a prefix of the next turn's prompt, and an assistant message renders as
        generation prompt + content (or its tool calls) + end-of-turn text.

        The default conversations are plain ones and, for a template with tools, one that
        calls the first tool and gets its result."""
        self._assistant_framing()
        if conversations is None:
            conversations = _PROBE_CONVERSATIONS + self._tool_probe_conversations()
        for messages in conversations:
            text = ""
            ids: list[int] = []
            for start, end in _units(messages):
                history, unit = messages[:start], messages[start:end]
                message = unit[0]
                if message.get("role") == "assistant" and not message.get("tool_calls"):
                    expected = (self.generation_prompt_text(history) + message["content"]
                                + self.end_of_turn_text)
                    added = self.message_text(history, message)
                    if added != expected:
                        raise ChatTemplateError(_divergence(
                            "an assistant message does not render as generation prompt + "
                            "content + end-of-turn", expected, added))
                elif message.get("role") == "assistant":
                    self.reply_text(history, message)  # framed like any reply
                added_ids = self.messages_ids(history, unit)
                text += self.messages_text(history, unit)
                ids += added_ids
                decoded = self._tokenizer.decode(ids)
                if decoded != text:
                    raise ChatTemplateError(_divergence(
                        "per-message token ids do not decode to the rendered conversation",
                        text, decoded))
            full = self.render_text(messages)
            if full != text:
                raise ChatTemplateError(_divergence(
                    "the conversation renders differently from its messages one by one",
                    text, full))

    def _tool_probe_conversations(self) -> tuple[tuple[Message, ...], ...]:
        if not self._tools:
            return ()
        function = self._tools[0].get("function", self._tools[0])
        name = str(function.get("name", "tool"))
        call = {"type": "function", "function": {"name": name, "arguments": {}}}
        return ((
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Use the tool."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": name, "content": _PROBE_RESULT},
            {"role": "tool", "name": name, "content": _PROBE_RESULT},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Thanks."},
        ),)

    def _assistant_framing(self) -> tuple[str, str]:
        """(generation prompt, end-of-turn text) around an assistant message."""
        if self._framing is None:
            history: list[Message] = [{"role": "user", "content": "Hi."}]
            added = self.message_text(history, {"role": "assistant", "content": _PROBE})
            opening = self.generation_prompt_text(history)
            at = added.find(_PROBE)
            if at < 0 or added[:at] != opening:
                raise ChatTemplateError(_divergence(
                    "the template does not open an assistant message with its generation "
                    "prompt", opening, added[:max(at, 0)]))
            self._framing = (opening, added[at + len(_PROBE):])
        return self._framing


def _units(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """[start, end) of each unit appended at once: a run of tool messages, or one
    message."""
    units: list[tuple[int, int]] = []
    start = 0
    while start < len(messages):
        end = start + 1
        if messages[start].get("role") == "tool":
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
        units.append((start, end))
        start = end
    return units


def _divergence(problem: str, expected: str, got: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
              min(len(expected), len(got)))
    return (f"chat template cannot be used incrementally: {problem} (at character {at}: "
            f"expected {expected[at:at + 40]!r}, got {got[at:at + 40]!r})")
