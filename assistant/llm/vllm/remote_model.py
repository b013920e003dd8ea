"""What a vLLM server serves, and the completion request that asks it for a job's ids.

The request names the model, carries the whole prompt as token ids and asks for the
reply as ids too (``return_token_ids``); the client applies stop ids and end-of-sequence
itself (:mod:`~assistant.llm.vllm.job`), so the server never ends a reply on its own
text. The sampling settings are the local engine's (`engine.params.SamplingParams`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from assistant.llm.vllm.job import RemoteJob

__all__ = ["PENALTY_ARGS", "RemoteModel", "completion_body"]

PENALTY_ARGS = ("repetition_penalty_window", "repetition_penalty_value")
"""``vllm_xargs`` keys of the windowed repetition penalty
(:mod:`assistant.llm.vllm.penalty`, loaded into the server)."""


@dataclass(frozen=True)
class RemoteModel:
    """What the server serves (from ``/v1/models``) and the local tokenizer's view of it."""

    name: str
    """The model id requests name."""
    max_positions: int
    """``max_model_len``."""
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    block_size: int
    """The server's prefix-cache block (``--block-size``), tokens."""
    windowed_penalty: bool = True
    """The server loads :mod:`assistant.llm.vllm.penalty` (``--logits-processors``),
    so the repetition penalty is the local engine's (the last window of ids); without
    it vLLM's own penalty applies (every id of the prompt and the reply)."""


def completion_body(model: RemoteModel, job: RemoteJob, prompt: list[int]) -> dict[str, Any]:
    """The streaming ``/v1/completions`` request for ``job`` with ``prompt`` (its
    sequence so far, and after a failover the ids already received)."""
    p = job.params
    body: dict[str, Any] = {
        "model": model.name, "prompt": prompt, "max_tokens": job.max_tokens,
        "temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k or -1,
        "stream": True, "return_token_ids": True, "ignore_eos": True,
        "stop_token_ids": sorted(job.stop_ids), "skip_special_tokens": False,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if p.temperature > 0:
        body["seed"] = p.seed
    if p.json_schema is not None:  # a tool call's JSON, decoded under its schema there too
        body["structured_outputs"] = {"json": json.loads(p.json_schema)}
    if p.repetition_penalty != 1.0 and p.repetition_window > 0:
        if model.windowed_penalty:
            body["vllm_xargs"] = dict(zip(PENALTY_ARGS, (p.repetition_window,
                                                         p.repetition_penalty), strict=True))
        else:
            body["repetition_penalty"] = p.repetition_penalty
    return body
