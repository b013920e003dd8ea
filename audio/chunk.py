"""``AudioChunk``: a block of PCM samples stamped with its start on the injected clock.

Time is data: ``start_sample`` counts samples at the chunk's own ``sample_rate`` on one
monotonic clock (a virtual clock in replay and tests, the device clock live). Nothing
here reads wall time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from audio.errors import AudioValueError

__all__ = ["AudioChunk", "validate_pcm", "float_to_int16", "int16_to_float"]

_INT16_SCALE = 32768.0


def validate_pcm(pcm: npt.ArrayLike) -> npt.NDArray[Any]:
    """Return ``pcm`` as an int16 or float32 array of shape ``(n,)`` or ``(n, channels)``.

    Raises :class:`AudioValueError` for another dtype or rank, or for NaN/inf samples.
    Float64 input is accepted and converted to float32.
    """
    arr = np.asarray(pcm)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    if arr.dtype not in (np.int16, np.float32):
        raise AudioValueError(f"PCM must be int16 or float32, got {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise AudioValueError(f"PCM must be 1-D or 2-D (frames, channels), got shape {arr.shape}")
    if arr.ndim == 2 and arr.shape[1] < 1:
        raise AudioValueError(f"PCM has no channels (shape {arr.shape})")
    if arr.dtype == np.float32 and arr.size and not np.isfinite(arr).all():
        raise AudioValueError("PCM contains NaN or infinite samples")
    return arr


def float_to_int16(pcm: npt.ArrayLike) -> npt.NDArray[np.int16]:
    """Scale float samples in [-1, 1] to int16 (clipped, rounded). Rejects NaN/inf."""
    arr = np.asarray(pcm)
    if arr.size and not np.isfinite(arr).all():
        raise AudioValueError("PCM contains NaN or infinite samples")
    scaled = np.clip(np.round(arr.astype(np.float64) * _INT16_SCALE), -32768, 32767)
    return scaled.astype(np.int16)


def int16_to_float(pcm: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Scale int16 samples to float32 in [-1, 1)."""
    return (np.asarray(pcm, dtype=np.float32) / np.float32(_INT16_SCALE)).astype(np.float32)


@dataclass(frozen=True)
class AudioChunk:
    """A block of audio.

    ``pcm`` is int16 or float32 (float in [-1, 1]), shape ``(frames,)`` for mono or
    ``(frames, channels)``. The array is made read-only so the chunk is truly immutable.
    """

    pcm: npt.NDArray[Any] = field(repr=False)
    """Samples; int16 or float32."""
    sample_rate: int
    """Hz."""
    start_sample: int = 0
    """Start time in samples at ``sample_rate`` on the injected clock."""

    def __post_init__(self) -> None:
        if isinstance(self.sample_rate, bool) or int(self.sample_rate) != self.sample_rate or self.sample_rate <= 0:
            raise AudioValueError(f"sample_rate must be a positive integer in Hz, got {self.sample_rate!r}")
        if int(self.start_sample) != self.start_sample:
            raise AudioValueError(f"start_sample must be an integer, got {self.start_sample!r}")
        arr = validate_pcm(self.pcm)
        if arr is self.pcm and arr.flags.writeable:
            arr = arr.copy()
        arr.flags.writeable = False
        object.__setattr__(self, "pcm", arr)
        object.__setattr__(self, "sample_rate", int(self.sample_rate))
        object.__setattr__(self, "start_sample", int(self.start_sample))

    # -- sizes and times -------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        """Frames (samples per channel)."""
        return int(self.pcm.shape[0])

    def __len__(self) -> int:
        return self.num_samples

    @property
    def channels(self) -> int:
        return 1 if self.pcm.ndim == 1 else int(self.pcm.shape[1])

    @property
    def end_sample(self) -> int:
        """One past the last sample, at ``sample_rate``."""
        return self.start_sample + self.num_samples

    @property
    def duration_ms(self) -> float:
        """Duration in milliseconds."""
        return 1000.0 * self.num_samples / self.sample_rate

    @property
    def start_ms(self) -> float:
        return 1000.0 * self.start_sample / self.sample_rate

    @property
    def end_ms(self) -> float:
        return 1000.0 * self.end_sample / self.sample_rate

    # -- conversions -----------------------------------------------------------------
    def to_float32(self) -> AudioChunk:
        """Same audio as float32 in [-1, 1)."""
        if self.pcm.dtype == np.float32:
            return self
        return AudioChunk(int16_to_float(self.pcm), self.sample_rate, self.start_sample)

    def to_int16(self) -> AudioChunk:
        """Same audio as int16 (float samples clipped to [-1, 1])."""
        if self.pcm.dtype == np.int16:
            return self
        return AudioChunk(float_to_int16(self.pcm), self.sample_rate, self.start_sample)

    def to_mono(self) -> AudioChunk:
        """Average the channels (keeps the dtype)."""
        if self.pcm.ndim == 1:
            return self
        if self.pcm.shape[1] == 1:
            return AudioChunk(self.pcm[:, 0].copy(), self.sample_rate, self.start_sample)
        mean = self.pcm.astype(np.float64).mean(axis=1)
        if self.pcm.dtype == np.int16:
            out: npt.NDArray[Any] = np.clip(np.round(mean), -32768, 32767).astype(np.int16)
        else:
            out = mean.astype(np.float32)
        return AudioChunk(out, self.sample_rate, self.start_sample)

    def to_rate(self, rate: int) -> AudioChunk:
        """Resample this chunk on its own (one-shot, libsoxr).

        ``start_sample`` is rescaled to the new rate (rounded). For a continuous stream
        of chunks use :class:`audio.resample.StreamResampler`, which carries filter
        state across chunk boundaries.
        """
        from audio.resample import resample

        if rate == self.sample_rate:
            return self
        out = resample(self.pcm, self.sample_rate, rate)
        start = (self.start_sample * int(rate) + self.sample_rate // 2) // self.sample_rate
        return AudioChunk(out, int(rate), start)

    def with_start(self, start_sample: int) -> AudioChunk:
        """The same samples stamped with another start."""
        return AudioChunk(self.pcm, self.sample_rate, start_sample)
