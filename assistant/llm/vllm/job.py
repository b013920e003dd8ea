"""One generation on a remote sequence: the engine's job rules, on streamed token ids.

The server samples; this client decides what the ids mean with the local engine's own
rules (`engine.reply_job.ReplyJob`, which :class:`engine.job.Job` also is), so that a
conversation's ids are the same on either backend. A sampled id joins the sequence when
the next one arrives (the local engine writes its K/V then), so a cancel keeps the same
ids on both; a finished reply's sequence is cut to the kept ids and closed with the
``end_of_turn`` ids.

Stop strings are matched here, never on the server (the server's text is not the
record); when the client ends a reply first, the backend closes the stream, which
aborts the request on the server.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from engine.detokenize import TokenizerLike
from engine.events import FinishReason, PrefillStats
from engine.params import Priority, SamplingParams
from engine.reply_job import ReplyJob
from engine.reply_text import closing_cut

if TYPE_CHECKING:
    from assistant.llm.vllm.sequence import RemoteSequence

__all__ = ["RemoteJob"]


class RemoteJob(ReplyJob):
    """Created by `VLLMBackend.enqueue`; fed by the backend with the ids the server
    streams (:meth:`on_tokens`)."""

    def __init__(self, job_id: int, seq: RemoteSequence, params: SamplingParams, *,
                 priority: Priority, tokenizer: TokenizerLike,
                 eos_token_ids: Iterable[int]) -> None:
        super().__init__(job_id, params, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
                         context=seq.tokens)
        self.seq = seq
        self.priority = priority
        self.base = len(seq)
        """Sequence length once the prompt is in: the reply starts here."""

    @property
    def prompt_stats(self) -> PrefillStats:
        """What the server computed and reused of the prompt (``cached_tokens``), once
        known; the expected split until then."""
        return self._prompt_stats

    @prompt_stats.setter
    def prompt_stats(self, stats: PrefillStats) -> None:
        self._prompt_stats = stats

    @property
    def max_tokens(self) -> int:
        """Ids the server may still generate for this job (the request's ``max_tokens``):
        what ``max_new_tokens`` leaves, and what fits before the context's end with
        room to close the turn."""
        left = self.params.max_new_tokens - len(self.generated)
        room = self.seq.positions_left - (1 if self._pending is not None else 0) \
            - len(self.params.end_of_turn)
        return max(1, min(left, room))

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
        generated = self.generated
        last = generated[-1] if generated else -1
        self._finish(FinishReason.LENGTH, last, self._text.rest(), generated)

    def finish_cancelled(self) -> None:
        """End now, touching nothing in the sequence (it holds the ids received before
        the last one). The event has token_id -1."""
        self._finish_cancelled(0 if self.seq.released else len(self.seq) - self.base)

    # ---- ReplyJob's hooks --------------------------------------------------------------

    def _positions_left(self) -> int:
        return self.seq.positions_left

    def _decode_steps(self) -> int:
        return len(self.generated)  # the server's steps: one an id

    def _close_turn(self, kept: tuple[int, ...]) -> None:
        """Make the sequence end with prompt + kept + end_of_turn."""
        seq = self.seq
        same, tail = closing_cut(seq.tokens[self.base:], kept, self.params.end_of_turn)
        seq.cut(self.base + same)
        seq.append_generated(*tail)
