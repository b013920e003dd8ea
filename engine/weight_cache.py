"""A directory of quantized weights, one safetensors file per (model, format).

Quantizing is deterministic, so the result is computed once from the full-precision
checkpoint and cached like the GGUF -> safetensors conversion: the file name carries the
model directory's name, a fingerprint of its weight files (names, sizes, mtimes) and of
the quantization scheme, and the format. Files are written to a temporary name in the same
directory and renamed into place, so a reader never sees a partial file and concurrent
writers of the same key both produce a complete one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from engine.weight_formats import WeightFormat
from engine.weight_quant import INT4_GROUP, QuantizedTensors

__all__ = ["SCHEME_VERSION", "ALIGN", "cache_path", "load_or_quantize"]

_log = logging.getLogger(__name__)

SCHEME_VERSION = 2
"""Bumped whenever `engine.weight_quant.quantize_linear`'s output changes."""

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".json")


def cache_path(cache_dir: Path, model_dir: Path, fmt: WeightFormat) -> Path:
    """Where the `fmt` weights of the model in `model_dir` live in `cache_dir`."""
    digest = hashlib.sha256(f"scheme={SCHEME_VERSION} int4_group={INT4_GROUP}".encode())
    for file in sorted(model_dir.iterdir()):
        if file.is_file() and file.suffix in _WEIGHT_SUFFIXES:
            stat = file.stat()
            digest.update(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return cache_dir / f"{model_dir.name}-{digest.hexdigest()[:12]}-{fmt}.safetensors"


def load_or_quantize(cache_dir: Path, model_dir: Path, fmt: WeightFormat,
                     compute: Callable[[], Iterable[tuple[str, QuantizedTensors]]]
                     ) -> dict[str, QuantizedTensors]:
    """The quantized tensors by linear name: read from the cache, or `compute`d and stored
    (atomically) first. A cache file that cannot be read is recomputed and replaced."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file, save_file

    path = cache_path(cache_dir, model_dir, fmt)
    if path.is_file():
        try:
            return _unflatten(load_file(str(path)))
        except (SafetensorError, OSError, ValueError):
            pass  # corrupt or foreign: recompute below
    result = {name: tensors for name, tensors in compute()}
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=path.name, suffix=".tmp")
        os.close(fd)
        try:
            save_file({f"{name}/{part}": tensor.contiguous()
                       for name, tensors in result.items() for part, tensor in tensors.items()},
                      tmp, metadata={"format": fmt, "scheme": str(SCHEME_VERSION)})
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except (OSError, SafetensorError) as exc:
        # The weights are computed: a cache that cannot take them (a full disk, a
        # read-only directory) costs the next start the quantization again, no more.
        _log.warning("cannot keep the %s weights in %s (%s): they are quantized again "
                     "at the next start", fmt, cache_dir, exc)
    return result


ALIGN = 64
"""Bytes every loaded tensor's data is aligned to (torch's own CPU allocations are)."""


def _aligned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, copied if its data is not `ALIGN`-byte aligned. safetensors lays tensors
    end to end after its header, so one read from a file may be only 8-byte aligned, and
    torch 2.13's CPU ``_weight_int8pack_mm`` dies (SIGSEGV) on such a weight from 4 rows on:
    the int8 ``lm_head`` of a cached int4 model crashed the daemon's batched decode of 8
    sessions on an AVX-512 CPU, while a copy of the same weight runs."""
    return tensor if tensor.data_ptr() % ALIGN == 0 else tensor.clone()


def _unflatten(flat: dict[str, torch.Tensor]) -> dict[str, QuantizedTensors]:
    out: dict[str, QuantizedTensors] = {}
    for key, tensor in flat.items():
        name, _, part = key.rpartition("/")
        if not name:
            raise ValueError(f"unexpected tensor {key!r} in a quantized weight cache")
        out.setdefault(name, {})[part] = _aligned(tensor)
    return out
