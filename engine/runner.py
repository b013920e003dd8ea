"""The seam between cache bookkeeping and tensors: the `ModelRunner` protocol.

The cache side (block pool, scheduler, sequences) works on integer page ids only and
talks to the model through this protocol; the concrete implementation over a paged KV
store is `engine.paged_runner.PagedRunner`, and tests may use a fake. This module stays
import-light (no torch at runtime) so bookkeeping code and its tests can import it freely.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    import torch

__all__ = ["DecodeItem", "ModelRunner", "PrefillItem"]


class DecodeItem(NamedTuple):
    """One sequence's share of a batched decode step."""

    page_table: Sequence[int]
    """Page ids; position p lives in page ``page_table[p // page_size]``."""
    position: int
    """Token position (0-based) of ``token_id``; its K/V is written there."""
    token_id: int
    """The token fed at ``position``."""


class PrefillItem(NamedTuple):
    """One sequence's share of a batched prefill (see `ModelRunner.prefill`)."""

    page_table: Sequence[int]
    start: int
    """Position of the first of `token_ids`; positions before it are in the pages."""
    token_ids: Sequence[int]


class ModelRunner(Protocol):
    page_size: int
    """Tokens per page."""
    num_pages: int
    """Pages in the KV storage."""
    vocab_size: int
    eos_token_ids: tuple[int, ...]

    @property
    def max_positions(self) -> int:
        """Positions the model supports (``max_position_embeddings``); no sequence passes
        it."""
        ...

    def prefill(self, page_table: Sequence[int], start: int, token_ids: Sequence[int],
                all_logits: bool = False) -> torch.Tensor:
        """Compute tokens at positions start .. start+len(token_ids)-1, writing their K/V
        into the slots of `page_table` (position p lives in page page_table[p // page_size],
        slot p % page_size), attending causally over positions [0, start+len).
        Positions < start must already be in the pages. Returns float32 logits on CPU:
        [len, vocab] if all_logits else [1, vocab] (last position)."""
        ...

    def prefill_many(self, items: Sequence[PrefillItem]) -> torch.Tensor:
        """`prefill` for B sequences (no two writing the same slot) in ONE forward: many
        short prompts cost about what one prompt of all their tokens does. Returns float32
        CPU logits [B, vocab]: each item's last position."""
        ...

    def decode(self, items: Sequence[DecodeItem]) -> torch.Tensor:
        """One new token for each of B sequences in ONE batched forward.
        DecodeItem = (page_table: Sequence[int], position: int, token_id: int): write the
        token's K/V at `position` and attend over [0, position]. Returns float32 CPU logits
        [B, vocab]."""
        ...

    def copy_slots(self, src_page: int, dst_page: int, n_tokens: int) -> None:
        """Copy K/V of slots [0, n_tokens) from src_page to dst_page, all layers."""
        ...
