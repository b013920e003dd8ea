"""The LLM backend protocol: the operations the dialogue needs, and nothing else.

The dialogue (:mod:`assistant.dialogue`) keeps a conversation as one *sequence* of
token ids that always equals the history, forks it to speculate, truncates it on a
barge-in and runs *jobs* (cancellable generations that report token events). A backend
provides those on some KV cache:

- the local paged engine (:mod:`assistant.llm.local`): sequences share KV pages, an
  extend computes only ids whose K/V is not cached;
- a remote server (vLLM): a sequence is the client's id list, sent whole with each
  generation; the server's prefix cache makes the shared part cheap.

So every value here is plain data (ids, counts, text): token ids in, token ids out,
never tensors or engine internals. Backends are not thread-safe: one thread (the
:class:`~assistant.llm.host.EngineHost`) calls them.

Token events, results, sampling parameters and priorities are the engine's frozen value
types (:mod:`engine.events`, :mod:`engine.params`); they import no torch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from engine.detokenize import TokenizerLike
from engine.events import GenerationResult, TokenEvent
from engine.params import Priority, SamplingParams

__all__ = [
    "ExtendStats",
    "BackendStats",
    "LLMSequence",
    "LLMJob",
    "LLMBackend",
    "JobsFailed",
    "OutOfPages",
    "TokenizerLike",
]


class ExtendStats(Protocol):
    """Where the K/V of the ids one extend added came from (counts of tokens)."""

    @property
    def computed(self) -> int:
        """Run through the model (on a remote backend: expected, from its block size)."""
        ...

    @property
    def reused(self) -> int:
        """Taken from the cache (shared or copied), not computed."""
        ...


@dataclass(frozen=True)
class BackendStats:
    """Counters of a backend (zero where a backend cannot tell, e.g. pages remotely)."""

    sequences: int
    """Live (unreleased) sequences."""
    tokens_computed: int
    tokens_reused: int
    tokens_decoded: int
    pages_total: int = 0
    pages_used: int = 0
    """Referenced by a live sequence."""
    pages_free: int = 0
    pages_cached: int = 0
    """Unreferenced but still matchable (evicted least-recently-used first)."""
    pages_shared: int = 0
    """Referenced by more than one sequence."""


class LLMSequence(Protocol):
    """One conversation's token ids and their KV cache.

    Invariant: the backend's cached K/V for this sequence is exactly for ``tokens``.
    """

    priority: Priority

    @property
    def tokens(self) -> tuple[int, ...]: ...

    @property
    def released(self) -> bool: ...

    def __len__(self) -> int: ...

    def extend(self, token_ids: Sequence[int]) -> ExtendStats:
        """Append ids (computing only what is not cached); not while a job runs on it."""
        ...

    def truncate(self, n_tokens: int) -> None:
        """Keep exactly the first ``n_tokens`` (exact: suffix truncation only)."""
        ...

    def fork(self, *, priority: Priority | None = None) -> LLMSequence:
        """A new sequence with the same ids, sharing their cache (copy on write)."""
        ...

    def release(self) -> None:
        """Cancel any job on it and drop it (its cache stays reusable). Idempotent."""
        ...


class LLMJob(Protocol):
    """A generation on a sequence: sampled ids are appended to the sequence as they come."""

    @property
    def done(self) -> bool: ...

    @property
    def result(self) -> GenerationResult | None:
        """Set once done: the kept ids and text, and why it finished."""
        ...

    def take_events(self) -> list[TokenEvent]:
        """Events produced since the last call, in order."""
        ...


class JobsFailed(Exception):
    """A backend step failed in the work of particular jobs, which the backend has already
    cancelled; every other job is unaffected and the backend stays usable."""

    def __init__(self, jobs: tuple[LLMJob, ...], cause: BaseException) -> None:
        super().__init__(f"{len(jobs)} generation(s) failed: {cause}")
        self.jobs = jobs
        self.cause = cause


class OutOfPages(Exception):
    """A step found no KV memory for any job that needs more; nothing was changed.
    Releasing sequences (speculative forks first) lets the next step go on."""


class LLMBackend(Protocol):
    """A KV cache with sequences and jobs (see the module docstring). One thread only."""

    @property
    def name(self) -> str:
        """What it is, for logs (e.g. ``local engine, cpu float32``)."""
        ...

    @property
    def tokenizer(self) -> TokenizerLike: ...

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the model takes (None: no known limit)."""
        ...

    @property
    def capacity_tokens(self) -> int | None:
        """How many tokens of K/V the whole cache holds, over every sequence (None:
        not known here, e.g. a remote server's)."""
        ...

    def sequence(self, *, priority: Priority = Priority.LIVE) -> LLMSequence:
        """A new, empty sequence."""
        ...

    def next_token_probability(self, seq: LLMSequence, token_ids: Collection[int]) -> float:
        """P(the token after ``seq``'s ids is one of ``token_ids``) under the model (the
        end-of-turn score; a remote backend asks for the top log-probabilities)."""
        ...

    def enqueue(self, seq: LLMSequence, params: SamplingParams, *,
                prompt_ids: Sequence[int] = (), priority: Priority | None = None) -> LLMJob:
        """Start a generation on ``seq`` after appending ``prompt_ids``."""
        ...

    def cancel(self, job: LLMJob) -> None:
        """Finish ``job`` now; its sequence keeps the ids whose K/V was written."""
        ...

    def has_work(self) -> bool:
        """Whether :meth:`step` has anything to do."""
        ...

    def step(self) -> None:
        """Advance every active job by one bounded piece of work (batched across jobs).
        Raises `JobsFailed` when only some jobs failed, `OutOfPages` when memory ran out;
        anything else failed the step."""
        ...

    def stats(self) -> BackendStats: ...

    def is_out_of_pages(self, error: BaseException) -> bool:
        """Whether ``error`` (from a step or a sequence operation) means KV memory ran
        out, so that releasing sequences and retrying can succeed."""
        ...

    def check(self) -> None:
        """Verify the backend's invariants; raise naming each problem."""
        ...
