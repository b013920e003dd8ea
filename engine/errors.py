"""Errors raised by the engine package."""

from __future__ import annotations

__all__ = [
    "CacheExhaustedError",
    "ChatTemplateError",
    "EngineError",
    "EngineInvariantError",
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
