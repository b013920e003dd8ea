"""Paged K/V tensors: ``[layers, pages, page_size, kv_heads, head_dim]`` for K and for V.

Token position p of a sequence with page table ``pt`` lives at flat slot
``pt[p // page_size] * page_size + p % page_size`` of a layer's
``[pages * page_size, kv_heads, head_dim]`` view. The storage knows nothing about which
page belongs to whom; that bookkeeping lives in the block pool.
"""

from __future__ import annotations

import torch

__all__ = ["KVStorage"]


class KVStorage:
    """Owns the K and V tensors of every layer; zero-initialised so padding reads are finite."""

    def __init__(self, *, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"need num_pages >= 1 and page_size >= 1, got {num_pages}, {page_size}")
        self.num_layers = num_layers
        self.num_pages = num_pages
        self.page_size = page_size
        shape = (num_layers, num_pages, page_size, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        flat = (num_pages * page_size, num_kv_heads, head_dim)
        self._k_flat = [self.k[i].view(flat) for i in range(num_layers)]
        self._v_flat = [self.v[i].view(flat) for i in range(num_layers)]
        self._k_pages = [self.k[i] for i in range(num_layers)]
        self._v_pages = [self.v[i] for i in range(num_layers)]

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat ``[slots, kv_heads, head_dim]`` views (K, V) of one layer; writes go through."""
        return self._k_flat[index], self._v_flat[index]

    def layer_pages(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``[pages, page_size, kv_heads, head_dim]`` views (K, V) of one layer."""
        return self._k_pages[index], self._v_pages[index]

    def copy_slots(self, src_page: int, dst_page: int, n_tokens: int) -> None:
        """Copy K/V of slots [0, n_tokens) from src_page to dst_page, all layers."""
        if not (0 <= src_page < self.num_pages and 0 <= dst_page < self.num_pages):
            raise IndexError(f"page out of range: {src_page} -> {dst_page} of {self.num_pages}")
        if not 0 <= n_tokens <= self.page_size:
            raise ValueError(f"n_tokens {n_tokens} not in [0, {self.page_size}]")
        if n_tokens == 0 or src_page == dst_page:
            return
        self.k[:, dst_page, :n_tokens] = self.k[:, src_page, :n_tokens]
        self.v[:, dst_page, :n_tokens] = self.v[:, src_page, :n_tokens]

    def nbytes(self) -> int:
        """Bytes held by K and V together."""
        return 2 * self.k.numel() * self.k.element_size()
