"""The pipeline's handle on its conversation, which lives on the engine thread.

:class:`DialogueClient` opens a :class:`~assistant.llm.host.HostSession` whose state is
a :class:`~assistant.dialogue.dialogue.Dialogue`, and turns the pipeline's decisions
into commands at the right priority: cuts, withdrawals and speculation cancels are
control (they overtake queued work), turn starts are normal, speculation is low.
Methods only queue; results come back through ``post`` (a
:class:`~assistant.dialogue.types.TurnStart`, the dialogue's outputs,
:class:`~assistant.dialogue.types.TurnClosed`, :class:`TurnWithdrawn`, or
:class:`~assistant.llm.host.EngineFailed`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueOptions

if TYPE_CHECKING:
    from assistant.llm.host import EngineHost, Post
    from assistant.llm.protocol import LLMBackend

__all__ = ["DialogueClient", "TurnWithdrawn"]

R = TypeVar("R")


@dataclass(frozen=True)
class TurnWithdrawn:
    """Turn ``turn_id`` was removed before any of it played."""

    turn_id: int


class DialogueClient:
    """See the module docstring."""

    def __init__(self, host: EngineHost, build: Callable[[LLMBackend], Dialogue], post: Post,
                 *, name: str = "") -> None:
        self._withdrawn: set[int] = set()  # turns withdrawn before they started (host thread)
        self._session = host.open(build, post, name=name)
        self.post = post

    @property
    def name(self) -> str:
        return self._session.name

    # ------------------------------------------------------------------ commands

    def speculate(self, spec_id: int, user_text: str) -> None:
        self._session.submit(lambda d: d.speculate(spec_id, user_text), priority="low")

    def warm(self, user_text: str) -> None:
        """Compute the user's words so far into the cache (see :meth:`Dialogue.warm`)."""
        self._session.submit(lambda d: d.warm(user_text), priority="low")

    def cancel_speculation(self, spec_id: int) -> None:
        self._session.submit(lambda d: d.cancel_speculation(spec_id), priority="control")

    def start_turn(self, turn_id: int, user_text: str, spec_id: int | None, *,
                   max_new_tokens: int | None = None,
                   tool_results: tuple[tuple[str, str], ...] = (), say: str = "") -> None:
        def command(d: Dialogue) -> None:
            if turn_id in self._withdrawn:  # a withdrawal (control) overtook the start
                if spec_id is not None:
                    d.cancel_speculation(spec_id)
                return
            self.post(d.start_turn(turn_id, user_text, spec_id, max_new_tokens=max_new_tokens,
                                   tool_results=tool_results, say=say))
            for out in d.collect():  # a hit's drafted text goes out at once
                self.post(out)
        self._session.submit(command)

    def cut_turn(self, turn_id: int, heard_chars: int, spoken_ms: int) -> None:
        self._session.submit(lambda d: d.cut_turn(turn_id, heard_chars, spoken_ms),
                             priority="control")

    def finish_turn(self, turn_id: int, spoken_ms: int) -> None:
        self._session.submit(lambda d: d.finish_turn(turn_id, spoken_ms))

    def add_tool_results(self, turn_id: int | None,
                         results: tuple[tuple[str, str], ...]) -> None:
        """Record tool results without a reply (the user spoke before they came)."""
        self._session.submit(lambda d: d.add_tool_results(turn_id, results))

    def withdraw_turn(self, turn_id: int) -> None:
        def command(d: Dialogue) -> TurnWithdrawn:
            if d.live_turn_id == turn_id:
                d.withdraw_turn(turn_id)
            else:
                self._withdrawn.add(turn_id)
            return TurnWithdrawn(turn_id)
        self._session.submit(command, priority="control")

    def set_options(self, options: DialogueOptions) -> None:
        """Generation settings from the next turn on."""
        self._session.submit(lambda d: d.set_options(options))

    async def query(self, fn: Callable[[Dialogue], R]) -> R:
        """Run ``fn(dialogue)`` on the engine thread, after the commands queued before it."""
        return await asyncio.wrap_future(self._session.query(fn))

    # ------------------------------------------------------------------ lifecycle

    def idle(self) -> concurrent.futures.Future[None]:
        return self._session.idle()

    def close(self, timeout_s: float = 10.0) -> None:
        """Release the conversation on the engine thread (blocks; call off the loop)."""
        self._session.close().result(timeout_s)
