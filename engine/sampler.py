"""Token sampling from next-token logits: greedy, temperature, top-k, top-p.

Each generation owns a seeded `torch.Generator`, so a seed reproduces its samples
whatever else runs in the same batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.params import SamplingParams

if TYPE_CHECKING:
    import torch

__all__ = ["Sampler"]


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
