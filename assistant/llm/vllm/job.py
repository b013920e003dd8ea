"""One generation on a remote sequence: the engine's job rules, on streamed token ids.

The server samples; this client decides what the ids mean, exactly as
:class:`engine.job.Job` does on the local engine, so that a conversation's ids are the
same on either backend: a stop id ends the reply (not kept), a stop string ends it at
the string (the ids spelling the text before it are kept), ``max_new_tokens`` or the
context's room ends it, and a finished reply's sequence is cut to the kept ids and
closed with the ``end_of_turn`` ids. A sampled id joins the sequence when the next one
arrives (the local engine writes its K/V then), so a cancel keeps the same ids on both.

Stop strings are matched here, never on the server (the server's text is not the
record); when the client ends a reply first, the backend closes the stream, which
aborts the request on the server.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from engine.detokenize import TokenizerLike
from engine.events import FinishReason, GenerationResult, PrefillStats, TokenEvent
from engine.params import Priority, SamplingParams
from engine.reply_text import ReplyText, closing_cut

if TYPE_CHECKING:
    from assistant.llm.vllm.sequence import RemoteSequence

__all__ = ["RemoteJob"]


class RemoteJob:
    """Created by `VLLMBackend.enqueue`; fed by the backend with the ids the server
    streams (:meth:`on_tokens`)."""

    def __init__(self, job_id: int, seq: RemoteSequence, params: SamplingParams, *,
                 priority: Priority, tokenizer: TokenizerLike,
                 eos_token_ids: Iterable[int]) -> None:
        self.job_id = job_id
        self.seq = seq
        self.params = params
        self.priority = priority
        self.result: GenerationResult | None = None
        self.base = len(seq)
        """Sequence length once the prompt is in: the reply starts here."""
        self.prompt_stats = PrefillStats(0, 0, 0)
        """What the server computed and reused of the prompt (``cached_tokens``), once
        known; the expected split until then."""
        self._pending: int | None = None
        self._text = ReplyText(params, tokenizer, eos_token_ids, seq.tokens)
        self.stop_ids = self._text.stop_ids
        self._inbox: deque[TokenEvent] = deque()

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def generated(self) -> tuple[int, ...]:
        """Every id received so far (a stop id included)."""
        return tuple(self._text.generated)

    @property
    def max_tokens(self) -> int:
        """Ids the server may still generate for this job (the request's ``max_tokens``):
        what ``max_new_tokens`` leaves, and what fits before the context's end with
        room to close the turn."""
        left = self.params.max_new_tokens - len(self._text.generated)
        room = self.seq.positions_left - (1 if self._pending is not None else 0) \
            - len(self.params.end_of_turn)
        return max(1, min(left, room))

    def take_events(self) -> list[TokenEvent]:
        events = list(self._inbox)
        self._inbox.clear()
        return events

    def on_tokens(self, token_ids: Iterable[int]) -> None:
        """Ids the server sampled, in order (ignored once done)."""
        for token_id in token_ids:
            if self.done:
                return
            if self._pending is not None:
                self.seq.append_generated(self._pending)
                self._pending = None
            self._on_token(int(token_id))

    def on_server_finished(self) -> None:
        """The server ended the request without a reason this job recognised (e.g. its
        own length limit): end as the local engine would at ``max_new_tokens``."""
        if self.done:
            return
        generated = self._text.generated
        last = generated[-1] if generated else -1
        self._finish(FinishReason.LENGTH, last, self._text.rest(), tuple(generated))

    def finish_cancelled(self) -> None:
        """End now, touching nothing in the sequence (it holds the ids received before
        the last one). The event has token_id -1."""
        if self.done:
            return
        in_seq = self._text.generated[:max(len(self.seq) - self.base, 0)] \
            if not self.seq.released else []
        self._finish(FinishReason.CANCELLED, -1, "", tuple(in_seq), close=False)

    # ---- as engine.job.Job -------------------------------------------------------------

    def _on_token(self, token_id: int) -> None:
        step = self._text.add(token_id, room_for_next=self._room_for_next())
        if step.finish is not None:
            self._finish(step.finish, token_id, step.delta, step.kept)
            return
        self._pending = token_id
        self._event(token_id, step.delta, finished=False, reason=None)

    def _room_for_next(self) -> bool:
        return self.seq.positions_left >= 2 + len(self.params.end_of_turn)

    def _finish(self, reason: FinishReason, token_id: int, delta: str,
                kept: tuple[int, ...], *, close: bool = True) -> None:
        text = self._text.end(delta)
        self._pending = None
        generated = len(self._text.generated)
        self.result = GenerationResult(
            token_ids=kept, text=text, finish_reason=reason, prompt=self.prompt_stats,
            sampled_tokens=generated, decode_steps=generated)
        self._event(token_id, delta, finished=True, reason=reason)
        if close:
            self._close_turn(kept)

    def _close_turn(self, kept: tuple[int, ...]) -> None:
        """Make the sequence end with prompt + kept + end_of_turn."""
        seq = self.seq
        same, tail = closing_cut(seq.tokens[self.base:], kept, self.params.end_of_turn)
        seq.cut(self.base + same)
        seq.append_generated(*tail)

    def _event(self, token_id: int, delta: str, *, finished: bool,
               reason: FinishReason | None) -> None:
        self._inbox.append(TokenEvent(
            token_id=token_id, text_delta=delta,
            index=len(self._text.generated) - (0 if token_id < 0 else 1),
            finished=finished, finish_reason=reason, job_id=self.job_id))
