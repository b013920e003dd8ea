"""The conversation on an LLM backend: one live sequence that always equals the history.

:class:`Dialogue` owns the backend's live sequence and the :class:`Conversation`, and
keeps them equal token for token between turns: a turn appends the user message and
the reply header (computing only those ids), the reply is generated on the same
sequence (:class:`~assistant.dialogue.live_turn.LiveTurn`), and the turn is closed
with what was *heard* -- all of it, or after a barge-in the generated ids up to the
last fully played word, then the end-of-turn ids. Speculative forks
(:class:`~assistant.dialogue.speculation_pool.SpeculationPool`) are adopted on a hit.

Written against the LLM backend protocol (:mod:`assistant.llm.protocol`), never an
engine. Not thread-safe: it lives on the engine thread
(:class:`~assistant.llm.host.EngineHost`), which steps the backend and then calls
:meth:`Dialogue.collect` for the outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assistant.dialogue import tool_prompt as tp
from assistant.dialogue.context_window import Adopted, ContextWindow
from assistant.dialogue.conversation import Conversation, TurnRenderer
from assistant.dialogue.live_turn import LiveTurn, reply_params
from assistant.dialogue.prompt_in import put_prompt
from assistant.dialogue.said import open_said_turn
from assistant.dialogue.speculation_pool import SpeculationPool
from assistant.dialogue.types import (
    DialogueError,
    DialogueOptions,
    DialogueOutput,
    EndOfTurnScore,
    PromptWarmed,
    TurnClosed,
    TurnStart,
)
from assistant.tools.calls import ToolCallDetector, is_speech
from engine.params import Priority, SamplingParams

if TYPE_CHECKING:
    from assistant.llm.protocol import LLMBackend, LLMJob, LLMSequence

__all__ = ["Dialogue"]


class Dialogue:
    """See the module docstring."""

    def __init__(self, backend: LLMBackend, renderer: TurnRenderer,
                 options: DialogueOptions) -> None:
        self.backend = backend
        self._options = options
        self._next_options: DialogueOptions | None = None
        self._renderer = renderer
        """The template without tools (the conversation's renderer may show them)."""
        shown, system = tp.with_tools(renderer, options.system_prompt, options.tools,
                                   options.tool_choice)
        self.conversation = Conversation(shown, system,
                                         interrupted_marker=options.interrupted_marker)
        self._seq: LLMSequence = backend.sequence(priority=Priority.LIVE)
        try:
            self._seq.extend(self.conversation.token_ids)
        except BaseException:
            self._seq.release()
            raise
        self._specs = SpeculationPool(backend, lambda: self._params(speculative=True),
                                      clauses=options.clauses)
        self._window = ContextWindow(backend, self.conversation, limits=(
            options.max_context_tokens, backend.max_positions))
        self._live: LiveTurn | None = None
        self._outbox: list[DialogueOutput] = []
        self._closed = False

    # ------------------------------------------------------------------ queries

    @property
    def options(self) -> DialogueOptions:
        return self._options

    @property
    def sequence(self) -> LLMSequence:
        """The live sequence (history, plus the open turn if any)."""
        return self._seq

    @property
    def context_limit(self) -> int | None:
        """The most tokens the context may hold now (model, config and cache share)."""
        return self._window.limit

    @property
    def live_turn_id(self) -> int | None:
        return self._live.turn_id if self._live else None

    def reply_text(self) -> str:
        """Text of the open turn's reply so far."""
        return self._live.reply.text if self._live else ""

    def has_work(self) -> bool:
        """This conversation has generation in flight or outputs not collected yet."""
        live = self._live
        return (bool(self._outbox) or self._specs.has_work() or self._window.has_work()
                or (live is not None and live.running))

    def owns(self, job: LLMJob) -> bool:
        live = self._live
        return ((live is not None and live.job is job) or self._specs.owns(job)
                or self._window.owns(job))

    def job_failed(self, job: LLMJob) -> bool:
        """A job of ours failed in the backend: background work (a draft, a context
        recompute) is simply dropped (True); a live reply's failure is the caller's."""
        if self._window.owns(job):
            self._window.drop()
            return True
        return self._specs.drop_job(job)

    def in_sync(self) -> bool:
        """True when no turn is open and the sequence holds exactly the history's ids."""
        return self._live is None and self._seq.tokens == self.conversation.token_ids

    def history_text_matches(self) -> bool | None:
        """Whether the sequence decodes to the chat template's rendering of the history
        (None when the renderer cannot tell)."""
        return self.conversation.renders_as(self.sequence_text())

    def sequence_text(self) -> str:
        """The live sequence, decoded (for inspection and tests)."""
        return str(self.backend.tokenizer.decode(list(self._seq.tokens)))

    # ------------------------------------------------------------------ settings

    def set_options(self, options: DialogueOptions) -> None:
        """New generation settings, effective from the next turn (a reply in progress
        keeps the settings it started with). A new system prompt is computed into the
        context in the background and swapped in between turns, before the next turn
        at the latest (`ContextWindow.change_system`); a conversation that started
        without one cannot get one."""
        current = self._next_options or self._options
        if (options.system_prompt, options.tools, options.tool_choice) != (
                current.system_prompt, current.tools, current.tool_choice):
            try:
                system = tp.retool(self.conversation, self._renderer, options.system_prompt,
                                options.tools, options.tool_choice)
            except ValueError as exc:
                raise DialogueError(f"the system prompt cannot change: {exc}") from None
            self._window.change_system(system, len(self._seq), self._headroom())
        if self._live is None:
            self._options, self._next_options = options, None
        else:
            self._next_options = options

    # ------------------------------------------------------------------ speculation

    def speculate(self, spec_id: int, user_text: str) -> EndOfTurnScore | None:
        """Fork the committed conversation and draft the reply to ``user_text``; with
        ``score_end_of_turn``, also return P(the user's sentence ends here) (NaN when it
        cannot be read).

        Ignored while a reply is open or once ``spec_id`` was cancelled (a cancel may
        overtake its own queued start)."""
        if self._live is not None:
            return None
        return self._specs.speculate(spec_id, user_text, self._seq, self.conversation,
                                     self._window, score=self._options.score_end_of_turn)

    def warm(self, user_text: str) -> PromptWarmed | None:
        """Compute the user's message so far (``user_text``, left open) on a throwaway
        fork, so that the speculation at the pause finds it cached and computes only what
        came after. None while a reply is open, or when it does not fit the context."""
        if self._live is not None:
            return None
        return self._specs.warm_user(user_text, self._seq, self.conversation, self._window)

    def cancel_speculation(self, spec_id: int) -> None:
        """Drop a speculation (idempotent); its cached pages stay matchable."""
        self._specs.cancel(spec_id)

    # ------------------------------------------------------------------ turns

    def start_turn(self, turn_id: int, user_text: str, spec_id: int | None,
                   *, max_new_tokens: int | None = None,
                   tool_results: tuple[tuple[str, str], ...] = (), say: str = "") -> TurnStart:
        """Commit the user's turn and start the reply (adopting a matching speculation).
        ``max_new_tokens`` overrides the option for this reply only. With
        ``tool_results`` (``(name, output)`` of the last reply's calls) the turn is those
        results instead of a user message (``user_text`` only labels it); with ``say``,
        the reply is that text, given (:mod:`~.said`), after no user message."""
        if self._live is not None:
            raise DialogueError(f"turn {turn_id} started while turn {self._live.turn_id} is open")
        if say:
            self._fit_context("", len(say))
            self._specs.cancel_all()
            self._live, start, delta = open_said_turn(self._seq, self.conversation,
                                                      self.backend.tokenizer, turn_id, say)
            self._outbox.append(delta)
            return start
        limit = max_new_tokens or self._options.max_new_tokens
        self._fit_context(user_text, limit)
        user_ids, header = (self.conversation.tool_prompt_ids(tool_results) if tool_results
                            else self.conversation.user_prompt_ids(user_text))
        prompt = user_ids + header
        # A required call is decoded under its schema from its first token: no draft
        # (generated free) is adopted into it.
        schema = None if tool_results else tp.forced_call_schema(self._options.tools,
                                                               self._options.tool_choice)
        spec = None if tool_results or schema else self._specs.take(spec_id)
        self._specs.cancel_all()
        base = len(self._seq)
        put = put_prompt(self._seq, prompt, spec)
        self._seq, reply, pending_done = put.seq, put.reply, put.pending_done
        if tool_results:
            self.conversation.add_tool_results(tool_results, user_ids, turn_id=turn_id)
        else:
            self.conversation.add_user(user_text, user_ids, turn_id=turn_id)
        live = LiveTurn(turn_id=turn_id, user_text=user_text, header_ids=header,
                        reply_start=base + len(prompt), reply=reply, drafted=put.drafted,
                        calls=ToolCallDetector() if self._tools_shown else None,
                        call_schema=None if schema else tp.any_call_schema(
                            self._options.tools, self._options.tool_choice))
        self._live = live
        drafted = live.open_with_draft(whole=pending_done)
        if drafted is not None:
            self._outbox.append(drafted)
        if not pending_done:
            # The turn must close inside the context.
            room = (None if self._window.limit is None else self._window.limit - len(self._seq)
                    - len(self.conversation.closing_ids(interrupted=True)))
            live.generate(self.backend, self._seq, lambda n, json_schema: self._params(
                max_new_tokens=n, json_schema=json_schema), limit=limit, room=room,
                json_schema=schema)
        return put.turn_start(turn_id, user_text, len(prompt), spec)

    def collect(self) -> list[DialogueOutput]:
        """What came out of the backend for this conversation since the last call (call
        after each backend step; the engine thread does)."""
        out: list[DialogueOutput] = [d for d in self._specs.collect()
                                     if not self._tools_shown or is_speech(d.text)]
        self._window.collect()
        if self._live is None and not len(self._specs) and self._window.ready:
            self._adopt_window()  # between turns: nobody waits for it
        if self._live is not None:
            delta = self._live.collect(self.backend, self._options.loop_guard)
            if delta is not None:
                self._outbox.append(delta)
        out += self._outbox
        self._outbox = []
        return out

    def finish_turn(self, turn_id: int, spoken_ms: int) -> TurnClosed:
        """The reply played to its end: keep all of it."""
        live = self._require(turn_id)
        if not live.finished:
            # Playback can only end after the text did; be safe and keep what exists.
            live.cancel(self.backend)
        return self._close(live, len(live.reply), spoken_ms, interrupted=False)

    def cut_turn(self, turn_id: int, heard_chars: int, spoken_ms: int) -> TurnClosed:
        """Barge-in: keep the generated tokens whose text ends within ``heard_chars``."""
        live = self._require(turn_id)
        live.cancel(self.backend)
        return self._close(live, live.heard_tokens(heard_chars), spoken_ms, interrupted=True)

    def withdraw_turn(self, turn_id: int) -> None:
        """Remove the open turn entirely (reply and user message), as if never started."""
        live = self._require(turn_id)
        live.cancel(self.backend)
        self._live = None
        last = self.conversation.last
        if not live.said and (last is None or last.role not in ("user", "tool")
                              or last.turn_id != turn_id):
            raise DialogueError("withdrawn turn did not end with its user message")
        while (last := self.conversation.last) is not None and last.turn_id == turn_id:
            self.conversation.pop()
        self._seq.truncate(self.conversation.num_tokens)
        self._check_sync()
        self._turn_boundary()
        self._window.plan(len(self._seq), self._headroom())

    def add_tool_results(self, turn_id: int | None,
                         results: tuple[tuple[str, str], ...]) -> None:
        """Record the results ``(name, output)`` of the last reply's calls without
        replying (the user spoke first): the next turn follows them."""
        self._between_turns("tool results")
        ids, _ = self.conversation.tool_prompt_ids(results)
        self._seq.extend(ids)
        self.conversation.add_tool_results(results, ids, turn_id=turn_id)
        self._check_sync()

    def undo_exchange(self) -> bool:
        """Remove the last exchange (user message and reply) from the history and the
        sequence: a truncate, nothing is recomputed. False if none is in the context."""
        self._between_turns("undo")
        turns = self.conversation.visible_turns
        if len(turns) < 2 or (turns[-2].role, turns[-1].role) != ("user", "assistant"):
            return False
        self._window.drop()  # planned for the longer history
        self.conversation.pop()
        self.conversation.pop()
        self._seq.truncate(self.conversation.num_tokens)
        self._check_sync()
        return True

    def abort(self) -> None:
        """Stop all generation after a backend failure (the open turn stays open, with
        what it has; no more text comes)."""
        self._specs.cancel_all()
        self._window.drop()
        if self._live is not None:
            self._live.cancel(self.backend)

    def shed(self) -> bool:
        """Release background work (speculative forks, a context recompute) under memory
        pressure; True if there was any."""
        had = len(self._specs) > 0 or self._window.planned
        self._specs.cancel_all()
        self._window.drop()
        return had

    def tokens_held(self) -> int:
        return len(self._seq)

    def sequences_held(self) -> int:
        """Backend sequences this conversation holds (live, drafts, a planned window)."""
        return 1 + len(self._specs) + (1 if self._window.planned else 0)

    def set_token_budget(self, tokens: int | None) -> None:
        """This conversation's share of the KV cache, in tokens (None: no share). The
        context is kept under it as under the model's limit; never below what one turn
        needs (the system prompt, a user message and a whole reply). A smaller budget
        trims at the next turn boundary (in the background if no turn is open)."""
        self._window.set_budget(tokens, self._headroom())
        if self._live is None and not self._closed:
            self._window.plan(len(self._seq), self._headroom())

    def close(self) -> None:
        """Cancel everything and release every sequence. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._specs.cancel_all()
        self._window.drop()
        if self._live is not None:
            self._live.cancel(self.backend)
            self._live = None
        self._seq.release()

    # ------------------------------------------------------------------ internals

    def _params(self, *, speculative: bool = False, max_new_tokens: int | None = None,
                 json_schema: str | None = None) -> SamplingParams:
        return reply_params(self._options, self.conversation.renderer, speculative=speculative,
                            max_new_tokens=max_new_tokens, json_schema=json_schema)

    @property
    def _tools_shown(self) -> bool:
        return bool(tp.shown_tools(self._options.tools, self._options.tool_choice))

    def _between_turns(self, what: str) -> None:
        """No turn may be open for ``what``; drafts (forked from the history it
        changes) are dropped."""
        if self._live is not None:
            raise DialogueError(f"{what} while turn {self._live.turn_id} is open")
        self._specs.cancel_all()

    def _require(self, turn_id: int) -> LiveTurn:
        if self._live is None or self._live.turn_id != turn_id:
            raise DialogueError(f"turn {turn_id} is not the open turn")
        return self._live

    def _close(self, live: LiveTurn, n_keep: int, spoken_ms: int, *,
               interrupted: bool) -> TurnClosed:
        # The end-of-turn ids are never generated into the sequence (see _params): the
        # turn cuts to what is kept, then closes as the template does.
        closed = live.close(self._seq, self.conversation, n_keep, spoken_ms,
                            interrupted=interrupted)
        self._live = None
        self._check_sync()
        self._turn_boundary()
        self._window.plan(len(self._seq), self._headroom())
        return closed

    def _headroom(self) -> int:
        o = self._options
        return (o.max_new_tokens + o.user_turn_allowance
                + len(self.conversation.closing_ids(interrupted=True)))

    def _fit_context(self, user_text: str, max_new_tokens: int) -> None:
        """Before a turn: swap in a ready window (a new system prompt even if not ready:
        the rest is computed now); if the turn would not fit, trim now."""
        if self._window.system_pending and not self._window.planned:
            self._window.plan(len(self._seq), self._headroom())
        if self._window.ready or self._window.system_pending:
            self._adopt_window()
        user_ids, header = self.conversation.user_prompt_ids(user_text)
        prompt = len(user_ids) + len(header)
        if not self._window.fits(len(self._seq) + prompt + 1 + max_new_tokens):
            self._specs.cancel_all()  # drafts were forked from the old context
            self._window.trim_now(self._seq, self._options.user_turn_allowance + max_new_tokens)
            self._check_sync()
            self._window.require(self.conversation.num_tokens + prompt + 1)

    def _adopt_window(self) -> None:
        self._swap(self._window.adopt_or_drop())

    def _swap(self, adopted: Adopted | None) -> None:
        if adopted is None:
            return
        self._specs.cancel_all()  # drafts were forked from the old context
        self._seq.release()
        self._seq = adopted.seq
        self._check_sync()

    def _turn_boundary(self) -> None:
        if self._next_options is not None:
            self._options, self._next_options = self._next_options, None

    def _check_sync(self) -> None:
        if self._seq.tokens != self.conversation.token_ids:
            raise DialogueError(
                f"engine sequence ({len(self._seq)} tokens) differs from the history "
                f"({self.conversation.num_tokens} tokens)")
