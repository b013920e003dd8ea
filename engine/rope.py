"""Rotary position embeddings: the inverse frequencies a config implies
(`rope_inv_freq`, with linear and llama3 scaling as transformers computes them), the
cos / sin tables by position (`RopeTables`), and their application (`apply_rope`)."""

from __future__ import annotations

import torch

from engine.model_config import ModelConfig

__all__ = ["RopeTables", "apply_rope", "rope_inv_freq"]


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """float32 inverse frequencies, as transformers' rope init functions compute them."""
    dim = cfg.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    inv_freq = 1.0 / (cfg.rope_theta ** exponents)
    scaling = cfg.rope_scaling
    if scaling is None:
        return inv_freq
    if scaling.kind == "linear":
        return inv_freq / scaling.factor
    # llama3 (Llama 3.1): long wavelengths slowed by `factor`, short ones kept, a smooth
    # ramp between (after transformers' _compute_llama3_parameters).
    old_len = scaling.original_max_position_embeddings
    low_wavelen = old_len / scaling.low_freq_factor
    high_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * torch.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor)
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


class RopeTables:
    """cos and signed sin of every position so far, ``[positions, 1, head_dim]`` in the
    compute dtype, computed in float32 as transformers does and extended (doubling) as
    positions grow. The sign of the first half of sin stands for rotate_half's negation
    (see `apply_rope`). A step looks its positions up: two index_selects where computing
    the tables took eight ops (~80 us of a ~6 ms batch-1 decode step on 2 cores)."""

    def __init__(self, inv_freq: torch.Tensor, dtype: torch.dtype) -> None:
        self._inv_freq = inv_freq
        self._dtype = dtype
        self._cos = self._sin = torch.empty(0, 1, 2 * inv_freq.shape[0], dtype=dtype,
                                            device=inv_freq.device)

    def lookup(self, positions: torch.Tensor, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin ``[*positions.shape, 1, head_dim]`` for int64 `positions`, all below
        `end` (given by the caller, who knows it: reading it off a device tensor would
        wait for the device)."""
        flat = positions.reshape(-1)
        if end > self._cos.shape[0]:
            self._grow(max(end, 2 * self._cos.shape[0], 256))
        shape = (*positions.shape, 1, self._cos.shape[-1])
        return (self._cos.index_select(0, flat).view(shape),
                self._sin.index_select(0, flat).view(shape))

    def _grow(self, count: int) -> None:
        positions = torch.arange(count, device=self._inv_freq.device)
        freqs = positions[:, None, None].float() * self._inv_freq
        cos, sin = freqs.cos(), freqs.sin()
        self._cos = torch.cat((cos, cos), dim=-1).to(self._dtype)
        self._sin = torch.cat((-sin, sin), dim=-1).to(self._dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` with rotate_half's sign folded into `sin`
    (rotate_half's halves swapped by one `roll`)."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), sin)
