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

:class:`ContextWindow` holds that one planned window; the dialogue decides when to
plan, adopt or drop it. Runs on the engine thread against the LLM backend protocol.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from assistant.dialogue.speculation import common_prefix_len
from assistant.dialogue.types import DialogueError
from engine.events import FinishReason
from engine.params import Priority, SamplingParams

if TYPE_CHECKING:
    from assistant.dialogue.conversation import Conversation
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
                 limit: int | None) -> None:
        self._backend = backend
        self._conv = conversation
        self.limit = limit
        self._plan: _Plan | None = None

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

    def fits(self, tokens: int) -> bool:
        return self.limit is None or tokens <= self.limit

    def require(self, tokens: int) -> None:
        """A turn needs ``tokens`` of context even with every old turn hidden."""
        if not self.fits(tokens):
            raise DialogueError(
                f"this turn does not fit in the model's context: {tokens} tokens with the "
                f"system prompt, the limit is {self.limit}")

    # ------------------------------------------------------------------ changes

    def plan(self, live_tokens: int, headroom: int) -> bool:
        """After a turn closed: if the next turn might not fit (``live_tokens`` plus
        ``headroom``), start recomputing a smaller window in the background."""
        if self.limit is None or self._plan is not None or live_tokens + headroom <= self.limit:
            return False
        hidden = self._choose(headroom)
        ids = self._conv.window_ids(hidden)
        seq = self._backend.sequence(priority=Priority.SPECULATIVE)
        try:
            job = self._backend.enqueue(seq, SamplingParams(max_new_tokens=1),
                                        prompt_ids=ids, priority=Priority.SPECULATIVE)
        except BaseException:
            seq.release()
            raise
        self._plan = _Plan(hidden, ids, seq, job)
        _log.info("context %d/%d tokens: recomputing a %d-token window without the oldest "
                  "%d turns", live_tokens, self.limit, len(ids),
                  hidden - self._conv.hidden_turns)
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
            ids = self._conv.window_ids(plan.hidden)
            keep = min(common_prefix_len(plan.seq.tokens, ids), len(plan.seq))
            plan.seq.truncate(keep)
            computed = plan.seq.extend(ids[keep:]).computed if keep < len(ids) else 0
        except BaseException:
            plan.seq.release()
            raise
        self._conv.hide_oldest(plan.hidden)
        plan.seq.priority = Priority.LIVE
        _log.info("context window swapped in: %d tokens, %d turns hidden, %d computed now",
                  len(ids), plan.hidden, computed)
        return Adopted(plan.seq, plan.hidden, len(ids), computed)

    def force(self, headroom: int) -> Adopted | None:
        """Plan (if needed) and adopt now: the next turn would not fit otherwise."""
        if self._plan is None and self.limit is not None:
            hidden = self._choose(headroom)
            if hidden == self._conv.hidden_turns:
                return None  # nothing left to hide
            seq = self._backend.sequence(priority=Priority.SPECULATIVE)
            self._plan = _Plan(hidden, (), seq, None)
        return self.adopt()

    def drop(self) -> None:
        """Forget the planned window (memory pressure, failure, close). Idempotent."""
        plan, self._plan = self._plan, None
        if plan is None:
            return
        if plan.job is not None and not plan.job.done:
            self._backend.cancel(plan.job)
        plan.seq.release()

    # ------------------------------------------------------------------ internals

    def _choose(self, headroom: int) -> int:
        """How many turns to hide: the fewest whole exchanges that bring the window to
        half of what the limit leaves after ``headroom`` (so trims stay rare); failing
        that, the fewest that leave room for ``headroom``; else every turn."""
        assert self.limit is not None
        room = max(0, self.limit - headroom)
        starts = [h for h in self._conv.exchange_starts() if h > self._conv.hidden_turns]
        everything = len(self._conv.turns) - (1 if self._conv.turns and
                                              self._conv.turns[0].role == "system" else 0)
        for target in (room // 2, room):  # never hide the last exchange just to save more
            for hidden in starts:
                if len(self._conv.window_ids(hidden)) <= target:
                    return hidden
        return everything
