"""Outputs of the engine: token events, generation results and cache accounting."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["EngineStats", "FinishReason", "GenerationResult", "PrefillStats", "TokenEvent"]


class FinishReason(enum.StrEnum):
    STOP = "stop"
    """A stop string matched; the text and the cache end before it."""
    EOS = "eos"
    """An EOS / end-of-turn / stop token was sampled."""
    LENGTH = "length"
    """`max_new_tokens` reached."""
    CANCELLED = "cancelled"
    """Cancelled by the caller, or the sequence was released."""


@dataclass(frozen=True)
class PrefillStats:
    """Where the K/V of the tokens added by one extend came from (counts of tokens)."""

    computed: int
    """Run through the model."""
    referenced: int
    """Covered by shared full pages (refcount +1, no compute, no copy)."""
    copied: int
    """Copied from a page with the same parent key (partial-page reuse)."""

    @property
    def total(self) -> int:
        return self.computed + self.referenced + self.copied

    @property
    def reused(self) -> int:
        return self.referenced + self.copied

    def __add__(self, other: PrefillStats) -> PrefillStats:
        return PrefillStats(self.computed + other.computed, self.referenced + other.referenced,
                            self.copied + other.copied)


@dataclass(frozen=True)
class TokenEvent:
    """One sampled token of a generation, in order.

    `text_delta` is text that became final with this token: text that could still turn
    into a stop string, and incomplete UTF-8, is held back and released by a later event.
    The concatenated deltas of a generation equal its final text exactly.
    """

    token_id: int
    text_delta: str
    index: int
    """0-based index of the token among this generation's sampled tokens."""
    finished: bool
    finish_reason: FinishReason | None
    job_id: int
    """The generation (`Job.job_id`) this event belongs to."""


@dataclass(frozen=True)
class GenerationResult:
    """The outcome of a finished generation."""

    token_ids: tuple[int, ...]
    """Generated ids kept in the sequence (before any `end_of_turn` ids): the stop token
    and the stop text are excluded. After a cancel: the ids whose K/V was written."""
    text: str
    """The concatenated text deltas."""
    finish_reason: FinishReason
    prompt: PrefillStats
    """Accounting of the prompt extend this generation started with."""
    sampled_tokens: int
    """Tokens sampled, including any stop token and tokens cut with a stop string."""
    decode_steps: int
    """Batched decode steps this generation took part in."""


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the cache. Token counters are cumulative since the engine started."""

    page_size: int
    """Tokens per page."""
    pages_total: int
    pages_used: int
    """Referenced by at least one live sequence."""
    pages_free: int
    """Empty and unreferenced."""
    pages_cached: int
    """Unreferenced but holding matchable K/V; evicted least-recently-used when needed."""
    pages_shared: int
    """Referenced by more than one sequence."""
    tokens_computed: int
    """Prompt tokens run through the model by extends (prefill), incl. turn closing."""
    tokens_referenced: int
    tokens_copied: int
    tokens_decoded: int
    """Generated tokens whose K/V was written by batched decode steps."""
    pages_evicted: int
    sequences: int
    """Live (unreleased) sequences."""
