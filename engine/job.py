"""One generation on one sequence: prompt prefill, sampling, stop handling, turn closing.

The scheduler drives jobs (`prompt_chunk` / `on_prefilled`, `decode_item` /
`on_decoded`); a job turns each sampled token into a `TokenEvent`. The sampled token is
"pending" until the next decode step writes its K/V, so the sequence always holds exactly
the tokens whose K/V exists.
When a job finishes (stop string, stop token, length, or the document of its JSON schema
whole: `engine.grammar`), the sequence is cut to the kept tokens and the scheduler appends
the rest of them and the `end_of_turn` ids before its step returns (`take_closing`), so the
cache holds the closed turn and nothing the text does not.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from engine.detokenize import TokenizerLike
from engine.events import FinishReason, PrefillStats, TokenEvent
from engine.params import Priority, SamplingParams
from engine.reply_job import ReplyJob
from engine.reply_text import CONTEXT_TOKENS, closing_cut
from engine.sampler import Sampler

if TYPE_CHECKING:
    import torch

    from engine.grammar import JsonSchemaConstraint
    from engine.runner import DecodeItem
    from engine.sequence import Sequence

__all__ = ["Job", "JobState"]


class JobState(enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"
    DONE = "done"


class Job(ReplyJob):
    """Create with `Engine.enqueue`. `cancel()` may be called from any thread. What the
    sampled ids mean (stops, lengths, events) is `engine.reply_job.ReplyJob`'s."""

    def __init__(self, job_id: int, seq: Sequence, params: SamplingParams, *,
                 prompt_ids: Iterable[int], priority: Priority, tokenizer: TokenizerLike,
                 eos_token_ids: Iterable[int],
                 constraint: JsonSchemaConstraint | None = None) -> None:
        """``constraint``: the grammar state of ``params.json_schema`` (exactly when it is
        set); the job ends as soon as its document is whole."""
        prompt = [int(t) for t in prompt_ids]
        super().__init__(job_id, params, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
                         context=(list(seq.tokens) + prompt)[-CONTEXT_TOKENS:])
        self.seq = seq
        self.priority = priority
        self.state = JobState.PREFILL
        self.decode_steps = 0
        self._prompt = prompt
        self._prompt_done = 0
        self._base = 0  # sequence length once the prompt is in
        self._closing: list[int] = []
        self._sampler = Sampler(params, exempt=self.stop_ids, constraint=constraint)
        self._cancel = threading.Event()

    # ---- caller side -------------------------------------------------------------------

    def cancel(self) -> None:
        """Ask for cancellation (thread-safe); the scheduler honours it at its next step.
        `Engine.cancel(job)` on the engine's thread cancels at once."""
        self._cancel.set()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    # ---- scheduler side ----------------------------------------------------------------

    @property
    def prompt_left(self) -> list[int]:
        """The prompt ids not in the sequence yet."""
        return self._prompt[self._prompt_done:]

    def prompt_chunk(self, max_tokens: int) -> list[int]:
        """Take what the cache holds of the rest of the prompt, and return the prompt ids to
        compute next (at most `max_tokens`; none once the prompt is in). The scheduler
        computes them, possibly with other jobs' chunks in one forward, then calls
        `on_prefilled`."""
        remaining = self.prompt_left
        if not remaining:
            return []
        # The last prompt token is always computed: its logits pick the first token.
        reused, ids = self.seq.reuse_step(remaining, max_compute=max_tokens,
                                          compute_last=True)
        self._prompt_done += reused.total
        self._prompt_stats += reused
        return ids

    def on_prefilled(self, computed: int) -> list[TokenEvent]:
        """A forward wrote the first `computed` ids `prompt_chunk` returned; once the
        prompt is in, sample the first token."""
        self._prompt_done += computed
        self._prompt_stats += PrefillStats(computed, 0, 0)
        if self._prompt_done < len(self._prompt):
            return []
        self._base = len(self.seq)
        self.state = JobState.DECODE
        token_id = self._sampler.sample(self.seq.next_logits(), self.recent())
        return self._on_token(token_id, complete=self._sampler.complete)

    def decode_item(self) -> DecodeItem:
        assert self._pending is not None
        return self.seq.decode_item(self._pending)

    def on_decoded(self, logits: torch.Tensor) -> None:
        """The decode step wrote the pending token's K/V; `logits` follow it."""
        assert self._pending is not None
        self.seq.commit_decoded(self._pending, logits)
        self._pending = None
        self.decode_steps += 1

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    def recent(self) -> list[int]:
        """The sequence's last ids the repetition penalty looks at (none without one)."""
        return self.seq.tail(self._sampler.window)

    def sample_next(self, token_id: int | None = None) -> list[TokenEvent]:
        """Take the next token: `token_id` when the scheduler sampled the whole batch at
        once (`engine.sampler.sample_batch`, through this job's sampler), else sample the
        sequence's logits."""
        if token_id is None:
            token_id = self._sampler.sample(self.seq.next_logits(), self.recent())
        return self._on_token(token_id, complete=self._sampler.complete)

    def finish_cancelled(self) -> list[TokenEvent]:
        """End now, touching nothing in the sequence (its tokens are those whose K/V was
        written). The event has token_id -1: no token goes with it."""
        in_seq = len(self.seq) - self._base \
            if not self.seq.released and self.state is JobState.DECODE else 0
        return self._finish_cancelled(in_seq)

    # ---- helpers -----------------------------------------------------------------------

    def _positions_left(self) -> int:
        return self.seq.positions_left

    def _decode_steps(self) -> int:
        return self.decode_steps

    def _finish(self, reason: FinishReason, token_id: int, delta: str,
                kept: tuple[int, ...], *, close: bool = True) -> list[TokenEvent]:
        self.state = JobState.DONE
        return super()._finish(reason, token_id, delta, kept, close=close)

    def take_closing(self) -> list[int]:
        """The ids that close the turn, once the job is done: the sequence must be extended
        with them (the scheduler does, with other jobs' in one forward) to end with prompt
        + kept + end_of_turn. Empty after the first call."""
        tail, self._closing = self._closing, []
        return tail

    def _close_turn(self, kept: tuple[int, ...]) -> None:
        """Cut the sequence to prompt + the kept tokens it holds; the rest of kept and the
        end_of_turn ids are `take_closing`'s."""
        seq = self.seq
        same, tail = closing_cut(seq.tokens[self._base:], kept, self.params.end_of_turn)
        seq.truncate(self._base + same)
        self._closing = list(tail)

