"""The conversation history, kept as text *and* as the exact token ids in the engine.

Each turn stores the ids it added to the engine's sequence, so the history's token
count always equals the sequence length, and a new turn only appends: the engine's
prefix cache then serves every earlier token, and a turn computes only its new tokens.

- A user (or system) turn's ids are what the chat template adds for that message.
- An assistant reply's ids are the reply header (the template's generation prompt),
  the ids that were *generated* (never a re-tokenisation of the text), then the
  template's end-of-turn ids. After a barge-in the generated ids are cut to those
  fully heard, followed by an optional short marker.

Rendering goes through a :class:`TurnRenderer`, which
:class:`engine.chat_template.ChatTemplate` satisfies; tests may pass a fake.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["TurnRenderer", "Turn", "Conversation", "INTERRUPTED_MARKER"]

INTERRUPTED_MARKER = " [interrupted by the user]"
"""Appended (as tokens, before the end of turn) to an interrupted reply when enabled."""


class TurnRenderer(Protocol):
    """Per-message token ids (the shape of :class:`engine.chat_template.ChatTemplate`)."""

    def message_ids(self, history: Sequence[Mapping[str, str]],
                    message: Mapping[str, str]) -> list[int]:
        """Ids the template adds for ``message`` after ``history``."""
        ...

    def generation_prompt_ids(self, history: Sequence[Mapping[str, str]]) -> list[int]:
        """Ids that open the assistant's reply after ``history``."""
        ...

    @property
    def end_of_turn_ids(self) -> tuple[int, ...]:
        """Ids that close an assistant message after its content."""
        ...

    def encode(self, text: str) -> list[int]:
        """Plain text inside a message (used for the interrupted marker)."""
        ...


@dataclass(frozen=True)
class Turn:
    """One message of the conversation."""

    role: str
    """system | user | assistant | tool."""
    text: str
    """What was said: for an assistant turn, exactly the words that were played."""
    token_ids: tuple[int, ...]
    """The ids this turn added to the engine's sequence."""
    interrupted: bool = False
    """An assistant turn cut short by a barge-in."""
    spoken_ms: int = 0
    """Assistant audio actually played, in milliseconds."""
    turn_id: int | None = None
    """The pipeline turn this message belongs to (user and assistant share one)."""
    generated_tokens: int = 0
    """Assistant: tokens generated before any cut (>= kept tokens)."""
    name: str = ""
    """Tool: the tool whose result this is."""

    def message(self) -> dict[str, str]:
        """As a chat template expects it."""
        if self.role == "tool":
            return {"role": "tool", "content": self.text, "name": self.name}
        return {"role": self.role, "content": self.text}

    def to_json(self, *, in_context: bool = True) -> dict[str, Any]:
        return {
            "role": self.role,
            "text": self.text,
            "interrupted": self.interrupted,
            "spoken_ms": self.spoken_ms,
            "turn_id": self.turn_id,
            "tokens": len(self.token_ids),
            "in_context": in_context,
        }


