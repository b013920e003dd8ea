"""The speculations of one conversation: forks drafting replies while the user pauses.

:class:`SpeculationPool` starts a draft on a fork of the committed conversation, feeds
its token events into its :class:`~assistant.dialogue.speculation.Speculation` (which
stops at the first clause), cancels drafts (idempotent, and a cancel may overtake its
own start), and hands one over to the dialogue for adoption at the end of the turn.
Cancelled forks are released; their KV pages stay cached and matchable.

Runs on the engine thread with the dialogue, against the LLM backend protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from assistant.dialogue.end_score import open_user_ids, sentence_end_ids
from assistant.dialogue.speculation import (
    Speculation,
    apply_event,
    common_prefix_len,
    sync_reply,
)
from assistant.dialogue.types import EndOfTurnScore, PromptWarmed, SpeculationDrafted
from assistant.speech.voice import DEFAULT_CLAUSES, ClauseRule, ReplyChunker
from engine.events import FinishReason
from engine.params import Priority, SamplingParams

if TYPE_CHECKING:
    from assistant.dialogue.context_window import ContextWindow
    from assistant.dialogue.conversation import Conversation
    from assistant.llm.protocol import LLMBackend, LLMJob, LLMSequence
    from engine.events import TokenEvent

__all__ = ["SpeculationPool"]


class SpeculationPool:
    """See the module docstring."""

    def __init__(self, backend: LLMBackend, params: Callable[[], SamplingParams], *,
                 clauses: ClauseRule = DEFAULT_CLAUSES) -> None:
        self._backend = backend
        self._params = params
        self._clauses = clauses
        self._specs: dict[int, Speculation] = {}
        self._dropped: set[int] = set()
        self._drafted: list[SpeculationDrafted] = []
        self._end_ids: frozenset[int] | None = None
        """The tokens that end a sentence (for the end-of-turn score), found once."""

    def __len__(self) -> int:
        return len(self._specs)

    def has_work(self) -> bool:
        """A draft is still generating, or a drafted clause was not collected yet."""
        return bool(self._drafted) or any(s.job is not None and not s.job.done
                                          for s in self._specs.values())

    def owns(self, job: LLMJob) -> bool:
        return any(s.job is job for s in self._specs.values())

    def start(self, spec_id: int, user_text: str, base: LLMSequence,
              prompt_ids: Sequence[int], *, score_ids: Sequence[int] = (),
              end_ids: Collection[int] = ()) -> float | None:
        """Fork ``base`` and draft the reply after ``prompt_ids``. Ignored (None) if
        ``spec_id`` runs already or was cancelled before it started.

        With ``score_ids`` (the user's message so far, open), also returns P(next token
        in ``end_ids``) after them: the fork is extended up to where they part from
        ``prompt_ids`` and read there, so the score costs no prefill of its own (a
        short side fork covers ids the prompt does not share). Else returns NaN."""
        if spec_id in self._dropped or spec_id in self._specs:
            return None
        fork = base.fork(priority=Priority.SPECULATIVE)
        prompt = tuple(prompt_ids)
        try:
            done, p_end = self._score(fork, prompt, score_ids, end_ids) if score_ids \
                else (0, float("nan"))
            spec = Speculation(spec_id=spec_id, user_text=user_text, prompt_ids=prompt,
                               seq=fork, base_len=len(base), chunker=ReplyChunker(self._clauses))
            spec.job = self._backend.enqueue(fork, self._params(), prompt_ids=prompt[done:],
                                             priority=Priority.SPECULATIVE)
        except BaseException:
            fork.release()
            raise
        self._specs[spec_id] = spec
        return p_end

    def speculate(self, spec_id: int, user_text: str, base: LLMSequence,
                  conversation: Conversation, window: ContextWindow, *, score: bool
                  ) -> EndOfTurnScore | None:
        """Draft the reply to ``user_text`` on a fork of ``base`` (the conversation's
        committed sequence); with ``score``, also P(the user's sentence ends here) (NaN
        when it cannot be read, e.g. when the turn will trim the context first)."""
        user_ids, header = conversation.user_prompt_ids(user_text)
        need = len(base) + len(user_ids) + len(header) + self._max_tokens()
        if not window.fits(need):
            # The turn will trim the context first: a draft here cannot be adopted.
            return EndOfTurnScore(spec_id, float("nan")) if score else None
        score_ids = open_user_ids(conversation, user_text) if score else ()
        if score_ids and self._end_ids is None:
            self._end_ids = sentence_end_ids(conversation.renderer)
        p_end = self.start(spec_id, user_text, base, user_ids + header, score_ids=score_ids,
                           end_ids=self._end_ids or ())
        return EndOfTurnScore(spec_id, p_end) if score and p_end is not None else None

    def warm_user(self, user_text: str, base: LLMSequence, conversation: Conversation,
                  window: ContextWindow) -> PromptWarmed | None:
        """Compute the user's open message so far into the cache (see :meth:`warm`);
        None when it does not fit the context."""
        ids = open_user_ids(conversation, user_text)
        if not ids or not window.fits(len(base) + len(ids) + self._max_tokens()):
            return None
        return PromptWarmed(user_text, len(ids), self.warm(base, ids))

    def _max_tokens(self) -> int:
        return self._params().max_new_tokens

    def warm(self, base: LLMSequence, ids: Sequence[int]) -> int:
        """Extend a throwaway fork of ``base`` with ``ids``: their K/V stays cached (and
        matchable) after it is released. Returns the ids computed (not found cached)."""
        fork = base.fork(priority=Priority.SPECULATIVE)
        try:
            return fork.extend(ids).computed
        finally:
            fork.release()

    def _score(self, fork: LLMSequence, prompt: tuple[int, ...], score_ids: Sequence[int],
               end_ids: Collection[int]) -> tuple[int, float]:
        # Up to where the two part, leaving the draft's job at least one id to compute.
        shared = min(common_prefix_len(prompt, score_ids), len(prompt) - 1)
        if shared:
            fork.extend(prompt[:shared])
        if shared == len(score_ids):
            return shared, self._backend.next_token_probability(fork, end_ids)
        side = fork.fork(priority=Priority.SPECULATIVE)
        try:
            side.extend(score_ids[shared:])
            return shared, self._backend.next_token_probability(side, end_ids)
        finally:
            side.release()

    def cancel(self, spec_id: int) -> None:
        """Drop a speculation (idempotent); its cached pages stay matchable."""
        self._dropped.add(spec_id)
        spec = self._specs.pop(spec_id, None)
        if spec is not None:
            self._stop(spec)
            spec.seq.release()

    def cancel_all(self) -> None:
        for spec_id in list(self._specs):
            self.cancel(spec_id)

    def take(self, spec_id: int | None) -> Speculation | None:
        """Remove ``spec_id`` from the pool with its generation stopped (the caller now
        owns its fork), or None if it is not running."""
        spec = self._specs.pop(spec_id, None) if spec_id is not None else None
        if spec is not None:
            self._stop(spec)
        return spec

    def drop_job(self, job: LLMJob) -> bool:
        """A draft's job failed in the backend: drop that speculation (True if ours)."""
        for spec_id, spec in list(self._specs.items()):
            if spec.job is job:
                self.cancel(spec_id)
                return True
        return False

    def collect(self) -> list[SpeculationDrafted]:
        """Feed every draft its new token events; return the clauses drafted since."""
        for spec in list(self._specs.values()):
            if spec.job is not None:
                for ev in spec.job.take_events():
                    self._on_event(spec, ev)
        out, self._drafted = self._drafted, []
        return out

    # ------------------------------------------------------------------ internals

    def _on_event(self, spec: Speculation, ev: TokenEvent) -> None:
        if spec.done:
            return
        apply_event(spec.reply, ev)
        if ev.finished:
            assert spec.job is not None and spec.job.result is not None
            spec.finish_reason = spec.job.result.finish_reason
            sync_reply(spec.reply, spec.job)
            spec.on_finished()
        elif spec.on_text(ev.text_delta):
            self._stop(spec)  # a clause is enough: stop drafting
        if spec.done and spec.first_clause is not None:
            self._drafted.append(SpeculationDrafted(spec.spec_id, spec.first_clause))

    def _stop(self, spec: Speculation) -> None:
        """Stop a speculation's generation, keeping what its fork holds."""
        job = spec.job
        if job is None or spec.done:
            return
        if not job.done:
            for ev in job.take_events():
                apply_event(spec.reply, ev)
            self._backend.cancel(job)
            job.take_events()
            spec.finish_reason = FinishReason.CANCELLED
        else:
            for ev in job.take_events():
                self._on_event(spec, ev)
