"""The configuration reference (docs/configuration.md), written from the typed schema.

Every key of :class:`~assistant.app.config.AppConfig`, with its type, default, limits
and description (the field's docstring), so the reference cannot drift from what the
loader accepts; a test compares the committed file with :func:`render`.

    python -m assistant.app.config_reference docs/configuration.md   # write it
    python -m assistant.app.config_reference --check docs/configuration.md
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from assistant.app.config import ENV_PREFIX, AppConfig

__all__ = ["render", "main"]

_HEADER = f"""# Configuration reference

<!-- Written by `python -m assistant.app.config_reference docs/configuration.md`
     (`make docs`) from the typed schema in assistant/app/config_schema.py; do not edit. -->

Every setting lives in one section of `config.yaml`. Precedence, highest first: a CLI
flag (`--set section.key=value`, the value parsed as YAML) > the environment
(`{ENV_PREFIX}SECTION__KEY=value`) > the config file (`--config FILE` or
`ASSISTANT_CONFIG`, else `./config.yaml`, else the project's) > the built-in defaults
below, which equal the shipped `config.yaml`.
An unknown key or a value of the wrong type is an error naming the key and where the
value came from. `assistant config` prints the effective configuration.
"""


def render() -> str:
    """docs/configuration.md's text."""
    lines = [_HEADER]
    for section, info in _sections():
        model = typing.cast(type[BaseModel], info.annotation)
        lines.append(f"## `{section}`\n")
        if model.__doc__:
            lines.append(_one_paragraph(model.__doc__) + "\n")
        lines.append("| key | type | default | description |")
        lines.append("|---|---|---|---|")
        for name, field in model.model_fields.items():
            key = field.alias or name
            lines.append(f"| `{key}` | {_type(field)} | {_default(field)} | "
                         f"{_cell(field.description or '')} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _sections() -> Iterator[tuple[str, FieldInfo]]:
    for name, info in AppConfig.model_fields.items():
        if info.exclude:
            continue  # not a YAML key (config_dir)
        yield name, info


def _type(field: FieldInfo) -> str:
    text = _annotation(field.annotation)
    limits = [_limit(m) for m in field.metadata]
    limits = [limit for limit in limits if limit]
    if limits:
        text += " (" + ", ".join(limits) + ")"
    return _cell(text)


def _annotation(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " | ".join(f"`{json.dumps(a)}`" for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_annotation(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"list of {_annotation(args[0])}" if args else "list"
    if tp is type(None):
        return "`null`"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(f"`{m.value}`" for m in tp)
    return getattr(tp, "__name__", str(tp))


def _limit(meta: Any) -> str:
    if isinstance(meta, annotated_types.Gt):
        return f"> {meta.gt}"
    if isinstance(meta, annotated_types.Ge):
        return f">= {meta.ge}"
    if isinstance(meta, annotated_types.Lt):
        return f"< {meta.lt}"
    if isinstance(meta, annotated_types.Le):
        return f"<= {meta.le}"
    return ""


def _default(field: FieldInfo) -> str:
    value = (field.default_factory() if field.default_factory is not None  # type: ignore[call-arg]
             else field.default)
    if value is PydanticUndefined:
        return "(required)"
    if isinstance(value, tuple):
        value = list(value)
    return _cell(f"`{json.dumps(value)}`")


def _one_paragraph(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    return _one_paragraph(text).replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m assistant.app.config_reference",
        description="Write (or check) the configuration reference from the typed schema.")
    parser.add_argument("path", type=Path, help="the Markdown file, e.g. docs/configuration.md")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the file differs from what would be written")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.path.read_text(encoding="utf-8") if args.path.is_file() else ""
        if current != text:
            print(f"{args.path} is out of date: run python -m assistant.app.config_reference "
                  f"{args.path}", file=sys.stderr)
            return 1
        return 0
    args.path.parent.mkdir(parents=True, exist_ok=True)
    args.path.write_text(text, encoding="utf-8")
    print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
