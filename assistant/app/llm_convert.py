"""One-time conversion of a GGUF checkpoint to a transformers safetensors directory.

`transformers` dequantises GGUF on every load (~15-20 s for SmolLM2-135M); the
converted directory loads in well under a second. The conversion is atomic: it is
written to a temporary directory beside the target and renamed into place only when
complete, under a file lock, so a killed conversion never leaves a half directory that
a later run would load.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from assistant.app.errors import UserError

__all__ = ["converted_dir_for", "convert_gguf", "COMPLETE_MARKER"]

COMPLETE_MARKER = ".conversion-complete"


def converted_dir_for(gguf: Path, cache: Path) -> Path:
    """Cache location keyed by the GGUF's name, size and modification time."""
    stat = gguf.stat()
    key = f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache / f"{gguf.stem}-{digest}"


def convert_gguf(
    gguf: Path,
    cache: Path,
    *,
    progress: Callable[[str], None] | None = None,
    show_bar: bool | None = None,
) -> Path:
    """Return the converted directory for `gguf`, converting it first if needed."""
    target = converted_dir_for(gguf, cache)
    if (target / COMPLETE_MARKER).is_file():
        return target
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{cache}: cannot create model cache directory ({exc.strerror})") from None
    lock_path = cache / (target.name + ".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / COMPLETE_MARKER).is_file():  # converted by another process meanwhile
            return target
        say(f"Converting {gguf.name} to safetensors in {target} (one time only)...")
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=cache))
        try:
            _convert_into(gguf, tmp, show_bar=sys.stderr.isatty() if show_bar is None else show_bar)
            (tmp / COMPLETE_MARKER).write_text(str(gguf) + "\n")
            if target.exists():  # a stale, incomplete directory from an older layout
                shutil.rmtree(target)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        say(f"Converted {gguf.name}.")
    return target


def _convert_into(gguf: Path, out: Path, *, show_bar: bool) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if show_bar:
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, local_files_only=True
        )
        tokenizer = AutoTokenizer.from_pretrained(
            gguf.parent, gguf_file=gguf.name, local_files_only=True
        )
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"{gguf}: cannot load GGUF checkpoint ({exc})") from None
    # The weights are dequantised now; drop the GGUF quantisation marker so that the
    # model saves (and later loads) as a plain checkpoint.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None  # type: ignore[assignment]
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
