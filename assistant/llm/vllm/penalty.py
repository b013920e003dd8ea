"""The local engine's repetition penalty as a vLLM logits processor (server side).

vLLM's own ``repetition_penalty`` looks at every id of the prompt and the reply; ours
(:func:`engine.sampler.penalize`, llama.cpp's ``repeat_penalty`` / ``repeat_last_n``)
looks only at the sequence's last ``repetition_window`` ids, each once, and never at
the request's stop ids. With a long history the two pick different tokens, so the
server loads this module to give the same replies as the local engine::

    PYTHONPATH=<this project> python -m vllm.entrypoints.openai.api_server ... \\
        --logits-processors assistant.llm.vllm.penalty:WindowedRepetitionPenalty

A request turns it on with ``vllm_xargs`` (see
:data:`assistant.llm.vllm.remote_model.PENALTY_ARGS`). This module imports vLLM and torch,
so only the server process imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

__all__ = ["WindowedRepetitionPenalty"]

_WINDOW, _PENALTY = "repetition_penalty_window", "repetition_penalty_value"


class WindowedRepetitionPenalty(AdapterLogitsProcessor):  # type: ignore[misc]
    """Per request: positive logits of the window's ids divided by the penalty, negative
    ones multiplied (stop ids exempt)."""

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any) -> Callable[..., torch.Tensor] | None:
        extra = getattr(params, "extra_args", None) or {}
        window = int(extra.get(_WINDOW, 0) or 0)
        penalty = float(extra.get(_PENALTY, 1.0) or 1.0)
        if window <= 0 or penalty == 1.0:
            return None
        exempt = frozenset(int(t) for t in (params.stop_token_ids or ()))

        def apply(prompt_ids: list[int], output_ids: list[int],
                  logits: torch.Tensor) -> torch.Tensor:
            recent = output_ids[-window:]
            if len(recent) < window:
                need = window - len(recent)
                recent = list(prompt_ids[max(0, len(prompt_ids) - need):]) + recent
            ids = sorted(set(recent) - exempt)
            if not ids:
                return logits
            index = torch.tensor(ids, dtype=torch.long, device=logits.device)
            scores = logits.float().clone()
            picked = scores[index]
            scores[index] = torch.where(picked > 0, picked / penalty, picked * penalty)
            return scores.to(logits.dtype)

        return apply
