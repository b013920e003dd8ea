"""Logging for the CLI and the daemon: plain text for people, JSON lines for machines."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import MutableMapping
from typing import IO, Any

__all__ = ["JsonFormatter", "hide_library_bars_off_terminal", "setup_logging"]


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra`` fields."""

    _STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "t": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def setup_logging(level: str = "INFO", *, json_format: bool = False) -> None:
    """Configure the root logger once for a CLI invocation (not at import time)."""
    handler = logging.StreamHandler(sys.stderr)
    if json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party libraries are chatty at INFO.
    for noisy in ("faster_whisper", "httpx", "websockets", "transformers"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def hide_library_bars_off_terminal(stream: IO[str] | None = None,
                                   env: MutableMapping[str, str] | None = None) -> None:
    """Library progress bars (transformers' "Loading weights") are for people at a
    terminal; in a log or a pipe they are noise. Hidden when ``stream`` (stderr) is not a
    terminal, unless ``HF_HUB_DISABLE_PROGRESS_BARS`` is already set. Call it before
    transformers is imported (it reads the variable then)."""
    stream = sys.stderr if stream is None else stream
    env = os.environ if env is None else env
    if not stream.isatty():
        env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
