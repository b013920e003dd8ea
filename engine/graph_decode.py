"""`StaticDecode`: batch-1 decode steps with static shapes, replayed as CUDA graphs.

On a GPU a small model's decode step is bound by launching its ops (~700 kernels for
SmolLM2-135M), not by memory; the same step captured once and replayed as a CUDA graph
launches them all at once (`bench/bench_engine.py --device cuda` measures both). A graph replays fixed kernels on fixed buffers, so the step's shapes and
addresses must not change from one token to the next; the eager step's do (its span grows
every token, and reading consecutive pages in place or through the kept gathered copy
depends on the page ids). Here, after vLLM's and gpt-fast's CUDA-graph decode:

- the step's inputs live in one fixed device buffer: token id, position, write slot, and
  the page row padded to its bucket (one host-to-device copy per step);
- the span is rounded up to a bucket of `BUCKET` positions, and attention reads the
  bucket's whole span through a per-layer gather of its pages (`StepKV`'s per-layer way);
- the mask (causal; sliding window) is computed on the device from the position buffer,
  so it hides the padding without any host work;
- one graph per bucket, captured the first time a step needs it (a warm-up run, then the
  capture), all sharing one memory pool.

Elsewhere (`capture=False`, CPU tests) the same static step runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

from engine import model
from engine.kv_storage import KVStorage
from engine.model_config import ModelConfig
from engine.model_weights import ModelWeights

__all__ = ["BUCKET", "StaticDecode"]

BUCKET = 256
"""Positions per span bucket: a step attends over its span rounded up to a multiple of
this (at most ~255 masked positions of extra reading), and at most max positions / this
graphs are captured (32 for SmolLM2's 8,192)."""


class StaticDecode:
    """Batch-1 decode steps with static shapes (see the module's doc)."""

    def __init__(self, config: ModelConfig, weights: ModelWeights, kv: KVStorage, *,
                 device: torch.device, max_positions: int,
                 attention: Callable[[], AbstractContextManager[Any]], capture: bool,
                 bucket: int = BUCKET) -> None:
        """`attention`: the context the step runs (and is captured) in; `capture`: replay
        CUDA graphs, else run the static step eagerly."""
        size = kv.page_size
        self._config = config
        self._weights = weights
        self._kv = kv
        self._device = device
        self._attention = attention
        self._capture = capture
        self._bucket = -(-bucket // size) * size  # whole pages
        self._max_span = -(-max_positions // self._bucket) * self._bucket
        # [token id, position, write slot, page ids of the largest bucket...]
        self._ints = torch.zeros(3 + self._max_span // size, dtype=torch.long, device=device)
        self._graphs: dict[int, tuple[Any, torch.Tensor]] = {}
        self._pool: Any = None
        # The RoPE tables grown to every span now: growing them inside a capture would not
        # be replayed.
        weights.rope.lookup(self._ints[1:2], self._max_span)

    @property
    def captured(self) -> tuple[int, ...]:
        """The spans (bucket ends) whose graphs are captured."""
        return tuple(sorted(self._graphs))

    def span_for(self, position: int) -> int:
        """The static span of a step at `position`: position + 1 rounded up to a bucket."""
        return -(-(position + 1) // self._bucket) * self._bucket

    def __call__(self, token_id: int, position: int, pages: Sequence[int]) -> torch.Tensor:
        """Logits ``[1, vocab]`` (compute dtype, on the device; overwritten by the next
        step) of `token_id` at `position`, the sequence's K/V on `pages` (at least the
        pages holding positions 0 .. position)."""
        size = self._kv.page_size
        span = self.span_for(position)
        count = span // size
        row = [int(p) for p in pages[:count]]
        row += [row[0]] * (count - len(row))  # padding: masked
        slot = row[position // size] * size + position % size
        self._ints[:3 + count].copy_(torch.tensor([token_id, position, slot, *row],
                                                  dtype=torch.long))
        self._kv.note_writes((slot // size,))
        if not self._capture:
            with self._attention():
                return self._step(span)
        if span not in self._graphs:
            self._graphs[span] = self._record(span)
        graph, logits = self._graphs[span]
        graph.replay()
        return logits

    def _step(self, span: int) -> torch.Tensor:
        ints = self._ints
        ids, positions, slots = ints[0:1], ints[1:2], ints[2:3]
        pages = ints[3:3 + span // self._kv.page_size].view(1, -1)
        keys = torch.arange(span, device=self._device)
        mask = keys[None, :] <= positions[:, None]
        window = self._config.sliding_window
        if window is not None:
            mask &= keys[None, :] > positions[:, None] - window
        return model.decode_one_token(self._config, self._weights, self._kv, ids, positions,
                                      slots, pages, span, mask, static=True)

    def _record(self, span: int) -> tuple[Any, torch.Tensor]:
        """Capture the step of `span` as a CUDA graph (after one eager warm-up run on a side
        stream, as capture requires: it loads kernels and allocates workspaces)."""
        device = self._device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), self._attention():
            self._step(span)
        torch.cuda.current_stream(device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool), self._attention():
            logits = self._step(span)
        return graph, logits
