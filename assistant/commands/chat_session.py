"""A text conversation as a client of the engine thread (what ``assistant chat`` drives).

:class:`ChatSession` opens a session on an :class:`~assistant.llm.host.EngineHost` (its
own over the backend, or one it is given) whose state is a
:class:`~assistant.dialogue.dialogue.Dialogue`, like every other surface: the dialogue
is built, used and released on the engine thread only. The caller's thread sends
commands (start a turn, finish it, withdraw it, undo, change the seed) and reads what
the host posts back -- the reply's deltas, the turn's start and close, and
:class:`~assistant.llm.host.EngineFailed` -- from one queue. Out of KV memory and
failing steps are the host's to handle; a turn that fails is withdrawn here and its
error raised to the caller, and the conversation goes on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueError, ReplyDelta, TurnClosed, TurnStart
from assistant.llm.host import EngineFailed, EngineHost, HostSession, Priority
from assistant.loop.text_turns import results_label
from assistant.loop.tool_worker import MAX_ROUNDS, LocalTools
from assistant.tools.runner import error_output, run_call

if TYPE_CHECKING:
    from assistant.dialogue.types import DialogueOptions
    from assistant.llm.protocol import BackendStats, LLMBackend
    from engine.chat_template import ChatTemplate

__all__ = ["ChatSession", "TurnRecord"]

R = TypeVar("R")
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnRecord:
    """What one reply cost."""

    prompt_computed: int
    """Prompt tokens run through the model (the new user message and its framing)."""
    prompt_reused: int
    """Prompt positions (history included) served from the cache."""
    generated: int
    """Tokens sampled for the reply."""
    seconds: float
    """Wall time of the turn, prompt included."""
    kind: str = "turn"
    """``turn`` or ``retry``."""

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class _Started:
    start: TurnStart
    hidden_turns: int
    """Turns out of the model's context before the turn started."""


@dataclass(frozen=True)
class _Refused:
    """The dialogue refused the turn (it cannot fit the context): the user's error, not
    the engine's, so it is not logged as an engine failure."""

    error: DialogueError


@dataclass(frozen=True)
class _Closed:
    closed: TurnClosed
    hidden_turns: int
    """Turns out of the model's context once the turn closed."""


@dataclass(frozen=True)
class _Snapshot:
    stats: BackendStats
    tokens: int
    limit: int | None
    visible_turns: int
    hidden_turns: int


