"""Sample-rate conversion with libsoxr (python-soxr).

``resample`` converts a whole buffer; ``StreamResampler`` converts a stream chunk by
chunk with the filter state carried across calls, so chunk boundaries leave no clicks
and the total output length matches a one-shot conversion (soxr ``ResampleStream``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from audio.errors import AudioValueError

__all__ = ["resample", "StreamResampler", "QUALITY"]

QUALITY = "HQ"
"""soxr quality recipe used by default (``"VHQ"``, ``"HQ"``, ``"MQ"``, ``"LQ"``, ``"QQ"``)."""

_DTYPES = (np.float32, np.float64, np.int16, np.int32)
_FULL_SCALE = {"int16": 32768.0, "int32": 2147483648.0}


def _check_rate(rate: int, what: str) -> int:
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or rate <= 0:
        raise AudioValueError(f"{what} must be a positive integer in Hz, got {rate!r}")
    return int(rate)


def _check_pcm(pcm: npt.NDArray[Any]) -> npt.NDArray[Any]:
    arr = np.asarray(pcm)
    if arr.ndim not in (1, 2):
        raise AudioValueError(f"audio must be 1-D (mono) or 2-D (frames, channels), got shape {arr.shape}")
    if arr.dtype not in _DTYPES:
        raise AudioValueError(f"unsupported sample dtype {arr.dtype} (use float32/float64/int16/int32)")
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        raise AudioValueError("audio contains NaN or infinite samples")
    return np.ascontiguousarray(arr)


def resample(
    pcm: npt.NDArray[Any], in_rate: int, out_rate: int, quality: str = QUALITY
) -> npt.NDArray[Any]:
    """Resample ``pcm`` (shape ``(frames,)`` or ``(frames, channels)``) keeping its dtype.

    Output length is ``round(frames * out_rate / in_rate)``.
    """
    import soxr

    in_rate = _check_rate(in_rate, "input sample rate")
    out_rate = _check_rate(out_rate, "output sample rate")
    arr = _check_pcm(pcm)
    if in_rate == out_rate or arr.shape[0] == 0:
        return arr.copy()
    out: npt.NDArray[Any] = soxr.resample(arr, in_rate, out_rate, quality=quality)
    return out


class StreamResampler:
    """Chunked resampling with state carried across chunks.

    Feed chunks with :meth:`process`; call :meth:`flush` once at the end of the stream to
    drain the filter delay. Output dtype equals ``dtype``; chunks of other dtypes are
    converted first (int16 <-> float32 scaled by 32768).
    """

    def __init__(
        self,
        in_rate: int,
        out_rate: int,
        channels: int = 1,
        dtype: str = "float32",
        quality: str = QUALITY,
    ) -> None:
        import soxr

        self.in_rate = _check_rate(in_rate, "input sample rate")
        self.out_rate = _check_rate(out_rate, "output sample rate")
        if channels < 1:
            raise AudioValueError(f"channels must be >= 1, got {channels}")
        if dtype not in ("float32", "float64", "int16", "int32"):
            raise AudioValueError(f"unsupported stream dtype {dtype!r}")
        self.channels = int(channels)
        self.dtype = np.dtype(dtype)
        self._passthrough = self.in_rate == self.out_rate
        self._stream = (
            None
            if self._passthrough
            else soxr.ResampleStream(
                self.in_rate, self.out_rate, self.channels, dtype=dtype, quality=quality
            )
        )
        self._flushed = False
        self.samples_in = 0
        """Input frames consumed so far."""
        self.samples_out = 0
        """Output frames produced so far."""

    def _coerce(self, pcm: npt.NDArray[Any]) -> npt.NDArray[Any]:
        arr = _check_pcm(pcm)
        nch = 1 if arr.ndim == 1 else arr.shape[1]
        if nch != self.channels:
            raise AudioValueError(f"stream has {self.channels} channel(s), chunk has {nch}")
        if arr.dtype != self.dtype:
            # Convert through float64 at each format's own full scale.
            unit = arr.astype(np.float64) / _FULL_SCALE.get(arr.dtype.name, 1.0)
            full = _FULL_SCALE.get(self.dtype.name)
            if full is None:
                arr = unit.astype(self.dtype)
            else:
                arr = np.clip(np.round(unit * full), -full, full - 1).astype(self.dtype)
        if self.channels > 1 and arr.ndim == 1:
            arr = arr.reshape(-1, self.channels)
        return np.ascontiguousarray(arr)

    def process(self, pcm: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Resample one chunk; may return fewer (or zero) frames while the filter fills."""
        if self._flushed:
            raise AudioValueError("StreamResampler.process() called after flush()")
        arr = self._coerce(pcm)
        self.samples_in += arr.shape[0]
        out = arr.copy() if self._stream is None else self._stream.resample_chunk(arr, last=False)
        self.samples_out += out.shape[0]
        return out

    def flush(self) -> npt.NDArray[Any]:
        """Drain the filter at end of stream. Idempotent: later calls return nothing."""
        shape: tuple[int, ...] = (0,) if self.channels == 1 else (0, self.channels)
        if self._flushed or self._stream is None:
            self._flushed = True
            return np.zeros(shape, dtype=self.dtype)
        self._flushed = True
        empty = np.zeros(shape, dtype=self.dtype)
        out = self._stream.resample_chunk(empty, last=True)
        self.samples_out += out.shape[0]
        return out
