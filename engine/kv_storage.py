"""Paged K/V tensors: ``[layers, kv_heads, pages, page_size, head_dim]`` for K and for V.

Token position p of a sequence with page table ``pt`` lives at flat slot
``pt[p // page_size] * page_size + p % page_size`` of a layer's
``[kv_heads, pages * page_size, head_dim]`` view. The storage knows nothing about which
page belongs to whom; that bookkeeping lives in the block pool.

Head-major: a head's keys on consecutive pages are one contiguous run, which attention
reads in place with one stride. Token-major storage (``[pages, page_size, kv_heads,
head_dim]``, as before) interleaved the heads, so each head's read used a third of every
cache line it touched: with SmolLM2's 3 K/V heads, 30 layers' attention at batch 1 took
6.48 vs 4.28 ms at 1,200 tokens and 3.44 vs 2.46 ms at 600 (measured with the K/V out of
cache).
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Iterable, Sequence

import torch

__all__ = ["GATHER_ALL_BYTES", "MIRROR_SHARE", "KVStorage", "StepKV"]

GATHER_ALL_BYTES = 32 << 20
"""The least `KVStorage.mirror_bytes`: a decode step whose rows' pages hold at most that
many K and V bytes, all layers together, gathers them once for every layer and keeps the
copy for the next step (`StepKV`, `KVStorage.mirror`); a larger one gathers per layer."""

MIRROR_SHARE = 4
"""`KVStorage.mirror_bytes` is the storage's bytes over this (at least `GATHER_ALL_BYTES`).
A conversation's history is a cached prefix with the turn's new pages after it, so it is
rarely one run of pages; past the mirror's size every decode step would gather every
layer's pages again, which dominates decode after a long history (`bench/bench_engine.py
--depth`). A quarter of the pool holds the model's whole context for one sequence, or
eight of an eighth of it; the copy is kept between steps, so that much more memory stays
in use after a long conversation."""


def zeros(shape: Sequence[int], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A zero tensor that, on a CPU, costs neither time nor memory until its pages are
    written: an anonymous memory map, which the kernel zero-fills a 4 KiB page at a time
    on first use. ``torch.zeros`` writes every byte at once, so the whole pool was paid
    for at every start (most in a virtual machine whose page faults are slow) and stayed
    resident though a conversation uses a few pages of it. The first write to a pool page
    pays for its memory instead, a small part of computing the tokens it holds (figures:
    the commit that made this). Other devices: ``torch.zeros``."""
    device = torch.device(device)
    nbytes = math.prod(shape) * dtype.itemsize
    if device.type != "cpu" or nbytes == 0:
        return torch.zeros(tuple(shape), dtype=dtype, device=device)
    # Private, as the heap is (Python's default for an anonymous map is shared: a forked
    # child would write into the parent's pool); page-aligned; the tensor keeps it alive.
    private = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}
    region = mmap.mmap(-1, nbytes, **private)
    return torch.frombuffer(region, dtype=dtype).view(tuple(shape))


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
        self.page_bytes = num_kv_heads * page_size * head_dim * dtype.itemsize
        """Bytes of one page of one layer, K or V."""
        shape = (num_layers, num_kv_heads, num_pages, page_size, head_dim)
        self.k = zeros(shape, dtype, device)
        self.v = zeros(shape, dtype, device)
        flat = (num_kv_heads, num_pages * page_size, head_dim)
        self._k_flat = [self.k[i].view(flat) for i in range(num_layers)]
        self._v_flat = [self.v[i].view(flat) for i in range(num_layers)]
        self._k_pages = [self.k[i] for i in range(num_layers)]
        self._v_pages = [self.v[i] for i in range(num_layers)]
        # The copy `mirror` keeps between decode steps: flat K and V buffers, the pages each
        # row holds and the pages per row it has room for.
        self.mirror_bytes = max(GATHER_ALL_BYTES, self.nbytes() // MIRROR_SHARE)
        """The most K and V bytes `mirror` copies (see `MIRROR_SHARE`)."""
        self._mirror: tuple[torch.Tensor, torch.Tensor] | None = None
        self._held: list[list[int]] = []
        self._held_set: set[int] = set()
        self._capacity = 0

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat ``[kv_heads, slots, head_dim]`` views (K, V) of one layer; writes go
        through."""
        return self._k_flat[index], self._v_flat[index]

    def layer_pages(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``[kv_heads, pages, page_size, head_dim]`` views (K, V) of one layer."""
        return self._k_pages[index], self._v_pages[index]

    def mirror(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A copy of the K and V of the ``[B, P]`` page ids `rows`, kept from step to step:
        ``[layers, kv_heads, B, capacity * page_size, head_dim]``, row b holding its
        pages' slots in order (past P pages, anything). A call copies only the pages that
        differ from those each row held (a decode step adds a page at most), unless a
        write elsewhere (`note_writes`) or a batch of other rows replaced them. A step that
        writes into the copy must write the same K/V to the storage (`StepKV.finish`).

        Decode on pages that are not one run gathered its whole history every step (the
        talk loop's dialogue is such a sequence: a reused prefix, grown beside speculative
        forks), a cost that grows with the history. The buffers are kept too: a fresh copy
        per step cost thousands of page faults."""
        ids = [[int(p) for p in row] for row in rows.tolist()]
        layers, heads, _, page, dim = self.k.shape
        batch, width = len(ids), len(ids[0])
        held = self._held
        if self._mirror is None or len(held) != batch or self._capacity < width:
            most = self.mirror_bytes // (2 * layers * self.page_bytes * batch)
            self._capacity = max(width, min(width + max(8, width // 2), most))
            held = [[] for _ in range(batch)]
        capacity = self._capacity
        size = layers * heads * batch * capacity * page * dim
        if self._mirror is None or self._mirror[0].numel() < size:
            self._mirror = tuple(torch.empty(size, dtype=store.dtype, device=store.device)
                                 for store in (self.k, self.v))  # type: ignore[assignment]
        assert self._mirror is not None
        sources: list[int] = []
        targets: list[int] = []
        for b, (now, had) in enumerate(zip(ids, held, strict=True)):
            same = 0
            for x, y in zip(now, had, strict=False):
                if x != y:
                    break
                same += 1
            sources += now[same:]
            targets += range(b * capacity + same, b * capacity + width)
        copies = [buffer[:size].view(layers * heads, batch * capacity, page * dim)
                  for buffer in self._mirror]
        if sources:
            src = torch.tensor(sources, dtype=torch.long, device=self.k.device)
            dst = torch.tensor(targets, dtype=torch.long, device=self.k.device)
            for store, copy in zip((self.k, self.v), copies, strict=True):
                copy.index_copy_(1, dst, store.view(layers * heads, self.num_pages,
                                                     page * dim).index_select(1, src))
        self._held, self._held_set = ids, {p for row in ids for p in row}
        k, v = (copy.view(layers, heads, batch, capacity * page, dim) for copy in copies)
        return k, v

    def note_writes(self, pages: Iterable[int]) -> None:
        """K/V was written to `pages` other than through `mirror`'s copy: forget the copy
        if it holds any of them."""
        if self._held_set and not self._held_set.isdisjoint(pages):
            self._held, self._held_set = [], set()

    @property
    def mirrored(self) -> bool:
        """Whether `mirror` holds a copy (writes must then be noted)."""
        return bool(self._held_set)

    def copy_slots(self, src_page: int, dst_page: int, n_tokens: int) -> None:
        """Copy K/V of slots [0, n_tokens) from src_page to dst_page, all layers."""
        if not (0 <= src_page < self.num_pages and 0 <= dst_page < self.num_pages):
            raise IndexError(f"page out of range: {src_page} -> {dst_page} of {self.num_pages}")
        if not 0 <= n_tokens <= self.page_size:
            raise ValueError(f"n_tokens {n_tokens} not in [0, {self.page_size}]")
        if n_tokens == 0 or src_page == dst_page:
            return
        self.note_writes((dst_page,))
        self.k[:, :, dst_page, :n_tokens] = self.k[:, :, src_page, :n_tokens]
        self.v[:, :, dst_page, :n_tokens] = self.v[:, :, src_page, :n_tokens]

    def nbytes(self) -> int:
        """Bytes held by K and V together."""
        return 2 * self.k.numel() * self.k.element_size()


class StepKV:
    """One decode step's K/V access, set up once for every layer: where each layer writes
    its new tokens' K/V and the ``[B, kv_heads, span, head_dim]`` keys and values its
    attention reads (positions 0 .. span-1 of each row, the new tokens included).

    Three ways, by the rows' pages: one row on consecutive pages is read in place (views
    of the storage); otherwise the rows' pages of every layer are gathered into one copy
    before the first layer (up to `KVStorage.mirror_bytes`; kept for the next step and updated,
    `KVStorage.mirror`), each layer writes its new K/V into that copy, and `finish` writes
    them all to the storage at once; past that size each layer writes to the storage and
    gathers its own pages. Up to that size a layer's work is its two writes, no gathers and
    no views: besides the projections, small ops and their Python are what batch-1 decode
    on a CPU spends its time on. `per_layer` forces the last way, whose work depends on
    the shapes alone, never on values read back to the host (a CUDA graph's step,
    `engine.graph_decode`)."""

    def __init__(self, kv: KVStorage, read_pages: torch.Tensor | int, span: int,
                 write_slots: torch.Tensor, positions: torch.Tensor, *,
                 per_layer: bool = False) -> None:
        """read_pages: ``[B, P]`` page ids holding positions 0 .. span-1 of each row, or
        for one row the first of consecutive pages that hold them; write_slots and
        positions: ``[B]`` flat storage slots and positions of the new tokens; per_layer:
        gather per layer whatever the size (`read_pages` a tensor), and leave noting the
        written pages (`KVStorage.note_writes`) to the caller."""
        self._kv = kv
        self._span = span
        self._write_slots = write_slots
        # Where each layer writes (flat [kv_heads, slots, head_dim]) and at which slots:
        self._k_dst: Sequence[torch.Tensor] = kv._k_flat
        self._v_dst: Sequence[torch.Tensor] = kv._v_flat
        self._slots = write_slots
        # What each layer reads (empty when gathered per layer, from `_pages`):
        self._reads: tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]] = (), ()
        self._pages: torch.Tensor | None = None
        self._gathered: tuple[torch.Tensor, torch.Tensor] | None = None
        size, layers = kv.page_size, kv.num_layers
        forced = per_layer
        if forced and isinstance(read_pages, int):
            raise ValueError("per_layer needs the page ids as a tensor")
        per_layer = forced or (not isinstance(read_pages, int) and 2 * layers
                               * read_pages.numel() * kv.page_bytes > kv.mirror_bytes)
        if not forced and kv.mirrored and (isinstance(read_pages, int) or per_layer):
            # Written to the storage, not through the kept copy (`KVStorage.mirror`).
            kv.note_writes(int(p) for p in (write_slots // size).tolist())
        if isinstance(read_pages, int):
            count = -(-span // size)
            # [layers, kv_heads, 1, count * page_size, head_dim]: views of the storage
            k, v = (store[:, :, read_pages:read_pages + count].view(
                layers, store.shape[1], 1, -1, store.shape[4]) for store in (kv.k, kv.v))
            self._reads = _row_reads(k, span), _row_reads(v, span)
            return
        if per_layer:
            self._pages = read_pages.reshape(-1)
            return
        # [layers, kv_heads, B, row slots, head_dim]: each row's slots in page order
        k, v = kv.mirror(read_pages)
        self._gathered = k, v
        batch, row_slots = k.shape[2], k.shape[3]
        flat = (layers, k.shape[1], batch * row_slots, k.shape[4])
        self._k_dst, self._v_dst = k.view(flat).unbind(0), v.view(flat).unbind(0)
        # Row b's new token goes to slot b * row_slots + its position of the copy.
        self._slots = positions if batch == 1 else (
            torch.arange(batch, device=positions.device) * row_slots + positions)
        self._reads = _row_reads(k, span), _row_reads(v, span)

    def write_read(self, layer: int, k: torch.Tensor, v: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new tokens' `k` and `v` ``[B, kv_heads, head_dim]`` of `layer`; return
        the keys and values its attention reads."""
        self._k_dst[layer].index_copy_(1, self._slots, k.transpose(0, 1))
        self._v_dst[layer].index_copy_(1, self._slots, v.transpose(0, 1))
        if self._pages is None:
            return self._reads[0][layer], self._reads[1][layer]
        batch, heads, dim = k.shape
        k_pages, v_pages = self._kv.layer_pages(layer)
        keys = k_pages.index_select(1, self._pages).view(heads, batch, -1, dim)
        values = v_pages.index_select(1, self._pages).view(heads, batch, -1, dim)
        return (keys[:, :, :self._span].transpose(0, 1),
                values[:, :, :self._span].transpose(0, 1))

    def layer_views(self) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor,
                                   list[torch.Tensor], list[torch.Tensor]] | None:
        """Every layer's K and V write destinations (flat ``[kv_heads, slots, head_dim]``),
        the slots to write, and the keys and values each layer's attention reads, as
        `write_read` uses them; None when each layer gathers its own pages."""
        if self._pages is not None:
            return None
        return (list(self._k_dst), list(self._v_dst), self._slots, list(self._reads[0]),
                list(self._reads[1]))

    def finish(self) -> None:
        """Write the step's new K/V from the gathered copy to the storage (all layers)."""
        if self._gathered is None:
            return
        kv = self._kv
        layers, heads, _, _, dim = kv.k.shape
        for store, copy in zip((kv.k, kv.v), self._gathered, strict=True):
            new = copy.view(layers, heads, -1, dim).index_select(2, self._slots)
            store.view(layers, heads, kv.num_slots, dim).index_copy_(2, self._write_slots, new)


def _row_reads(rows: torch.Tensor, span: int) -> tuple[torch.Tensor, ...]:
    """``[layers, kv_heads, B, row slots, head_dim]`` -> per layer
    ``[B, kv_heads, span, head_dim]`` views."""
    return rows[:, :, :, :span].transpose(1, 2).unbind(0)
