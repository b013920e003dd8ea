"""The event log as JSON lines: one object per entry, read back to the same entries.

An entry is written as ``{"t_ms": ..., "type": ..., <its fields>}``; reading looks the
type up in :data:`~assistant.loop.event_log.ENTRY_TYPES` and refuses an unknown type or
field, so :func:`entry_to_json` / :func:`entry_from_json` round-trip exactly (tested) and
a field can never be declared and silently not written (a wyoming lesson).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from assistant.loop.event_log import ENTRY_TYPES, Entry

__all__ = ["entry_from_json", "entry_to_json", "read_jsonl", "write_jsonl"]


def entry_to_json(entry: Entry) -> dict[str, Any]:
    """``{"t_ms": ..., "type": ..., <fields>}`` (JSON-ready)."""
    out: dict[str, Any] = {"t_ms": entry.t_ms, "type": entry.type}
    for f in dataclasses.fields(entry):
        if f.name != "t_ms":
            out[f.name] = getattr(entry, f.name)
    return out


def entry_from_json(obj: dict[str, Any]) -> Entry:
    """Inverse of :func:`entry_to_json`; raises ``ValueError`` on an unknown type or field."""
    kind = obj.get("type")
    cls = ENTRY_TYPES.get(str(kind))
    if cls is None:
        raise ValueError(f"unknown event type {kind!r}")
    fields = {k: v for k, v in obj.items() if k != "type"}
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ValueError(f"bad fields for event type {kind!r}: {exc}") from exc


def write_jsonl(entries: Iterable[Entry], out: Path | IO[str]) -> None:
    """Write entries, one JSON object per line."""
    lines = "".join(json.dumps(entry_to_json(e), ensure_ascii=False) + "\n" for e in entries)
    if isinstance(out, Path):
        out.write_text(lines, encoding="utf-8")
    else:
        out.write(lines)


def read_jsonl(path: Path) -> Iterator[Entry]:
    """Read entries written by :func:`write_jsonl`."""
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield entry_from_json(json.loads(line))
