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

from engine.detokenize import IncrementalDetokenizer, TokenizerLike
from engine.events import FinishReason, GenerationResult, PrefillStats, TokenEvent
from engine.params import Priority, SamplingParams
from engine.prefix_index import common_prefix
from engine.stops import StopMatcher

if TYPE_CHECKING:
    from assistant.llm.vllm.sequence import RemoteSequence

__all__ = ["RemoteJob"]

_CONTEXT_TOKENS = 4  # as engine.job: prompt ids decoded with the first generated ones


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
        self._generated: list[int] = []
        self._pending: int | None = None
        self._emitted = 0
        stop_ids = frozenset(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids |= frozenset(eos_token_ids)
        self.stop_ids = stop_ids
        self._stops = StopMatcher(params.stop)
        self._tokenizer = tokenizer
        self._detok = IncrementalDetokenizer(tokenizer, list(seq.tokens)[-_CONTEXT_TOKENS:])
        self._inbox: deque[TokenEvent] = deque()

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def generated(self) -> tuple[int, ...]:
        """Every id received so far (a stop id included)."""
        return tuple(self._generated)

    @property
    def max_tokens(self) -> int:
        """Ids the server may still generate for this job (the request's ``max_tokens``):
        what ``max_new_tokens`` leaves, and what fits before the context's end with
        room to close the turn."""
        left = self.params.max_new_tokens - len(self._generated)
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
        rest = self._detok.text[self._emitted:] + self._detok.flush()
        last = self._generated[-1] if self._generated else -1
        self._finish(FinishReason.LENGTH, last, rest, tuple(self._generated))

    def finish_cancelled(self) -> None:
        """End now, touching nothing in the sequence (it holds the ids received before
        the last one). The event has token_id -1."""
        if self.done:
            return
        in_seq = self._generated[:max(len(self.seq) - self.base, 0)] \
            if not self.seq.released else []
        self._finish(FinishReason.CANCELLED, -1, "", tuple(in_seq), close=False)

    # ---- as engine.job.Job -------------------------------------------------------------

    def _on_token(self, token_id: int) -> None:
        self._generated.append(token_id)
        if token_id in self.stop_ids:
            rest = self._detok.text[self._emitted:] + self._detok.flush()
            self._finish(FinishReason.EOS, token_id, rest, tuple(self._generated[:-1]))
            return
        self._detok.push(token_id)
        text = self._detok.text
        stop_at = self._stops.find(text, self._emitted)
        if stop_at is not None:
            self._finish(FinishReason.STOP, token_id, text[self._emitted:stop_at],
                         self._ids_for_text(text[:stop_at]))
            return
        if len(self._generated) >= self.params.max_new_tokens or not self._room_for_next():
            rest = text[self._emitted:] + self._detok.flush()
            self._finish(FinishReason.LENGTH, token_id, rest, tuple(self._generated))
            return
        hold = min(self._stops.holdback(text), len(text) - self._emitted)
        delta = text[self._emitted:len(text) - hold]
        self._emitted += len(delta)
        self._pending = token_id
        self._event(token_id, delta, finished=False, reason=None)

    def _room_for_next(self) -> bool:
        return self.seq.positions_left >= 2 + len(self.params.end_of_turn)

    def _ids_for_text(self, kept: str) -> tuple[int, ...]:
        count = len(self._generated) - 1
        while count > 0:
            prefix = self._detok.text_of_first(count)
            if kept.startswith(prefix) and not prefix.endswith("\ufffd"):
                break
            count -= 1
        prefix = self._detok.text_of_first(count) if count else ""
        rest = kept[len(prefix):]
        extra = self._tokenizer.encode(rest, add_special_tokens=False) if rest else []
        return tuple(self._generated[:count]) + tuple(int(t) for t in extra)

    def _finish(self, reason: FinishReason, token_id: int, delta: str,
                kept: tuple[int, ...], *, close: bool = True) -> None:
        self._emitted += len(delta)
        text = self._detok.text[:self._emitted]
        self._pending = None
        self.result = GenerationResult(
            token_ids=kept, text=text, finish_reason=reason, prompt=self.prompt_stats,
            sampled_tokens=len(self._generated), decode_steps=len(self._generated))
        self._event(token_id, delta, finished=True, reason=reason)
        if close:
            self._close_turn(kept)

    def _close_turn(self, kept: tuple[int, ...]) -> None:
        """Make the sequence end with prompt + kept + end_of_turn."""
        seq = self.seq
        in_seq = list(seq.tokens[self.base:])
        same = common_prefix(in_seq, kept)
        seq.cut(self.base + same)
        seq.append_generated(*kept[same:], *self.params.end_of_turn)

    def _event(self, token_id: int, delta: str, *, finished: bool,
               reason: FinishReason | None) -> None:
        self._inbox.append(TokenEvent(
            token_id=token_id, text_delta=delta,
            index=len(self._generated) - (0 if token_id < 0 else 1),
            finished=finished, finish_reason=reason, job_id=self.job_id))
