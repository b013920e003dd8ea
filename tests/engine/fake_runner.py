"""A deterministic fake `ModelRunner` on integer page ids, and a tiny byte tokenizer.

The fake "K/V" of a slot is the (position, token id) written there. Logits at a position
are a pseudo-random function of the token ids *read back through the page table* for
positions 0..p, so a wrong page table, a bad copy, a missed copy-on-write or a stale slot
after truncation changes the logits (and reading a slot never written fails loudly).
`reference_logits(tokens)` is the same function computed directly from token ids: the
"fresh prefill" every cached path must agree with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from engine.runner import DecodeItem, PrefillItem

if TYPE_CHECKING:
    from engine import Engine

__all__ = ["ByteTokenizer", "FakeRunner", "assert_cache_matches", "make_engine"]

_MOD = (1 << 61) - 1


def _roll(h: int, position: int, token: int) -> int:
    return (h * 1_000_003 + token * 7919 + position + 1) % _MOD


class FakeRunner:
    def __init__(self, *, page_size: int = 4, num_pages: int = 64, vocab_size: int = 300,
                 eos_token_ids: Sequence[int] = (), max_positions: int = 1 << 20,
                 next_token: Callable[[tuple[int, ...]], int | None] | None = None) -> None:
        self.page_size = page_size
        self.num_pages = num_pages
        self.vocab_size = vocab_size
        self.eos_token_ids = tuple(eos_token_ids)
        self.max_positions = max_positions
        self.next_token = next_token
        """Optional script: context -> token id to force (greedy picks it)."""
        self.slots: list[list[tuple[int, int] | None]] = [
            [None] * page_size for _ in range(num_pages)]
        self.prefill_tokens = 0
        self.prefill_calls = 0
        self.prefill_batch_sizes: list[int] = []
        """Items per `prefill_many` call."""
        self.decode_calls = 0
        self.decode_batch_sizes: list[int] = []
        self.copied_slots = 0

    # ---- ModelRunner ---------------------------------------------------------------------

    def prefill(self, page_table: Sequence[int], start: int, token_ids: Sequence[int],
                all_logits: bool = False) -> torch.Tensor:
        assert token_ids, "prefill of no tokens"
        for offset, token in enumerate(token_ids):
            self._write(page_table, start + offset, token)
        self.prefill_tokens += len(token_ids)
        self.prefill_calls += 1
        end = start + len(token_ids)
        context = self._read(page_table, end)
        if all_logits:
            rows = [self.reference_logits(context[:p + 1]) for p in range(start, end)]
            return torch.stack(rows)
        return self.reference_logits(context)[None, :]

    def prefill_many(self, items: Sequence[PrefillItem]) -> torch.Tensor:
        """Every item's K/V is written before any is read, as in one forward: items that
        write each other's slots read the wrong tokens."""
        assert items, "prefill_many of no items"
        for item in items:
            assert item.token_ids, "prefill of no tokens"
            for offset, token in enumerate(item.token_ids):
                self._write(item.page_table, item.start + offset, token)
            self.prefill_tokens += len(item.token_ids)
        self.prefill_calls += 1
        self.prefill_batch_sizes.append(len(items))
        return torch.stack([self.reference_logits(self._read(
            item.page_table, item.start + len(item.token_ids))) for item in items])

    def decode(self, items: Sequence[DecodeItem]) -> torch.Tensor:
        assert items, "decode of no items"
        self.decode_calls += 1
        self.decode_batch_sizes.append(len(items))
        rows = []
        for item in items:
            self._write(item.page_table, item.position, item.token_id)
            rows.append(self.reference_logits(self._read(item.page_table, item.position + 1)))
        return torch.stack(rows)

    def copy_slots(self, src_page: int, dst_page: int, n_tokens: int) -> None:
        assert 0 < n_tokens <= self.page_size
        for slot in range(n_tokens):
            assert self.slots[src_page][slot] is not None, f"copy of empty slot {slot}"
            self.slots[dst_page][slot] = self.slots[src_page][slot]
        self.copied_slots += n_tokens

    # ---- reference -----------------------------------------------------------------------

    def reference_logits(self, tokens: Sequence[int]) -> torch.Tensor:
        """Logits after `tokens`, computed from the ids alone (no pages)."""
        h = 0
        for position, token in enumerate(tokens):
            h = _roll(h, position, token)
        generator = torch.Generator().manual_seed(h)
        logits = torch.randn(self.vocab_size, generator=generator)
        if self.next_token is not None:
            forced = self.next_token(tuple(tokens))
            if forced is not None:
                logits[forced] += 1000.0
        return logits

    # ---- helpers -------------------------------------------------------------------------

    def _write(self, page_table: Sequence[int], position: int, token: int) -> None:
        assert 0 <= token < self.vocab_size, f"token {token} out of range"
        page = page_table[position // self.page_size]
        self.slots[page][position % self.page_size] = (position, token)

    def _read(self, page_table: Sequence[int], length: int) -> list[int]:
        tokens = []
        for position in range(length):
            page = page_table[position // self.page_size]
            slot = self.slots[page][position % self.page_size]
            assert slot is not None and slot[0] == position, (
                f"position {position}: page {page} slot {position % self.page_size} "
                f"holds {slot}")
            tokens.append(slot[1])
        return tokens


class ByteTokenizer:
    """Bytes 0-255 are ids 0-255; a few multi-byte "merged" tokens and special tokens
    follow. Decoding joins bytes and replaces incomplete UTF-8 with U+FFFD, like a
    byte-level BPE."""

    def __init__(self, merges: Sequence[str] = (), specials: Sequence[str] = ()) -> None:
        self.pieces: list[bytes] = [bytes([b]) for b in range(256)]
        self.pieces += [m.encode() for m in merges]
        self.special_ids: dict[str, int] = {}
        for name in specials:
            self.special_ids[name] = len(self.pieces)
            self.pieces.append(name.encode())
        self.vocab_size = len(self.pieces)

    def decode(self, token_ids: list[int]) -> str:
        return b"".join(self.pieces[t] for t in token_ids).decode("utf-8", errors="replace")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        data = text.encode()
        ids: list[int] = []
        i = 0
        while i < len(data):
            best = data[i]
            best_len = 1
            for token in range(256, self.vocab_size):
                piece = self.pieces[token]
                if len(piece) > best_len and data.startswith(piece, i):
                    best, best_len = token, len(piece)
            ids.append(best)
            i += best_len
        return ids


def make_engine(*, page_size: int = 4, num_pages: int = 64, vocab_size: int = 300,
                eos_token_ids: Sequence[int] = (), max_batch: int = 8, prefill_chunk: int = 512,
                next_token: Callable[[tuple[int, ...]], int | None] | None = None,
                tokenizer: ByteTokenizer | None = None, max_positions: int = 1 << 20
                ) -> tuple[Engine, FakeRunner]:
    """An engine over a fresh fake runner (and a byte tokenizer unless one is given)."""
    from engine import Engine

    runner = FakeRunner(page_size=page_size, num_pages=num_pages, vocab_size=vocab_size,
                        eos_token_ids=eos_token_ids, next_token=next_token,
                        max_positions=max_positions)
    engine = Engine(runner, tokenizer or ByteTokenizer(), max_batch=max_batch,
                    prefill_chunk=prefill_chunk)
    return engine, runner


def assert_cache_matches(engine: Engine, runner: FakeRunner) -> None:
    """Invariants hold, every live sequence's pages read back as its tokens, and cached
    next-token logits equal the fresh-prefill reference."""
    engine.check()
    for seq in engine.sequences():
        assert runner._read(seq.page_table, len(seq)) == list(seq.tokens), seq
        stored = seq._logits
        if stored is not None:
            assert torch.equal(stored, runner.reference_logits(seq.tokens)), seq
