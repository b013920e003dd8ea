"""Typed configuration, read in one place (the schema: `assistant.app.config_schema`).

Precedence, highest first: CLI flag > environment (``ASSISTANT__SECTION__KEY=value``,
the value parsed as YAML) > the config file > built-in defaults. The built-in defaults
equal the shipped ``config.yaml`` (a test keeps them in step). An unknown key or a value
of the wrong type is a `ConfigError` naming the key and where the value came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from assistant.app.config_schema import (
    AppConfig,
    AsrConfig,
    AudioConfig,
    EchoConfig,
    EngineConfig,
    LlmConfig,
    LoggingConfig,
    ModelsConfig,
    ServerConfig,
    TtsConfig,
    TurnsConfig,
    VadConfig,
)
from assistant.app.errors import ConfigError

__all__ = [
    "AppConfig",
    "AsrConfig",
    "AudioConfig",
    "EchoConfig",
    "EngineConfig",
    "LlmConfig",
    "LoggingConfig",
    "ModelsConfig",
    "ServerConfig",
    "TtsConfig",
    "TurnsConfig",
    "VadConfig",
    "ENV_PREFIX",
    "default_config_path",
    "load_config",
    "parse_override",
]

ENV_PREFIX = "ASSISTANT__"


def default_config_path(cwd: Path | None = None) -> Path | None:
    """``./config.yaml`` if present, else the project's own ``config.yaml`` if present."""
    here = (cwd or Path.cwd()) / "config.yaml"
    if here.is_file():
        return here
    project = Path(__file__).resolve().parents[2] / "config.yaml"
    return project if project.is_file() else None


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``section.key=value`` (value as YAML) from ``--set``."""
    key, sep, raw = text.partition("=")
    if not sep or "." not in key:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    return key.strip(), _parse_scalar(raw)


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    use_default_file: bool = True,
) -> AppConfig:
    """Load the effective configuration.

    `path` is the config file (None: `default_config_path()` when `use_default_file`).
    `env` is the environment to read ``ASSISTANT__SECTION__KEY`` variables from.
    `overrides` maps ``"section.key"`` to already-typed values from CLI flags.
    """
    data: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    file_path: Path | None = Path(path) if path is not None else None
    if file_path is None and use_default_file:
        file_path = default_config_path()
    if file_path is not None:
        _merge(data, origin, _read_file(file_path), str(file_path))
    for name, raw in sorted((env or {}).items()):
        if not name.startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX):].lower().split("__")
        if len(parts) != 2 or not all(parts):
            raise ConfigError(
                f"environment variable {name}: expected {ENV_PREFIX}SECTION__KEY"
            )
        _set(data, origin, parts[0], parts[1], _parse_scalar(raw), f"environment {name}")
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        _set(data, origin, section, key, value, "command line")
    try:
        cfg = AppConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origin, file_path)) from None
    if file_path is not None:
        cfg = cfg.model_copy(update={"config_dir": file_path.resolve().parent})
    return cfg


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror})") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    return loaded


def _merge(
    data: dict[str, dict[str, Any]],
    origin: dict[str, str],
    loaded: Mapping[str, Any],
    source: str,
) -> None:
    for section, values in loaded.items():
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: section '{section}' must be a mapping")
        for key, value in values.items():
            _set(data, origin, str(section), str(key), value, source)


def _set(
    data: dict[str, dict[str, Any]],
    origin: dict[str, str],
    section: str,
    key: str,
    value: Any,
    source: str,
) -> None:
    if isinstance(value, list):
        value = tuple(value)
    data.setdefault(section, {})[key] = value
    origin[f"{section}.{key}"] = source
    origin.setdefault(section, source)


def _parse_scalar(raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


_RETIRED = {
    "echo.reference_jitter_ms": "the speaker's audio is now placed by the stream's own "
                                 "sample count, which does not jitter",
}
"""Keys that earlier versions took, and why they went (named in the error)."""


def _describe(exc: ValidationError, origin: Mapping[str, str], path: Path | None) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        dotted = ".".join(loc[:2])
        where = origin.get(dotted) or origin.get(loc[0]) or (str(path) if path else "defaults")
        if err["type"] == "extra_forbidden" and dotted in _RETIRED:
            lines.append(f"{where}: '{dotted}' is no longer used ({_RETIRED[dotted]}); "
                         "remove it")
        elif err["type"] == "extra_forbidden":
            what = "unknown key" if len(loc) > 1 else "unknown section"
            lines.append(f"{where}: {what} '{dotted}'")
        else:
            lines.append(f"{where}: '{dotted}': {err['msg']} (got {err.get('input')!r})")
    return "; ".join(lines)