class ChatSession:
    """One conversation on the engine thread, driven from the caller's thread (see the
    module docstring). ``host``: an engine host over ``backend`` to open the session on
    (kept open on exit); without one the session runs its own and closes it on exit.
    ``tools``: local tools the replies may call (their definitions in ``options.tools``),
    run on the caller's thread."""

    def __init__(self, backend: LLMBackend, template: ChatTemplate, options: DialogueOptions,
                 *, clock: Callable[[], float] = time.perf_counter,
                 host: EngineHost | None = None, tools: LocalTools | None = None) -> None:
        if host is not None and host.backend is not backend:
            raise ValueError("the engine host must own the chat's backend")
        self.options = options
        self._tools = tools
        self.turns: list[TurnRecord] = []
        self._own_host = host is None
        self.host = EngineHost(backend, name="chat") if host is None else host
        self._clock = clock
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._turn_id = 0
        self._retries = 0
        self._session: HostSession[Dialogue] = self.host.open(
            lambda b: Dialogue(b, template, options), self._events.put, name="chat")
        try:
            self._session.idle().result()  # built (or failed to)
            for event in self._drain():
                if isinstance(event, EngineFailed):
                    raise event.error
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout_s: float = 10.0) -> None:
        """Release the conversation on the engine thread (and stop the host if it is the
        session's own). Idempotent."""
        try:
            self._session.close().result(timeout_s)
        finally:
            if self._own_host:
                self.host.close(timeout_s)

    # ------------------------------------------------------------------ queries

    def query(self, fn: Callable[[Dialogue], R], *, priority: Priority = "normal") -> R:
        """``fn(dialogue)`` run on the engine thread after the commands queued before it;
        its result (or exception)."""
        return self._session.query(fn, priority=priority).result()

    def tokens(self) -> tuple[int, ...]:
        """The token ids of the conversation in the cache."""
        return self.query(lambda d: tuple(d.sequence.tokens))

    @property
    def messages(self) -> list[dict[str, str]]:
        """What the model sees (hidden old exchanges excluded)."""
        return self.query(lambda d: d.conversation.messages())

    # ------------------------------------------------------------------ turns

    def say(self, text: str, out: TextIO, *, kind: str = "turn") -> TurnRecord:
        """Add a user message, stream the reply to `out`. On any failure the turn is
        withdrawn (the conversation stays as it was) and the error raised. A reply that
        calls tools (``tools``) is followed by their results and the reply to them."""
        for event in self._drain():
            self._stale(event)
        started_at = self._clock()
        started, closed = self._turn(lambda d, turn_id: d.start_turn(turn_id, text, None), out)
        if closed.hidden_turns > started.hidden_turns:
            _log.info("the oldest %d turns left the model's context",
                      closed.hidden_turns - started.hidden_turns)
        generated = closed.closed.generated_tokens
        for _ in range(MAX_ROUNDS):
            results = self._run_tools(closed.closed, out)
            if not results:
                break
            label = results_label(results)
            _, closed = self._turn(functools.partial(_answer_results, label=label,
                                                     results=results), out)
            generated += closed.closed.generated_tokens
        record = TurnRecord(started.start.prompt_tokens_computed,
                            started.start.prompt_tokens_reused, generated,
                            self._clock() - started_at, kind)
        self.turns.append(record)
        return record

    def _turn(self, start_turn: Callable[[Dialogue, int], TurnStart], out: TextIO
              ) -> tuple[_Started, _Closed]:
        """One reply: started by ``start_turn(dialogue, turn_id)``, streamed, closed."""
        self._turn_id += 1
        turn_id = self._turn_id

        def start(d: Dialogue) -> _Started | _Refused:
            hidden = d.conversation.hidden_turns
            try:
                return _Started(start_turn(d, turn_id), hidden)
            except DialogueError as exc:  # the turn cannot be (a message too long)
                return _Refused(exc)

        def finish(d: Dialogue) -> _Closed:
            return _Closed(d.finish_turn(turn_id, 0), d.conversation.hidden_turns)

        try:
            self._session.submit(start)
            started = self._expect(_Started)
            self._stream(turn_id, out)
            self._session.submit(finish)
            closed = self._expect(_Closed)
        except BaseException:
            self._withdraw(turn_id)
            raise
        if self._tools is None or not closed.closed.tool_calls:
            out.write("\n")
        return started, closed

    def _run_tools(self, closed: TurnClosed, out: TextIO) -> tuple[tuple[str, str], ...]:
        """Run the calls ``closed`` made (none without local tools); their results."""
        tools = self._tools
        if tools is None or closed.turn.interrupted or not (closed.tool_calls
                                                            or closed.tool_error):
            return ()
        if closed.tool_error is not None:
            return (("", error_output("the tool call could not be read: "
                                      + closed.tool_error)),)
        results = []
        for call in closed.tool_calls:
            out.write(f"[{call.name}({call.arguments})] ")
            out.flush()
            result = asyncio.run(run_call(tools.registry, call.name, call.arguments,
                                          timeout_s=tools.options.timeout_s))
            out.write(f"-> {result.output}\n")
            results.append((call.name, result.output))
        return tuple(results)

    def settle(self) -> None:
        """Wait for this conversation's background work (a context window being
        recomputed) to end: called while the user reads the reply, so the next turn
        finds it done. Background work that fails is dropped, never fatal."""
        self._session.idle().result()
        for event in self._drain():
            self._stale(event)

    def undo(self) -> bool:
        """Drop the last exchange (truncate: nothing is recomputed)."""
        return self.query(lambda d: d.undo_exchange())

    def retry(self, out: TextIO) -> TurnRecord | None:
        """Drop the last exchange and ask it again with a new seed."""
        def undo(d: Dialogue) -> str | None:
            turns = d.conversation.visible_turns
            if len(turns) < 2 or turns[-1].role != "assistant":
                return None
            question = turns[-2].text
            d.undo_exchange()
            return question

        question = self.query(undo)
        if question is None:
            return None
        self._retries += 1
        seeded = replace(self.options, seed=self.options.seed + self._retries)
        self._session.submit(lambda d: d.set_options(seeded))
        try:
            return self.say(question, out, kind="retry")
        finally:
            self._session.submit(lambda d: d.set_options(self.options))

    def stats_text(self) -> str:
        lines = []
        for number, turn in enumerate(self.turns, 1):
            lines.append(f"{turn.kind} {number}: prompt {turn.prompt_computed} computed, "
                         f"{turn.prompt_reused} reused; {turn.generated} tokens in "
                         f"{turn.seconds:.2f} s ({turn.tokens_per_s:.1f} tokens/s)")
        snap = self.query(lambda d: _Snapshot(
            d.backend.stats(), len(d.sequence), d.context_limit,
            len(d.conversation.visible_turns), d.conversation.hidden_turns))
        stats = snap.stats
        lines.append(f"context: {snap.tokens} tokens (limit {snap.limit}), "
                     f"{snap.visible_turns} turns seen, {snap.hidden_turns} hidden")
        lines.append(f"cache: pages used {stats.pages_used}, cached {stats.pages_cached}, "
                     f"free {stats.pages_free}; totals computed {stats.tokens_computed}, "
                     f"reused {stats.tokens_reused}, decoded {stats.tokens_decoded}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ internals

    def _stream(self, turn_id: int, out: TextIO) -> None:
        """Write turn ``turn_id``'s reply deltas to ``out`` until the reply is done."""
        while True:
            event = self._events.get()
            if isinstance(event, EngineFailed):
                raise event.error
            if isinstance(event, ReplyDelta) and event.turn_id == turn_id:
                if event.text:
                    out.write(event.text)
                    out.flush()
                if event.done:
                    return
            elif not isinstance(event, ReplyDelta):
                self._stale(event)

    def _expect(self, kind: type[R]) -> R:
        """The next posted ``kind`` (a command's result); a failure is raised."""
        while True:
            event = self._events.get()
            if isinstance(event, EngineFailed | _Refused):
                raise event.error
            if isinstance(event, kind):
                return event
            self._stale(event)

    def _withdraw(self, turn_id: int) -> None:
        """Remove turn ``turn_id`` if it is open (after a failure or an interrupt)."""
        def withdraw(d: Dialogue) -> None:
            if d.live_turn_id == turn_id:
                d.withdraw_turn(turn_id)
        try:
            self._session.query(withdraw, priority="control").result()
        except Exception:
            _log.exception("withdrawing turn %d failed", turn_id)

    def _drain(self) -> list[Any]:
        events = []
        while True:
            try:
                events.append(self._events.get_nowait())
            except queue.Empty:
                return events

    @staticmethod
    def _stale(event: Any) -> None:
        """Something posted outside a turn: a failure there was background work's."""
        if isinstance(event, EngineFailed):
            _log.info("background work dropped: %s", event.error)


def _answer_results(d: Dialogue, turn_id: int, *, label: str,
                    results: tuple[tuple[str, str], ...]) -> TurnStart:
    return d.start_turn(turn_id, label, None, tool_results=results)
