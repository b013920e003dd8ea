"""Token sampling from next-token logits: greedy, temperature, top-k, top-p.

Each generation owns a seeded `torch.Generator`, so a seed reproduces its samples
whatever else runs in the same batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.params import SamplingParams

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

__all__ = ["Sampler", "sample_batch"]


class Sampler:
    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self._generator: torch.Generator | None = None

    def sample(self, logits: torch.Tensor) -> int:
        """One token id from a ``[vocab]`` float logits row."""
        import torch

        params = self.params
        if params.temperature == 0.0:
            return int(torch.argmax(logits))
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


def sample_batch(samplers: Sequence[Sampler], logits: torch.Tensor) -> list[int]:
    """One token id per row of ``[B, vocab]`` logits: every greedy row in one argmax over
    the batch, the others through their own sampler (and seeded generator)."""
    import torch

    if len(samplers) != logits.shape[0]:
        raise ValueError(f"{len(samplers)} samplers for {logits.shape[0]} logits rows")
    greedy = [row for row, s in enumerate(samplers) if s.params.temperature == 0.0]
    chosen: list[int] = [0] * len(samplers)
    if greedy:
        rows = logits if len(greedy) == len(samplers) else logits[torch.tensor(greedy)]
        for row, token in zip(greedy, rows.argmax(dim=-1).tolist(), strict=True):
            chosen[row] = int(token)
    for row, sampler in enumerate(samplers):
        if sampler.params.temperature != 0.0:
            chosen[row] = sampler.sample(logits[row])
    return chosen
