"""The ``assistant`` command line: global options, then one subcommand.

Each subcommand lives in ``assistant/commands/<name>.py`` with ``register(subparsers)``
and ``run(args, cfg) -> int``. Their modules keep heavy imports (torch, models) inside
``run`` so that ``assistant --help`` is instant.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from assistant.app.config import load_config, parse_override
from assistant.app.errors import UserError
from assistant.app.logging_setup import hide_library_bars_off_terminal, setup_logging
from assistant.app.signals import Terminated, sigterm_raises

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: tuple[str, ...] = (
    "talk",
    "replay",
    "serve",
    "chat",
    "listen",
    "say",
    "transcribe",
    "models",
    "config",
)

DESCRIPTION = """\
A local, real-time voice assistant you can interrupt. It listens (faster-whisper),
thinks (our paged-KV engine over a transformers model) and speaks (Piper); cut it off
mid-sentence and it keeps exactly the words you heard.

Every command reads config.yaml (see `assistant config`); flags override it.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="assistant",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config file (default: ./config.yaml, else the project's config.yaml; "
        "env ASSISTANT_CONFIG)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value, e.g. --set vad.end_of_turn_ms=700 (repeatable)",
    )
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"assistant.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"assistant.commands.{name}":
                continue  # a command not built yet in this checkout
            raise
        module.register(sub)
    return parser


def _error_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [UserError]
    for module_name, attr in (("audio.errors", "AudioError"), ("engine.errors", "EngineError")):
        with contextlib.suppress(ImportError, AttributeError):
            types.append(getattr(importlib.import_module(module_name), attr))
    return tuple(types)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    errors = _error_types()
    try:
        overrides: dict[str, Any] = dict(parse_override(item) for item in args.overrides)
        overrides.update(getattr(args, "config_overrides", lambda a: {})(args))
        if args.log_level:
            overrides["logging.level"] = args.log_level
        cfg = load_config(
            args.config or os.environ.get("ASSISTANT_CONFIG"),
            env=os.environ,
            overrides=overrides,
        )
        setup_logging(cfg.logging.level, json_format=cfg.logging.json_format)
        hide_library_bars_off_terminal()
        with sigterm_raises():
            result = args.func(args, cfg)
        return int(result or 0)
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except errors as exc:
        if args.debug:
            logging.getLogger("assistant").exception("failed")
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
