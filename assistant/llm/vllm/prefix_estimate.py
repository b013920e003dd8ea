"""What a vLLM server's prefix cache should hold, as seen from the client.

vLLM caches K/V in whole blocks (32 tokens on CPU, 16 on GPU) keyed by a hash chained
over the block's ids and every id before it; a prompt reuses its longest run of cached
whole blocks, and never the block holding its last token's position when the whole
prompt is cached (the last token is always computed: its logits pick the next token).
Blocks filled during generation are cached too.

:class:`PrefixEstimate` keeps the chained keys of every whole block this client sent or
received, so each request's expected ``cached_tokens`` can be logged beside what the
server reports. It is an estimate: the server evicts under memory pressure and other
clients fill it too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PrefixEstimate", "block_keys"]


def block_keys(ids: Sequence[int], block_size: int) -> list[int]:
    """Chained keys of the whole blocks of ``ids`` (a key names its block and every id
    before it)."""
    keys: list[int] = []
    parent = 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[start:start + block_size])))
        keys.append(parent)
    return keys


class PrefixEstimate:
    """The client's picture of one server's prefix cache (see the module docstring)."""

    def __init__(self, block_size: int, *, max_blocks: int = 1 << 16) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self._max_blocks = max_blocks
        self._keys: OrderedDict[int, None] = OrderedDict()

    def cached_prefix(self, ids: Sequence[int]) -> int:
        """Tokens at the front of ``ids`` covered by known whole blocks."""
        hit = 0
        for key in block_keys(ids, self.block_size):
            if key not in self._keys:
                break
            hit += self.block_size
        return hit

    def expected_cached(self, prompt: Sequence[int]) -> int:
        """``cached_tokens`` the server should report for ``prompt`` (its last token is
        never taken from the cache, so at most the whole blocks before it)."""
        limit = (len(prompt) - 1) // self.block_size * self.block_size if prompt else 0
        return min(self.cached_prefix(prompt), limit)

    def record(self, ids: Sequence[int]) -> None:
        """The server has computed ``ids`` (a prompt, or a prompt and its generation)."""
        for key in block_keys(ids, self.block_size):
            self._keys[key] = None
            self._keys.move_to_end(key)
        while len(self._keys) > self._max_blocks:
            self._keys.popitem(last=False)

    def clear(self) -> None:
        """Forget everything (the server restarted or was replaced)."""
        self._keys.clear()
