"""Token sampling from next-token logits: a grammar's mask, repetition penalty, then
greedy, temperature, top-k, top-p.

Each generation owns a seeded `torch.Generator`, so a seed reproduces its samples
whatever else runs in the same batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.params import SamplingParams

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    import torch

    from engine.grammar import JsonSchemaConstraint

__all__ = ["Sampler", "argmax_rows", "sample_batch", "penalize"]


def argmax_rows(logits: torch.Tensor) -> list[int]:
    """Each row's index of its largest score (the first on ties; NaN counts as largest) of
    ``[B, vocab]`` logits. On CPU float32 this is numpy's vectorized argmax: torch's CPU
    argmax scans one element at a time, an order of magnitude slower over a 49k
    vocabulary (and a greedy decode step takes one)."""
    import torch

    if logits.device.type == "cpu" and logits.dtype == torch.float32:
        return [int(i) for i in logits.numpy().argmax(axis=-1)]
    return [int(i) for i in logits.argmax(dim=-1).tolist()]


def penalize(logits: torch.Tensor, recent: Collection[int], penalty: float,
             exempt: Collection[int] = ()) -> torch.Tensor:
    """``logits`` with every id in ``recent`` (but not in ``exempt``) made less likely:
    positive scores divided by ``penalty``, negative ones multiplied (CTRL, Keskar et al.
    2019; llama.cpp's ``repeat_penalty``). Each id counts once however often it occurs.
    Returns a new tensor; ``penalty`` 1.0 or nothing recent returns ``logits`` itself."""
    import torch

    ids = sorted(set(recent) - set(exempt))
    if penalty == 1.0 or not ids:
        return logits
    index = torch.tensor(ids, dtype=torch.long)
    scores = logits.float().clone()
    picked = scores[index]
    scores[index] = torch.where(picked > 0, picked / penalty, picked * penalty)
    return scores


class Sampler:
    """One generation's sampling: its parameters, its seeded generator and, for a reply
    under a JSON schema, its grammar constraint."""

    def __init__(self, params: SamplingParams, exempt: Collection[int] = (),
                 constraint: JsonSchemaConstraint | None = None) -> None:
        schema = None if constraint is None else constraint.grammar.schema
        if schema != params.json_schema:
            raise ValueError("a sampler has a grammar constraint exactly when its params "
                             "have a json_schema, and for that schema")
        self.params = params
        self.exempt = frozenset(exempt)
        """Ids the repetition penalty never touches (the generation's stop ids)."""
        self.constraint = constraint
        """Masks each step's logits to the ids the grammar allows; `sample` advances it by
        the id it picks."""
        self._generator: torch.Generator | None = None

    @property
    def complete(self) -> bool:
        """Whether the grammar's document is whole (nothing but a stop id may follow): the
        generation ends with the last id sampled. False without a constraint."""
        return self.constraint is not None and self.constraint.is_done()

    @property
    def window(self) -> int:
        """How many recent ids :meth:`sample` wants (0 when there is no penalty)."""
        p = self.params
        return p.repetition_window if p.repetition_penalty != 1.0 else 0

    def sample(self, logits: torch.Tensor, recent: Collection[int] = ()) -> int:
        """One token id from a ``[vocab]`` float logits row (never changed); ``recent`` are
        the sequence's last :attr:`window` ids, for the repetition penalty. With a
        constraint, only an id the grammar allows, and the constraint advances by it."""
        if self.constraint is None:
            return self._pick(logits, recent)
        token = self._pick(self.constraint.mask(logits), recent)
        self.constraint.advance(token)
        return token

    def _pick(self, logits: torch.Tensor, recent: Collection[int]) -> int:
        import torch

        params = self.params
        logits = penalize(logits, recent, params.repetition_penalty, self.exempt)
        if params.temperature == 0.0:
            return argmax_rows(logits[None])[0]
        scores = logits.float() / params.temperature
        if 0 < params.top_k < scores.numel():
            kth = torch.topk(scores, params.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if params.top_p < 1.0:
            ordered, order = torch.sort(scores, descending=True)
            probs = torch.softmax(ordered, dim=-1)
            # Drop a token when the tokens ranked above it already reach top_p.
            drop = (torch.cumsum(probs, dim=-1) - probs) >= params.top_p
            drop[0] = False
            scores = scores.scatter(0, order[drop], float("-inf"))
        if self._generator is None:
            self._generator = torch.Generator().manual_seed(params.seed)
        probs = torch.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self._generator))


def sample_batch(samplers: Sequence[Sampler], logits: torch.Tensor,
                 recent: Sequence[Collection[int]] | None = None) -> list[int]:
    """One token id per row of ``[B, vocab]`` logits: the greedy rows without a penalty or
    a grammar in one argmax over the batch, the others through their own sampler (its
    seeded generator, its constraint's mask, which `Sampler.sample` advances).
    ``recent[row]`` feeds that row's repetition penalty."""
    import torch

    if len(samplers) != logits.shape[0]:
        raise ValueError(f"{len(samplers)} samplers for {logits.shape[0]} logits rows")
    plain = [row for row, s in enumerate(samplers)
             if s.params.temperature == 0.0 and not s.window and s.constraint is None]
    chosen: list[int] = [0] * len(samplers)
    if plain:
        rows = logits if len(plain) == len(samplers) else logits[torch.tensor(plain)]
        for row, token in zip(plain, argmax_rows(rows), strict=True):
            chosen[row] = token
    done = set(plain)
    for row, sampler in enumerate(samplers):
        if row not in done:
            chosen[row] = sampler.sample(logits[row], recent[row] if recent else ())
    return chosen
