"""One-time conversion of a GGUF checkpoint to a transformers safetensors directory.

`transformers` dequantises GGUF on every load (~15-20 s for SmolLM2-135M); the
converted directory loads in well under a second. The conversion is atomic: it is
written to a temporary directory beside the target and renamed into place only when
complete, under a file lock, so a killed conversion never leaves a half directory that
a later run would load.

The cache is keyed by the GGUF's contents, not its path or modification time: every
install of the same model package (a new virtual environment, a reinstall, each fresh CI
clone) shares one conversion, where a path-and-mtime key left a new 500 MB directory
behind each time. The digest is read once per file version and remembered under the
path, size and mtime (`.digests/`), so a multi-gigabyte model is not read at every
start. A new conversion removes the ones it supersedes (same model name, made from this
same file path or from a file that is gone) and their quantized weight files.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from assistant.app.errors import UserError

__all__ = ["converted_dir_for", "content_digest", "convert_gguf", "prune_superseded",
           "COMPLETE_MARKER", "DIGESTS_SUBDIR", "WEIGHTS_SUBDIR"]

COMPLETE_MARKER = ".conversion-complete"
"""Written last into a finished conversion; holds the source GGUF's resolved path."""

WEIGHTS_SUBDIR = "weights"
"""The engine's quantized weight files for a conversion live here, named after it."""

DIGESTS_SUBDIR = ".digests"
"""Remembered content digests, one small file per (path, size, mtime) of a GGUF."""

_HEX64 = re.compile(r"[0-9a-f]{64}")


def converted_dir_for(gguf: Path, cache: Path) -> Path:
    """Cache location keyed by the GGUF's name and a digest of its contents."""
    return cache / f"{gguf.stem}-{content_digest(gguf, cache)[:12]}"


def content_digest(gguf: Path, cache: Path) -> str:
    """The SHA-256 of `gguf`'s contents: remembered in `cache` for this path, size and
    mtime, else read (about 50 ms for the 98 MB default model, seconds for a 4 GB one)
    and remembered if the cache is writable."""
    path = gguf.resolve()
    stat = path.stat()
    version = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    memo = cache / DIGESTS_SUBDIR / hashlib.sha256(version.encode()).hexdigest()[:24]
    try:
        digest, recorded = memo.read_text().split("\n", 1)
        if _HEX64.fullmatch(digest) and recorded.strip() == version:
            return digest
    except (OSError, ValueError):
        pass  # not remembered (or unreadable): read the file
    digest = _sha256(path)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo.parent, prefix=memo.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(f"{digest}\n{version}\n")
            os.replace(tmp, memo)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError:
        return digest  # a read-only cache (or a full one): read again next time
    _forget_stale_digests(memo.parent, path, keep=memo)
    return digest


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _forget_stale_digests(digests: Path, path: Path, *, keep: Path) -> None:
    """Drop remembered digests of `path`'s earlier versions and of files now gone."""
    for other in digests.iterdir():
        if other == keep or other.suffix == ".tmp":
            continue
        try:
            recorded = Path(other.read_text().split("\n")[1].rsplit(":", 2)[0])
        except (OSError, IndexError):
            continue
        if _superseded(recorded, path):
            other.unlink(missing_ok=True)


def _superseded(recorded: Path, source: Path) -> bool:
    """Whether what was made from the file `recorded` is superseded by `source`'s: the
    same path (the file has changed since), or a file that is gone."""
    return recorded == source or not recorded.exists()


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
            (tmp / COMPLETE_MARKER).write_text(str(gguf.resolve()) + "\n")
            if target.exists():  # a stale, incomplete directory from an older layout
                shutil.rmtree(target)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        say(f"Converted {gguf.name}.")
        for gone in prune_superseded(target, gguf):
            say(f"Removed {gone.name} from the cache (an older conversion of {gguf.name}).")
    return target


def prune_superseded(target: Path, gguf: Path) -> list[Path]:
    """Remove the conversions `target` (just made from `gguf`) supersedes: those of the
    same model name whose recorded source is `gguf`'s path (the file has changed since) or
    no longer exists. Conversions of other files still on disk are kept. Returns the
    removed directories."""
    cache = target.parent
    source = gguf.resolve()
    pattern = re.compile(re.escape(gguf.stem) + r"-[0-9a-f]{12}")
    removed = []
    for other in sorted(cache.iterdir()):
        if other == target or not other.is_dir() or not pattern.fullmatch(other.name):
            continue
        try:
            recorded = Path((other / COMPLETE_MARKER).read_text().strip())
        except OSError:
            continue  # unfinished or foreign: another process may be writing it
        if not _superseded(recorded, source):
            continue
        shutil.rmtree(other, ignore_errors=True)
        (cache / (other.name + ".lock")).unlink(missing_ok=True)
        for weights in (cache / WEIGHTS_SUBDIR).glob(other.name + "-*.safetensors"):
            weights.unlink(missing_ok=True)
        removed.append(other)
    return removed


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
    # Tied weights (the output projection is often the embedding table) are saved once.
    needed = sum({t.data_ptr(): t.numel() * t.element_size()
                  for t in model.state_dict().values()}.values())
    free = shutil.disk_usage(out).free
    if free < needed:
        raise UserError(_no_room(out.parent, needed, free))
    try:
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    except OSError as exc:
        raise UserError(_no_room(out.parent, needed, shutil.disk_usage(out).free)
                        if exc.errno == errno.ENOSPC else
                        f"{out.parent}: cannot write the converted model ({exc})") from None


def _no_room(cache: Path, needed: int, free: int) -> str:
    return (f"{cache}: no room for the converted model ({needed / 1e6:.0f} MB needed, "
            f"{free / 1e6:.0f} MB free); free some space, or point models.cache_dir "
            "at a disk with room")
