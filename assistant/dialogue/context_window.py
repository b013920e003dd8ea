"""Keeping a conversation inside the model's context, exactly and off the critical path.

When the live sequence nears the limit (the model's maximum positions, or a configured
smaller budget), the oldest whole exchanges are dropped from what the model sees; the
system prompt always stays. Cached K/V is never shifted (re-rotating RoPE keys, as
llama.cpp's context shift does, degrades the output): the kept window is *recomputed*
exactly, on a sequence of its own, by a background job at speculative priority that
starts when a turn closes -- live replies never wait for it. The window is swapped in
between turns (or at the next turn start); if the history moved on meanwhile, only the
difference is computed then. Only when a turn would pass the limit before the window
is ready is the rest computed at once.

A new system prompt (a client's changed instructions) takes the same path: the context
with the new prompt is recomputed in the background and swapped in between turns, or at
the next turn's start at the latest, computing then whatever is left.

:class:`ContextWindow` holds that one planned window; the dialogue decides when to
plan, adopt or drop it. Runs on the engine thread against the LLM backend protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from assistant.dialogue.speculation import common_prefix_len
from assistant.dialogue.types import DialogueError
from engine.events import FinishReason
from engine.params import Priority, SamplingParams

if TYPE_CHECKING:
    from assistant.dialogue.conversation import Conversation, Turn
    from assistant.llm.protocol import LLMBackend, LLMJob, LLMSequence

__all__ = ["ContextWindow", "Adopted"]

_log = logging.getLogger(__name__)


@dataclass
class _Plan:
    hidden: int
    """Turns after the system prompt the window leaves out."""
    ids: tuple[int, ...]
    seq: LLMSequence
    job: LLMJob | None
    system: Turn | None = None
    """The new system prompt the window holds, if it brings one."""


@dataclass(frozen=True)
class Adopted:
    """A window swapped in: the new live sequence and what it cost."""

    seq: LLMSequence
    hidden_turns: int
    tokens: int
    computed_now: int
    """Tokens computed at adoption (the rest was computed in the background)."""


class ContextWindow:
    """See the module docstring. ``limit`` None means no limit."""

    def __init__(self, backend: LLMBackend, conversation: Conversation, *,
                 limits: Iterable[int | None] = ()) -> None:
        self._backend = backend
        self._conv = conversation
        self._limits = [n for n in limits if n]
        """The fixed limits (the model's positions, a configured maximum); 0/None: none."""
        self.limit: int | None = min(self._limits) if self._limits else None
        self._plan: _Plan | None = None
        self._system: Turn | None = None
        """A new system prompt waiting to be swapped in (kept when a plan is dropped)."""

    def set_budget(self, tokens: int | None, headroom: int) -> None:
        """A cache share (tokens) on top of the fixed limits, never below the system
        prompt plus ``headroom`` (one whole turn)."""
        limits = list(self._limits)
        if tokens is not None:
            limits.append(max(tokens, self._conv.system_tokens + headroom))
        self.limit = min(limits) if limits else None

    # ------------------------------------------------------------------ queries

    def has_work(self) -> bool:
        return self._plan is not None and self._plan.job is not None and not self._plan.job.done

    def owns(self, job: LLMJob) -> bool:
        return self._plan is not None and self._plan.job is job

    @property
    def planned(self) -> bool:
        return self._plan is not None

    @property
    def ready(self) -> bool:
        """The background recompute finished (the window can be swapped in for free)."""
        return self._plan is not None and (self._plan.job is None or self._plan.job.done)

    @property
    def system_pending(self) -> bool:
        """A new system prompt waits to be swapped in (:meth:`change_system`)."""
        return self._system is not None

    def fits(self, tokens: int) -> bool:
        return self.limit is None or tokens <= self.limit

    def require(self, tokens: int) -> None:
        """A turn needs ``tokens`` of context even with every old turn hidden."""
        if not self.fits(tokens):
            raise DialogueError(
                f"this turn does not fit in the context: {tokens} tokens with the system "
                f"prompt, the limit is {self.limit} (the model's maximum, "
                f"llm.max_context_tokens, or this conversation's share of the KV cache)")

    # ------------------------------------------------------------------ changes

    def change_system(self, system: Turn, live_tokens: int, headroom: int) -> None:
        """Recompute the context with the system prompt ``system`` in the background, to
        be swapped in like a window (a planned window is planned again around it)."""
        self.drop()
        self._system = system
        self.plan(live_tokens, headroom)

    def plan(self, live_tokens: int, headroom: int) -> bool:
        """After a turn closed: if the next turn might not fit (``live_tokens`` plus
        ``headroom``), or a new system prompt waits, start recomputing the window in the
        background."""
        if self._plan is not None:
            return False
        over = self.limit is not None and live_tokens + headroom > self.limit
        if not over and self._system is None:
            return False
        hidden = self._choose(headroom) if over else self._conv.hidden_turns
        ids = self._conv.window_ids(hidden, self._system)
        seq = self._backend.sequence(priority=Priority.SPECULATIVE)
        try:
            job = self._backend.enqueue(seq, SamplingParams(max_new_tokens=1),
                                        prompt_ids=ids, priority=Priority.SPECULATIVE)
        except BaseException:
            seq.release()
            raise
        self._plan = _Plan(hidden, ids, seq, job, self._system)
        if over:
            _log.info("context %d/%d tokens: recomputing a %d-token window without the "
                      "oldest %d turns", live_tokens, self.limit, len(ids),
                      hidden - self._conv.hidden_turns)
        if self._system is not None:
            _log.info("recomputing the context (%d tokens) with the new system prompt",
                      len(ids))
        return True

    def collect(self) -> None:
        """Note the end of the background recompute (a cancelled one is dropped)."""
        plan = self._plan
        if plan is None or plan.job is None or not plan.job.done:
            return
        plan.job.take_events()
        result = plan.job.result
        plan.job = None
        if result is not None and result.finish_reason is FinishReason.CANCELLED:
            self.drop()

    def adopt(self) -> Adopted | None:
        """Bring the planned window up to the current history (computing what changed
        since it was planned, and whatever the background job has not done), hide the
        turns it leaves out, and hand over its sequence. None if nothing is planned."""
        plan = self._plan
        if plan is None:
            return None
        self._plan = None
        try:
            if plan.job is not None and not plan.job.done:
                self._backend.cancel(plan.job)  # the rest is computed now
            plan.job = None
            ids = self._conv.window_ids(plan.hidden, plan.system)
            keep = min(common_prefix_len(plan.seq.tokens, ids), len(plan.seq))
            plan.seq.truncate(keep)
            computed = plan.seq.extend(ids[keep:]).computed if keep < len(ids) else 0
        except BaseException:
            plan.seq.release()
            raise
        self._conv.hide_oldest(plan.hidden)
        self._take_system(plan.system)
        plan.seq.priority = Priority.LIVE
        _log.info("context window swapped in: %d tokens, %d turns hidden, %d computed now",
                  len(ids), plan.hidden, computed)
        return Adopted(plan.seq, plan.hidden, len(ids), computed)

    def trim_now(self, seq: LLMSequence, headroom: int) -> int | None:
        """The next turn would not fit: hide the oldest turns now, recomputing the kept
        window on ``seq`` itself (cut back to what it shares with the window, the
        system prompt at least) so the cache never holds both. Returns the tokens
        computed, None if nothing was left to hide. If even the window does not fit in
        the cache, every turn is hidden (the context is the system prompt) and the
        error is raised: the conversation stays consistent and can go on."""
        self.drop()  # a plan not finished in time is cheaper to redo in place
        if self.limit is None:
            return None
        hidden = self._choose(headroom)
        system = self._system
        if hidden == self._conv.hidden_turns and system is None:
            return None
        ids = self._conv.window_ids(hidden, system)
        seq.truncate(min(common_prefix_len(seq.tokens, ids), len(seq)))
        try:
            computed = seq.extend(ids[len(seq):]).computed
        except BaseException:
            self._conv.hide_oldest(self._conv.hideable_turns)
            seq.truncate(min(len(seq), self._conv.num_tokens))
            if len(seq) < self._conv.num_tokens:  # the cut went into the system prompt
                seq.extend(self._conv.token_ids[len(seq):])
            raise
        self._conv.hide_oldest(hidden)
        self._take_system(system)
        _log.info("context trimmed now: %d tokens, %d turns hidden, %d computed", len(ids),
                  hidden, computed)
        return computed

    def adopt_or_drop(self) -> Adopted | None:
        """:meth:`adopt`, except that a window the cache has no pages to finish (the
        history moved on since it was planned) is dropped: the next turn trims in place
        if it must."""
        try:
            return self.adopt()
        except Exception as exc:
            if not self._backend.is_out_of_pages(exc):
                raise
            _log.info("context window dropped: no KV pages to finish it (%s)", exc)
            return None

    def drop(self) -> None:
        """Forget the planned window (memory pressure, failure, close). Idempotent."""
        plan, self._plan = self._plan, None
        if plan is None:
            return
        if plan.job is not None and not plan.job.done:
            self._backend.cancel(plan.job)
        plan.seq.release()

    # ------------------------------------------------------------------ internals

    def _take_system(self, system: Turn | None) -> None:
        """The context now holds ``system``: the conversation's system prompt is it."""
        if system is None:
            return
        self._conv.replace_system(system)
        if self._system is system:
            self._system = None

    def _choose(self, headroom: int) -> int:
        """How many turns to hide: the fewest whole exchanges that bring the window to
        half of what the limit leaves after ``headroom`` (so trims stay rare); failing
        that, the fewest that leave room for ``headroom``; else every turn."""
        assert self.limit is not None
        room = max(0, self.limit - headroom)
        starts = [h for h in self._conv.exchange_starts() if h > self._conv.hidden_turns]
        for target in (room // 2, room):  # never hide the last exchange just to save more
            for hidden in starts:
                if len(self._conv.window_ids(hidden, self._system)) <= target:
                    return hidden
        return self._conv.hideable_turns
