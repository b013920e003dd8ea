"""Inputs of a generation: sampling parameters (an optional JSON schema among them) and
scheduling priority."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from engine.grammar import canonical_schema

__all__ = ["Priority", "SamplingParams"]


class Priority(enum.IntEnum):
    """Scheduling class: lower values are served first."""

    LIVE = 0
    """A reply someone is waiting for."""
    SPECULATIVE = 1
    """Pre-generation that may be thrown away (e.g. a reply to a partial transcript)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens and when to stop.

    `temperature` 0 means greedy (argmax). `top_k` 0 and `top_p` 1.0 disable those filters.
    """

    max_new_tokens: int = 64
    """Upper bound on sampled tokens, stop token included."""
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    """Seeds this generation's own random generator (used only when temperature > 0)."""
    stop: tuple[str, ...] = ()
    """Stop strings: may span several tokens; the text never contains them."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end the generation, besides the runner's EOS ids."""
    ignore_eos: bool = False
    """Do not stop on the runner's EOS ids (benchmarks); `stop_token_ids` still stop."""
    end_of_turn: tuple[int, ...] = ()
    """Token ids appended to the sequence when the generation finishes (not on cancel),
    e.g. the chat template's end-of-turn ids, so the cache holds a closed turn."""
    repetition_penalty: float = 1.0
    """Penalty on every token id among the sequence's last `repetition_window` ids (the
    CTRL / llama.cpp ``repeat_penalty``: positive logits divided by it, negative ones
    multiplied); 1.0 disables it. Stop ids are never penalised."""
    repetition_window: int = 64
    """How many of the sequence's last ids the penalty looks at (prompt included, so a
    reply adopted from a speculative fork is penalised exactly as if generated live)."""
    json_schema: str | None = None
    """A JSON schema the reply must match, as JSON text (e.g. ``json.dumps`` of
    `engine.grammar.tool_call_schema(tools)`; kept in `engine.grammar.canonical_schema`
    form). Only ids that keep the reply a prefix of a matching compact JSON document are
    sampled, and the reply ends (EOS, every id kept, the turn closed) as soon as the
    document is whole. Stop strings and `max_new_tokens` still apply: a reply cut by them
    is not whole. The local engine masks the logits (`engine.grammar`); a remote backend
    must send the schema to its server as a structured-output request."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.repetition_penalty <= 0.0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.repetition_window < 0:
            raise ValueError(f"repetition_window must be >= 0, got {self.repetition_window}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must not be empty")
        # Accept lists from callers; store tuples so the object stays hashable and frozen.
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        object.__setattr__(self, "end_of_turn", tuple(int(t) for t in self.end_of_turn))
        if self.json_schema is not None:
            object.__setattr__(self, "json_schema", canonical_schema(self.json_schema))
