"""Errors raised by the engine package."""

from __future__ import annotations

__all__ = [
    "CacheExhaustedError",
    "ChatTemplateError",
    "ContextLimitError",
    "EngineError",
    "EngineInvariantError",
    "JobFailedError",
    "SequenceReleasedError",
    "UnsupportedModelError",
]


class EngineError(Exception):
    """Base class for every error the engine raises on purpose."""


class UnsupportedModelError(EngineError):
    """The model's architecture or one of its options is not implemented by the engine."""


class CacheExhaustedError(EngineError):
    """Every KV page is referenced by a live sequence: nothing is free or evictable."""


class EngineInvariantError(EngineError):
    """`Engine.check()` found the cache bookkeeping inconsistent (a bug, never user input)."""


class SequenceReleasedError(EngineError):
    """An operation on a sequence that was already released."""


class ChatTemplateError(EngineError):
    """A chat template cannot be used incrementally (it re-renders earlier turns)."""


class JobFailedError(EngineError):
    """A scheduler step failed in the work of particular jobs (their prefill or their
    sampling); other jobs of the step are unaffected. The caller decides what to do with
    the named jobs (usually cancel them and report to their owners)."""

    def __init__(self, job_ids: tuple[int, ...], cause: BaseException) -> None:
        super().__init__(f"job(s) {', '.join(map(str, job_ids))} failed: {cause}")
        self.job_ids = job_ids
        self.cause = cause


class ContextLimitError(EngineError):
    """A sequence would pass the model's maximum positions (``max_position_embeddings``)."""
