"""One generation on one sequence: prompt prefill, sampling, stop handling, turn closing.

The scheduler drives jobs (`prefill_step`, `decode_item` / `on_decoded`); a job turns each
sampled token into a `TokenEvent`. The sampled token is "pending" until the next decode
step writes its K/V, so the sequence always holds exactly the tokens whose K/V exists.
When a job finishes (stop string, stop token or length), the sequence is cut to the kept
tokens and the `end_of_turn` ids are appended, so the cache holds the closed turn and
nothing the text does not.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from engine.detokenize import TokenizerLike
from engine.events import FinishReason, GenerationResult, PrefillStats, TokenEvent
from engine.params import Priority, SamplingParams
from engine.reply_text import CONTEXT_TOKENS, ReplyText, closing_cut
from engine.sampler import Sampler

if TYPE_CHECKING:
    import torch

    from engine.runner import DecodeItem
    from engine.sequence import Sequence

__all__ = ["Job", "JobState"]


class JobState(enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"
    DONE = "done"


class Job:
    """Create with `Engine.enqueue`. `cancel()` may be called from any thread."""

    def __init__(self, job_id: int, seq: Sequence, params: SamplingParams, *,
                 prompt_ids: Iterable[int], priority: Priority, tokenizer: TokenizerLike,
                 eos_token_ids: Iterable[int]) -> None:
        self.job_id = job_id
        self.seq = seq
        self.params = params
        self.priority = priority
        self.state = JobState.PREFILL
        self.result: GenerationResult | None = None
        """Set when the job is done."""
        self.decode_steps = 0
        self._prompt = [int(t) for t in prompt_ids]
        self._prompt_done = 0
        self._prompt_stats = PrefillStats(0, 0, 0)
        self._base = 0  # sequence length once the prompt is in
        self._pending: int | None = None
        self._text = ReplyText(params, tokenizer, eos_token_ids,
                               (list(seq.tokens) + self._prompt)[-CONTEXT_TOKENS:])
        self._sampler = Sampler(params, exempt=self._text.stop_ids)
        self._inbox: deque[TokenEvent] = deque()
        self._cancel = threading.Event()

    # ---- caller side -------------------------------------------------------------------

    def cancel(self) -> None:
        """Ask for cancellation (thread-safe); the scheduler honours it at its next step.
        `Engine.cancel(job)` on the engine's thread cancels at once."""
        self._cancel.set()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    @property
    def done(self) -> bool:
        return self.state is JobState.DONE

    @property
    def generated(self) -> tuple[int, ...]:
        """Every token sampled so far (stop token included)."""
        return tuple(self._text.generated)

    def take_events(self) -> list[TokenEvent]:
        """Events produced since the last call (the job keeps its own copy of each)."""
        events = list(self._inbox)
        self._inbox.clear()
        return events

    # ---- scheduler side ----------------------------------------------------------------

    def prefill_step(self, max_tokens: int) -> list[TokenEvent]:
        """Advance the prompt by at most `max_tokens` computed tokens; once the prompt is in,
        sample the first token."""
        seq = self.seq
        remaining = self._prompt[self._prompt_done:]
        if remaining:
            # The last prompt token is always computed: its logits pick the first token.
            added = seq.extend_step(remaining, max_compute=max_tokens, compute_last=True)
            self._prompt_done += added.total
            self._prompt_stats += added
        if self._prompt_done < len(self._prompt):
            return []
        self._base = len(seq)
        self.state = JobState.DECODE
        return self._on_token(self._sampler.sample(seq.next_logits(), self.recent()))

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
        once (`engine.sampler.sample_batch`), else sample the sequence's logits."""
        if token_id is None:
            token_id = self._sampler.sample(self.seq.next_logits(), self.recent())
        return self._on_token(token_id)

    def finish_cancelled(self) -> list[TokenEvent]:
        """End now, touching nothing in the sequence (its tokens are those whose K/V was
        written). The event has token_id -1: no token goes with it."""
        if self.done:
            return []
        in_seq = self._text.generated[:max(len(self.seq) - self._base, 0)] \
            if not self.seq.released and self.state is JobState.DECODE else []
        return self._finish(FinishReason.CANCELLED, -1, "", tuple(in_seq), close=False)

    # ---- helpers -----------------------------------------------------------------------

    def _on_token(self, token_id: int) -> list[TokenEvent]:
        step = self._text.add(token_id, room_for_next=self._room_for_next())
        if step.finish is not None:
            return self._finish(step.finish, token_id, step.delta, step.kept)
        self._pending = token_id
        return [self._event(token_id, step.delta, finished=False, reason=None)]

    def _room_for_next(self) -> bool:
        """Whether the context can take the pending token, one more, and the end-of-turn
        ids; when not, the job ends now (LENGTH) while the turn can still be closed."""
        return self.seq.positions_left >= 2 + len(self.params.end_of_turn)

    def _finish(self, reason: FinishReason, token_id: int, delta: str,
                kept: tuple[int, ...], *, close: bool = True) -> list[TokenEvent]:
        text = self._text.end(delta)
        self.state = JobState.DONE
        self._pending = None
        self.result = GenerationResult(
            token_ids=kept, text=text, finish_reason=reason, prompt=self._prompt_stats,
            sampled_tokens=len(self._text.generated), decode_steps=self.decode_steps)
        event = self._event(token_id, delta, finished=True, reason=reason)
        if close:
            self._close_turn(kept)
        return [event]

    def _close_turn(self, kept: tuple[int, ...]) -> None:
        """Make the sequence end with prompt + kept + end_of_turn."""
        seq = self.seq
        same, tail = closing_cut(seq.tokens[self._base:], kept, self.params.end_of_turn)
        seq.truncate(self._base + same)
        if tail:
            seq.extend(tail)

    def _event(self, token_id: int, delta: str, *, finished: bool,
               reason: FinishReason | None) -> TokenEvent:
        event = TokenEvent(token_id=token_id, text_delta=delta,
                           index=len(self._text.generated) - (0 if token_id < 0 else 1),
                           finished=finished, finish_reason=reason, job_id=self.job_id)
        self._inbox.append(event)
        return event
