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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.errors import ChatTemplateError

__all__ = ["ChatTemplate", "Message"]

Message = Mapping[str, str]
"""``{"role": "system" | "user" | "assistant", "content": str}``."""

_PROBE = "\x1fPROBE\x1f"  # assistant content used to find the template's turn framing
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

    `render` overrides the tokenizer's ``apply_chat_template`` (for tests or templates
    given as a function).
    """

    def __init__(self, tokenizer: Any, *, template: str | None = None,
                 render: Render | None = None) -> None:
        self._tokenizer = tokenizer
        if render is None:
            def render(messages: Sequence[Message], add_generation_prompt: bool) -> str:
                kwargs: dict[str, Any] = {"tokenize": False,
                                          "add_generation_prompt": add_generation_prompt}
                if template is not None:
                    kwargs["chat_template"] = template
                text = tokenizer.apply_chat_template([dict(m) for m in messages], **kwargs)
                return str(text)
        self._render = render
        self._framing: tuple[str, str] | None = None

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    # ---- text ------------------------------------------------------------------------

    def render_text(self, messages: Sequence[Message], *,
                    add_generation_prompt: bool = False) -> str:
        if not messages and not add_generation_prompt:
            return ""
        return self._render(list(messages), add_generation_prompt)

    def message_text(self, history: Sequence[Message], message: Message) -> str:
        """The text the template adds for `message` after `history`."""
        before = self.render_text(history)
        after = self.render_text([*history, message])
        if not after.startswith(before):
            raise ChatTemplateError(_divergence(
                f"appending a {message.get('role')!r} message re-renders the earlier turns",
                before, after))
        return after[len(before):]

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

    def generation_prompt_ids(self, history: Sequence[Message]) -> list[int]:
        return self.encode(self.generation_prompt_text(history))

    def render_ids(self, messages: Sequence[Message], *,
                   add_generation_prompt: bool = False) -> list[int]:
        """The conversation's ids, built message by message."""
        ids: list[int] = []
        for k, message in enumerate(messages):
            ids += self.message_ids(messages[:k], message)
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

    def verify(self, conversations: Sequence[Sequence[Message]] = _PROBE_CONVERSATIONS
               ) -> None:
        """Raise `ChatTemplateError` unless every turn's history renders, and tokenises,
        as a prefix of the next turn's prompt, and an assistant message renders as
        generation prompt + content + end-of-turn text."""
        self._assistant_framing()
        for messages in conversations:
            text = ""
            ids: list[int] = []
            for k, message in enumerate(messages):
                history = messages[:k]
                if message.get("role") == "assistant":
                    opening = self.generation_prompt_text(history)
                    expected = opening + message["content"] + self.end_of_turn_text
                    added = self.message_text(history, message)
                    if added != expected:
                        raise ChatTemplateError(_divergence(
                            "an assistant message does not render as generation prompt + "
                            "content + end-of-turn", expected, added))
                added_ids = self.message_ids(history, message)
                text += self.message_text(history, message)
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


def _divergence(problem: str, expected: str, got: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
              min(len(expected), len(got)))
    return (f"chat template cannot be used incrementally: {problem} (at character {at}: "
            f"expected {expected[at:at + 40]!r}, got {got[at:at + 40]!r})")
