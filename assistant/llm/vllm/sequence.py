"""A conversation on a remote server: the client's list of token ids.

The list is the only record: every generation sends it whole (never text), generated
ids are appended as they arrive, a truncation is a shorter list (the server's prefix
cache makes resending the shared part cheap), a fork is a copy. The K/V behind it lives
in the server's prefix cache, shared by content, so nothing is held per sequence and
releasing one frees nothing there.

Every sequence carries its conversation's routing ``key`` (forks inherit it), so all of
a conversation's requests go to the same replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from assistant.llm.protocol import LLMJob
from engine.errors import ContextLimitError, EngineError, SequenceReleasedError
from engine.events import PrefillStats
from engine.params import Priority

__all__ = ["RemoteSequence", "SequenceOwner"]


class SequenceOwner(Protocol):
    """What a sequence needs from its backend
    (:class:`~assistant.llm.vllm.backend.VLLMBackend`)."""

    @property
    def max_positions(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    def expected_stats(self, seq: RemoteSequence, ids: Sequence[int]) -> PrefillStats: ...

    def new_sequence(self, *, key: int, priority: Priority,
                     tokens: Sequence[int] = ()) -> RemoteSequence: ...

    def on_release(self, seq: RemoteSequence) -> None: ...


class RemoteSequence:
    """`LLMSequence` of :class:`~assistant.llm.vllm.backend.VLLMBackend` (one thread)."""

    def __init__(self, backend: SequenceOwner, seq_id: int, key: int, *,
                 priority: Priority, tokens: Sequence[int] = ()) -> None:
        self.seq_id = seq_id
        self.key = key
        """Routing key of the conversation (see :mod:`~assistant.llm.vllm.router`)."""
        self.priority = priority
        self.job: LLMJob | None = None
        """The generation running on it, if any (a
        :class:`~assistant.llm.vllm.job.RemoteJob`)."""
        self._backend = backend
        self._tokens = [int(t) for t in tokens]
        self._released = False

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(self._tokens)

    @property
    def released(self) -> bool:
        return self._released

    @property
    def positions_left(self) -> int:
        """Tokens that still fit before the model's maximum positions."""
        return self._backend.max_positions - len(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def extend(self, token_ids: Sequence[int]) -> PrefillStats:
        """Append ids; the stats are what the server is expected to compute and reuse for
        them at the next request (its prefix cache, as far as this client knows)."""
        self._idle()
        ids = self._validated(token_ids)
        stats = self._backend.expected_stats(self, ids)
        self._tokens.extend(ids)
        return stats

    def truncate(self, n_tokens: int) -> None:
        self._idle()
        self.cut(n_tokens)

    def fork(self, *, priority: Priority | None = None) -> RemoteSequence:
        self._live()
        return self._backend.new_sequence(
            key=self.key, priority=self.priority if priority is None else priority,
            tokens=self._tokens)

    def release(self) -> None:
        if self._released:
            return
        self._backend.on_release(self)
        self._released = True

    # ---- for the job and the backend ---------------------------------------------------

    def cut(self, n_tokens: int) -> None:
        """Keep the first ``n_tokens`` (the job closing its turn may do so mid-job)."""
        self._live()
        if not 0 <= n_tokens <= len(self._tokens):
            raise ValueError(f"truncate({n_tokens}) on a sequence of {len(self._tokens)} tokens")
        del self._tokens[n_tokens:]

    def append_generated(self, *token_ids: int) -> None:
        self._live()
        self._tokens.extend(self._validated(token_ids))

    def _validated(self, token_ids: Sequence[int]) -> list[int]:
        ids = [int(t) for t in token_ids]
        vocab = self._backend.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"token ids out of range [0, {vocab}): {bad[:5]}")
        if len(self._tokens) + len(ids) > self._backend.max_positions:
            raise ContextLimitError(
                f"sequence {self.seq_id} would pass the model's maximum of "
                f"{self._backend.max_positions} positions")
        return ids

    def _live(self) -> None:
        if self._released:
            raise SequenceReleasedError(f"sequence {self.seq_id} was released")

    def _idle(self) -> None:
        self._live()
        if self.job is not None and not self.job.done:
            raise EngineError(f"sequence {self.seq_id} has a generation running; cancel it "
                              "or let it finish first")
