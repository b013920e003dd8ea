"""`PagedRunner`: the `ModelRunner` over `engine.model` and a `KVStorage`.

Turns page tables into flat slot indices and masks, runs the model functions under
`torch.inference_mode`, and hands back float32 CPU logits. No bookkeeping: page ownership,
refcounts and hashing belong to the cache side.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import torch

from engine import model
from engine.errors import ContextLimitError, EngineError
from engine.graph_decode import StaticDecode
from engine.kv_storage import KVStorage
from engine.model_config import ModelConfig
from engine.model_weights import ModelWeights
from engine.runner import DecodeItem, PrefillItem
from engine.scripted_step import ScriptedLayers

__all__ = ["PagedRunner", "attention_backends_for"]

log = logging.getLogger(__name__)


class PagedRunner:
    """Implements `engine.runner.ModelRunner` for Llama-family weights."""

    def __init__(self, config: ModelConfig, weights: ModelWeights, *, page_size: int,
                 num_pages: int, eos_token_ids: Sequence[int],
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 script_decode: bool = True, cuda_graphs: bool = False) -> None:
        """`script_decode`: run decode steps' layer loop in TorchScript where it applies
        (on CPU: int4 weights, and steps whose projections are fbgemm's float16 GEMMs; see
        `engine.scripted_step`); False keeps the Python loop. `cuda_graphs`: on CUDA, run
        batch-1 decode steps as CUDA graphs (`engine.graph_decode`; off by default until
        measured on a GPU: its static step is tested on CPU only)."""
        self.config = config
        self.weights = weights
        self.device = torch.device(device)
        self.dtype = dtype
        self.page_size = page_size
        self.num_pages = num_pages
        self.vocab_size = config.vocab_size
        self.eos_token_ids = tuple(int(t) for t in eos_token_ids)
        self.scripted = ScriptedLayers.build(weights.layers) if script_decode else None
        self.attention_backends = attention_backends_for(self.device)
        """The SDPA backends attention may use (None: torch's own choice); see
        `attention_backends_for`."""
        self.kv = KVStorage(num_layers=config.num_layers, num_pages=num_pages,
                            page_size=page_size, num_kv_heads=config.num_kv_heads,
                            head_dim=config.head_dim, dtype=dtype, device=self.device)
        self.static_decode = StaticDecode(
            config, weights, self.kv, device=self.device, max_positions=self.max_positions,
            attention=self.attention, capture=True,
        ) if cuda_graphs and self.device.type == "cuda" else None
        """Batch-1 decode steps as CUDA graphs (None: every step eager)."""

    @property
    def max_positions(self) -> int:
        """The model's maximum positions (``max_position_embeddings``)."""
        return self.config.max_position_embeddings

    def attention(self) -> contextlib.AbstractContextManager[Any]:
        """The context the model's forwards run in: `attention_backends` in force."""
        if self.attention_backends is None:
            return contextlib.nullcontext()
        from torch.nn.attention import sdpa_kernel

        return sdpa_kernel(self.attention_backends)

    @torch.inference_mode()
    def prefill(self, page_table: Sequence[int], start: int, token_ids: Sequence[int],
                all_logits: bool = False) -> torch.Tensor:
        """See `ModelRunner.prefill`: float32 CPU logits ``[T, vocab]`` or ``[1, vocab]``."""
        return self._prefill([PrefillItem(page_table, start, token_ids)], all_logits)

    @torch.inference_mode()
    def prefill_many(self, items: Sequence[PrefillItem]) -> torch.Tensor:
        """See `ModelRunner.prefill_many`: float32 CPU logits ``[B, vocab]``."""
        if not items:
            raise EngineError("prefill_many needs at least one item")
        if len(items) > 1 and all(len(item.token_ids) == 1 for item in items):
            # One token each (turns closed together, say) is a decode step, whose batched
            # attention and layer loop are cheaper than a prefill's per-sequence ones.
            return self.decode([DecodeItem(item.page_table, item.start, item.token_ids[0])
                                for item in items])
        return self._prefill(items, False)

    def _prefill(self, items: Sequence[PrefillItem], all_logits: bool) -> torch.Tensor:
        size = self.page_size
        ids: list[int] = []
        positions: list[int] = []
        write: list[int] = []
        parts: list[model.PrefillPart] = []
        for item in items:
            count, start = len(item.token_ids), item.start
            if count == 0 or start < 0:
                raise EngineError(f"prefill needs start >= 0 and tokens, got start={start}, "
                                  f"{count} tokens")
            end = start + count
            self._check_positions(end)
            pages = self._page_rows([item.page_table], [end])
            ids += self._checked_ids(item.token_ids)
            positions += range(start, end)
            write += [pages[0][p // size] * size + p % size for p in range(start, end)]
            mask = self._prefill_mask(start, end)
            read = self._read(pages)
            parts.append(model.PrefillPart(
                slice(len(ids) - count, len(ids)), read if isinstance(read, int) else read[0],
                end, None if mask is None else mask.to(self.device)))
        self.kv.note_writes({slot // size for slot in write})
        # One host -> device tensor for ids, positions and write slots.
        ints = self._long([*ids, *positions, *write])
        rows = len(ids)
        with self.attention():
            logits = model.prefill(self.config, self.weights, self.kv, ints[:rows],
                                   ints[rows:2 * rows], ints[2 * rows:], parts,
                                   all_logits=all_logits)
        return logits.to(device="cpu", dtype=torch.float32)

    def _prefill_mask(self, start: int, end: int) -> torch.Tensor | None:
        """bool ``[end - start, end]``: causal, within the sliding window; None when the
        one new token sees everything."""
        positions = torch.arange(start, end)
        keys = torch.arange(end)
        window = self.config.sliding_window
        if window is not None:
            return (keys[None, :] <= positions[:, None]) & (
                keys[None, :] > positions[:, None] - window)
        if end - start > 1:
            return keys[None, :] <= positions[:, None]
        return None

    @torch.inference_mode()
    def decode(self, items: Sequence[DecodeItem]) -> torch.Tensor:
        """See `ModelRunner.decode`: float32 CPU logits ``[B, vocab]``."""
        if not items:
            raise EngineError("decode needs at least one item")
        pos_list = [int(item.position) for item in items]
        if min(pos_list) < 0:
            raise EngineError(f"decode positions must be >= 0, got {pos_list}")
        span = max(pos_list) + 1
        self._check_positions(span)
        pages = self._page_rows([item.page_table for item in items],
                                [p + 1 for p in pos_list])
        if self.static_decode is not None and len(items) == 1:
            token = self._checked_ids([items[0].token_id])[0]
            try:
                logits = self.static_decode(token, pos_list[0], pages[0])
                return logits.to(device="cpu", dtype=torch.float32)
            except RuntimeError as exc:  # a capture the device refused: eager from now on
                log.warning("decode: CUDA graphs unavailable (%s); every step runs eagerly",
                            str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                self.static_decode = None
        size = self.page_size
        write = [row[p // size] * size + p % size for row, p in zip(pages, pos_list, strict=True)]
        window = self.config.sliding_window
        uniform = min(pos_list) == span - 1 and (window is None or span <= window)
        mask: torch.Tensor | None = None
        if not uniform:
            positions = torch.tensor(pos_list)
            keys = torch.arange(span)
            mask = keys[None, :] <= positions[:, None]
            if window is not None:
                mask &= keys[None, :] > positions[:, None] - window
        batch = len(items)
        # One host -> device tensor for ids, positions and write slots.
        ints = self._long([*self._checked_ids([item.token_id for item in items]),
                           *pos_list, *write])
        with self.attention():
            logits = model.decode_one_token(
                self.config, self.weights, self.kv, ints[:batch], ints[batch:2 * batch],
                ints[2 * batch:], self._read(pages), span,
                None if mask is None else mask.to(self.device), self.scripted)
        return logits.to(device="cpu", dtype=torch.float32)

    def copy_slots(self, src_page: int, dst_page: int, n_tokens: int) -> None:
        """Copy K/V of slots [0, n_tokens) from src_page to dst_page, all layers."""
        with torch.inference_mode():
            self.kv.copy_slots(src_page, dst_page, n_tokens)

    def _checked_ids(self, token_ids: Sequence[int]) -> list[int]:
        ids = [int(t) for t in token_ids]
        if min(ids) < 0 or max(ids) >= self.vocab_size:
            raise EngineError(f"token id out of range [0, {self.vocab_size})")
        return ids

    def _read(self, rows: list[list[int]]) -> torch.Tensor | int:
        """What attention reads: one row on consecutive pages as its first page (read in
        place), else the ``[B, P]`` page ids (gathered)."""
        if len(rows) == 1:
            row = rows[0]
            if row == list(range(row[0], row[0] + len(row))):
                return row[0]
        return self._long(rows)

    def _long(self, values: Sequence[int] | Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long).to(self.device)

    def _check_positions(self, end: int) -> None:
        if end > self.max_positions:
            raise ContextLimitError(
                f"position {end - 1} is past the model's maximum of {self.max_positions} "
                "positions (max_position_embeddings)")

    def _page_rows(self, tables: Sequence[Sequence[int]], lengths: Sequence[int]
                   ) -> list[list[int]]:
        """The pages holding positions [0, length) of each row, rows padded with their
        first page to a common width."""
        size = self.page_size
        needed = [(n + size - 1) // size for n in lengths]
        width = max(needed)
        rows = []
        for table, n in zip(tables, needed, strict=True):
            if len(table) < n:
                raise EngineError(f"page table has {len(table)} pages, positions need {n} "
                                  f"(page_size {size})")
            row = [int(p) for p in table[:n]]
            if min(row) < 0 or max(row) >= self.num_pages:
                raise EngineError(f"page id out of range [0, {self.num_pages}): {row}")
            rows.append(row + [row[0]] * (width - n))
        return rows


def attention_backends_for(device: torch.device) -> list[Any] | None:
    """The SDPA backends the engine's attention uses on `device`; None leaves torch's own
    choice (CPU). On CUDA every backend but cuDNN's: torch picks cuDNN attention first for
    bfloat16 on Hopper, and it builds an execution plan for each new key length, which a
    decode step always is (one position longer than the last), so every step paid for a
    new plan and a reply decoded several times slower. Flash and memory-efficient
    attention need no per-shape plan."""
    if device.type != "cuda":
        return None
    from torch.nn.attention import SDPBackend

    return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
