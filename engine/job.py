"""One generation on one sequence: prompt prefill, sampling, stop handling, turn closing.

The scheduler drives jobs (`prompt_chunk` / `on_prefilled`, `decode_item` /
`on_decoded`); a job turns each sampled token into a `TokenEvent`. The sampled token is
"pending" until the next decode step writes its K/V, so the sequence always holds exactly
the tokens whose K/V exists.
When a job finishes (stop string, stop token or length), the sequence is cut to the kept
tokens and the scheduler appends the rest of them and the `end_of_turn` ids before its step
returns (`take_closing`), so the cache holds the closed turn and nothing the text does not.
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
        self._closing: list[int] = []
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
        return self._on_token(self._sampler.sample(self.seq.next_logits(), self.recent()))

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

    def _event(self, token_id: int, delta: str, *, finished: bool,
               reason: FinishReason | None) -> TokenEvent:
        event = TokenEvent(token_id=token_id, text_delta=delta,
                           index=len(self._text.generated) - (0 if token_id < 0 else 1),
                           finished=finished, finish_reason=reason, job_id=self.job_id)
        self._inbox.append(event)
        return event