class Conversation:
    """System prompt plus alternating user / assistant turns, with their token ids.

    The record keeps every turn; the model may see fewer. When the context fills, the
    oldest whole exchanges are *hidden* (:meth:`hide_oldest`): they stay in the record
    (``turns``, ``to_json`` marks them) but leave ``token_ids``, ``num_tokens`` and
    ``messages``, which are always exactly the model's context: the system prompt, then
    the visible turns.
    """

    def __init__(self, renderer: TurnRenderer, system_prompt: str = "",
                 *, interrupted_marker: bool = False) -> None:
        self.renderer = renderer
        self.interrupted_marker = interrupted_marker
        self._turns: list[Turn] = []
        self._hidden = 0
        """Turns after the system prompt that the model no longer sees (the oldest)."""
        if system_prompt:
            self.add_message("system", system_prompt)

    # ------------------------------------------------------------------ queries

    @property
    def turns(self) -> tuple[Turn, ...]:
        """Every turn ever said, hidden ones included."""
        return tuple(self._turns)

    @property
    def visible_turns(self) -> tuple[Turn, ...]:
        """The turns the model sees: the system prompt, then all but the hidden ones."""
        return tuple(self._visible(self._hidden))

    @property
    def hidden_turns(self) -> int:
        return self._hidden

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The visible turns' ids, in order: what the engine's sequence must hold."""
        return self.window_ids(self._hidden)

    @property
    def num_tokens(self) -> int:
        return sum(len(turn.token_ids) for turn in self._visible(self._hidden))

    def window_ids(self, hidden: int, system: Turn | None = None) -> tuple[int, ...]:
        """The context's ids if the oldest ``hidden`` turns were hidden (and the system
        prompt were ``system``, from :meth:`system_turn`)."""
        return tuple(t for turn in self._visible(hidden, system) for t in turn.token_ids)

    def exchange_starts(self) -> list[int]:
        """For each visible user turn, how many turns hiding up to it would hide (the
        oldest first): the whole-exchange cut points."""
        first = self._first_hideable()
        return [i - first for i in range(first + self._hidden, len(self._turns))
                if self._turns[i].role == "user"]

    @property
    def system_tokens(self) -> int:
        """Ids of the system prompt (0 without one): they never leave the context."""
        return len(self._turns[0].token_ids) if self._first_hideable() else 0

    @property
    def hideable_turns(self) -> int:
        """Every turn but the system prompt (hiding as many hides all of them)."""
        return len(self._turns) - self._first_hideable()

    def _first_hideable(self) -> int:
        return 1 if self._turns and self._turns[0].role == "system" else 0

    def _visible(self, hidden: int, system: Turn | None = None) -> list[Turn]:
        first = self._first_hideable()
        head = [system] if system is not None and first else self._turns[:first]
        return head + self._turns[first + hidden:]

    @property
    def last(self) -> Turn | None:
        return self._turns[-1] if self._turns else None

    def messages(self) -> list[dict[str, str]]:
        """The model's context as ``[{"role", "content"}]`` (as a chat template expects)."""
        return [t.message() for t in self._visible(self._hidden)]

    def to_json(self) -> list[dict[str, Any]]:
        """Every turn, each marked with whether the model still sees it."""
        first = self._first_hideable()
        return [t.to_json(in_context=not first <= i < first + self._hidden)
                for i, t in enumerate(self._turns)]

    def renders_as(self, decoded: str) -> bool | None:
        """Whether ``decoded`` (the model's sequence as text) is the chat template's
        rendering of the visible turns (None when the renderer cannot render text)."""
        renderer: Any = self.renderer
        if not hasattr(renderer, "render_text"):
            return None
        marker = INTERRUPTED_MARKER if self.interrupted_marker else ""
        messages = [{**t.message(), "content": t.text + (marker if t.interrupted else "")}
                    for t in self.visible_turns]
        return bool(decoded == renderer.render_text(messages))

    # ------------------------------------------------------------------ rendering

    def user_prompt_ids(self, text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(user message ids, reply header ids) that a user turn with ``text`` adds."""
        history = self.messages()
        user = {"role": "user", "content": text}
        return (tuple(self.renderer.message_ids(history, user)),
                tuple(self.renderer.generation_prompt_ids([*history, user])))

    def tool_prompt_ids(self, results: Sequence[tuple[str, str]]
                        ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(tool messages ids, reply header ids) that the results ``(name, output)`` of
        one reply's calls add: rendered as one run, since a template may wrap
        consecutive tool messages together (Qwen2.5 does)."""
        history = self.messages()
        messages = [{"role": "tool", "content": output, "name": name}
                    for name, output in results]
        renderer: Any = self.renderer
        if hasattr(renderer, "messages_ids"):
            ids = list(renderer.messages_ids(history, messages))
        else:
            ids = []
            for i, message in enumerate(messages):
                ids += renderer.message_ids([*history, *messages[:i]], message)
        return tuple(ids), tuple(renderer.generation_prompt_ids([*history, *messages]))

    def closing_ids(self, *, interrupted: bool) -> tuple[int, ...]:
        """Ids appended after an assistant turn's kept tokens."""
        marker = (tuple(self.renderer.encode(INTERRUPTED_MARKER))
                  if interrupted and self.interrupted_marker else ())
        return marker + tuple(self.renderer.end_of_turn_ids)

    # ------------------------------------------------------------------ updates

    def add_message(self, role: str, text: str) -> Turn:
        """Append a whole text message rendered by the template (no reply attached)."""
        ids = self.renderer.message_ids(self.messages(), {"role": role, "content": text})
        turn = Turn(role, text, tuple(ids))
        self._turns.append(turn)
        return turn

    def add_user(self, text: str, token_ids: Sequence[int], *, turn_id: int | None = None) -> Turn:
        """Append a user turn whose ids are ``token_ids`` (from :meth:`user_prompt_ids`)."""
        turn = Turn("user", text, tuple(token_ids), turn_id=turn_id)
        self._turns.append(turn)
        return turn

    def add_tool_results(self, results: Sequence[tuple[str, str]], token_ids: Sequence[int],
                         *, turn_id: int | None = None) -> None:
        """Append the results ``(name, output)`` of a reply's calls as tool turns; the
        run's ids (from :meth:`tool_prompt_ids`) are held by its first turn."""
        ids = tuple(token_ids)
        for i, (name, output) in enumerate(results):
            self._turns.append(Turn("tool", output, ids if i == 0 else (), turn_id=turn_id,
                                    name=name))

    def add_assistant(self, text: str, header_ids: Sequence[int], kept_ids: Sequence[int], *,
                      generated_tokens: int, interrupted: bool, spoken_ms: int,
                      turn_id: int | None = None) -> Turn:
        """Append a generated reply: header ids, ``kept_ids`` generated ids, closing ids.

        ``text`` must be what was played (the kept ids' text). The turn's ``token_ids``
        are exactly what the engine's sequence gained for the reply.
        """
        ids = tuple(header_ids) + tuple(kept_ids) + self.closing_ids(interrupted=interrupted)
        turn = Turn("assistant", text, ids, interrupted=interrupted, spoken_ms=spoken_ms,
                    turn_id=turn_id, generated_tokens=generated_tokens)
        self._turns.append(turn)
        return turn

    def system_turn(self, text: str) -> Turn:
        """The system prompt ``text`` as this conversation's first turn would hold it, to
        replace the current one with (:meth:`replace_system`). Only a conversation that
        has a system prompt can change it: a template may render a default one where
        there is none, so adding one would change the ids of every turn after it."""
        if not self._first_hideable():
            raise ValueError("this conversation has no system prompt to change")
        if not text:
            raise ValueError("the system prompt cannot become empty")
        return Turn("system", text, tuple(self.renderer.message_ids(
            [], {"role": "system", "content": text})))

    def replace_system(self, turn: Turn) -> None:
        """Make ``turn`` (from :meth:`system_turn`) the system prompt."""
        if not self._first_hideable() or turn.role != "system":
            raise ValueError("only a system prompt replaces the system prompt")
        self._turns[0] = turn

    def hide_oldest(self, hidden: int) -> None:
        """Hide the oldest turns from the model, up to ``hidden`` in all (a value from
        :meth:`exchange_starts`, so that whole exchanges go)."""
        first = self._first_hideable()
        if hidden < self._hidden or first + hidden > len(self._turns):
            raise ValueError(f"cannot hide {hidden} turns of {len(self._turns)}")
        if first + hidden < len(self._turns) and self._turns[first + hidden].role != "user":
            raise ValueError("the context must start at a user turn (whole exchanges)")
        self._hidden = hidden

    def pop(self) -> Turn:
        """Remove the last turn (a user turn whose reply was withdrawn, an undone
        exchange's turns)."""
        if not self._turns or (self._hidden
                               and len(self._turns) <= self._first_hideable() + self._hidden):
            raise ValueError("no visible turn to remove")
        return self._turns.pop()
