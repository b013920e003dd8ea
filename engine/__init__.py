"""Inference engine: a paged KV cache with prefix sharing over a Llama-family model.

Public names are imported lazily, so ``import engine`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.chat_template import ChatTemplate
    from engine.engine import Engine
    from engine.errors import (
        CacheExhaustedError,
        ChatTemplateError,
        ContextLimitError,
        EngineError,
        EngineInvariantError,
        SequenceReleasedError,
    )
    from engine.events import (
        EngineStats,
        FinishReason,
        GenerationResult,
        PrefillStats,
        TokenEvent,
    )
    from engine.job import Job
    from engine.params import Priority, SamplingParams
    from engine.runner import DecodeItem, ModelRunner, PrefillItem
    from engine.sequence import Sequence

__all__ = [
    "CacheExhaustedError",
    "ChatTemplate",
    "ChatTemplateError",
    "ContextLimitError",
    "DecodeItem",
    "Engine",
    "EngineError",
    "EngineInvariantError",
    "EngineStats",
    "FinishReason",
    "GenerationResult",
    "Job",
    "ModelRunner",
    "PrefillItem",
    "PrefillStats",
    "Priority",
    "SamplingParams",
    "Sequence",
    "SequenceReleasedError",
    "TokenEvent",
]

_HOMES = {
    "CacheExhaustedError": "engine.errors",
    "ChatTemplate": "engine.chat_template",
    "ChatTemplateError": "engine.errors",
    "ContextLimitError": "engine.errors",
    "DecodeItem": "engine.runner",
    "Engine": "engine.engine",
    "EngineError": "engine.errors",
    "EngineInvariantError": "engine.errors",
    "EngineStats": "engine.events",
    "FinishReason": "engine.events",
    "GenerationResult": "engine.events",
    "Job": "engine.job",
    "ModelRunner": "engine.runner",
    "PrefillItem": "engine.runner",
    "PrefillStats": "engine.events",
    "Priority": "engine.params",
    "SamplingParams": "engine.params",
    "Sequence": "engine.sequence",
    "SequenceReleasedError": "engine.errors",
    "TokenEvent": "engine.events",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted(__all__)
