"""What a generation makes of the ids sampled for it, wherever they are sampled.

:class:`ReplyJob` is the part shared by the local engine's :class:`engine.job.Job` and
the vLLM backend's ``RemoteJob`` (ids streamed from a server), so that a conversation's
ids are the same on either backend: each id goes through `engine.reply_text.ReplyText`
(a stop id ends the reply and is not kept; a stop string ends it at the string, keeping
the ids that spell the text before it; ``max_new_tokens`` or the context's room ends
it); a sampled id stays *pending* until the next one (the local engine writes its K/V
then), so a cancel keeps the same ids on both; the reply's events queue for
:meth:`ReplyJob.take_events`; a finished reply's turn is closed with the
``end_of_turn`` ids. How the sequence is cut and closed, and what was computed, are the
subclass's (:meth:`_close_turn`, :meth:`_decode_steps`, :meth:`_positions_left`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from engine.detokenize import TokenizerLike
from engine.events import FinishReason, GenerationResult, PrefillStats, TokenEvent
from engine.params import SamplingParams
from engine.reply_text import ReplyText

__all__ = ["ReplyJob"]


class ReplyJob:
    """See the module docstring. ``context``: the ids before the reply (the tail the
    stop strings and the detokenizer need)."""

    def __init__(self, job_id: int, params: SamplingParams, *, tokenizer: TokenizerLike,
                 eos_token_ids: Iterable[int], context: Iterable[int]) -> None:
        self.job_id = job_id
        self.params = params
        self.result: GenerationResult | None = None
        """Set when the job is done."""
        self._text = ReplyText(params, tokenizer, eos_token_ids, list(context))
        self.stop_ids = self._text.stop_ids
        self._pending: int | None = None
        self._prompt_stats = PrefillStats(0, 0, 0)
        self._inbox: deque[TokenEvent] = deque()

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def generated(self) -> tuple[int, ...]:
        """Every id sampled so far (a stop id included)."""
        return tuple(self._text.generated)

    def take_events(self) -> list[TokenEvent]:
        """Events produced since the last call (the job keeps its own copy of each)."""
        events = list(self._inbox)
        self._inbox.clear()
        return events

    # ---- for the subclasses -------------------------------------------------------------

    def _positions_left(self) -> int:
        """Positions the sequence may still take."""
        raise NotImplementedError

    def _decode_steps(self) -> int:
        """Decode steps this job took (for its result)."""
        raise NotImplementedError

    def _close_turn(self, kept: tuple[int, ...]) -> None:
        """Make the sequence end with the prompt, ``kept`` and the end-of-turn ids."""
        raise NotImplementedError

    def _on_token(self, token_id: int, *, complete: bool = False) -> list[TokenEvent]:
        """The next sampled id: it ends the reply or becomes the pending id. ``complete``:
        the reply is whole with it (a JSON schema's document is, see
        `SamplingParams.json_schema`): it ends here, every id kept, as if a stop id
        followed (the reason is EOS, as a server that samples that stop id reports)."""
        room = self._room_for_next() and not complete
        step = self._text.add(token_id, room_for_next=room)
        if step.finish is not None:
            reason = step.finish
            if complete and reason is FinishReason.LENGTH:
                reason = FinishReason.EOS
            return self._finish(reason, token_id, step.delta, step.kept)
        self._pending = token_id
        return [self._event(token_id, step.delta, finished=False, reason=None)]

    def _room_for_next(self) -> bool:
        """Whether the context can take the pending id, one more, and the end-of-turn
        ids; when not, the job ends now (LENGTH) while the turn can still be closed."""
        return self._positions_left() >= 2 + len(self.params.end_of_turn)

    def _finish(self, reason: FinishReason, token_id: int, delta: str,
                kept: tuple[int, ...], *, close: bool = True) -> list[TokenEvent]:
        text = self._text.end(delta)
        self._pending = None
        self.result = GenerationResult(
            token_ids=kept, text=text, finish_reason=reason, prompt=self._prompt_stats,
            sampled_tokens=len(self._text.generated), decode_steps=self._decode_steps())
        event = self._event(token_id, delta, finished=True, reason=reason)
        if close:
            self._close_turn(kept)
        return [event]

    def _finish_cancelled(self, in_sequence: int) -> list[TokenEvent]:
        """End now, touching nothing in the sequence, whose last ``in_sequence`` ids are
        this reply's. The event has token_id -1: no id goes with it."""
        if self.done:
            return []
        kept = tuple(self._text.generated[:max(in_sequence, 0)])
        return self._finish(FinishReason.CANCELLED, -1, "", kept, close=False)

    def _event(self, token_id: int, delta: str, *, finished: bool,
               reason: FinishReason | None) -> TokenEvent:
        event = TokenEvent(token_id=token_id, text_delta=delta,
                           index=len(self._text.generated) - (0 if token_id < 0 else 1),
                           finished=finished, finish_reason=reason, job_id=self.job_id)
        self._inbox.append(event)
        return event
