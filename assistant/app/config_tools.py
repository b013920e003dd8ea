"""The ``tools:`` section of ``config.yaml``: which tools the model may call, and how a
slow one is handled (the tools themselves: `assistant.tools`)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from assistant.app.config_section import Section

__all__ = ["ToolsConfig"]

# The tools package's rules (assistant.tools: BUILTIN_TOOLS, REFERENCE_PATTERN, NAME_PATTERN),
# repeated here because assistant.tools imports app's errors and the config may not import
# it back (no cycles between assistant's packages); tests/tools checks they agree.
_BUILTIN_PREFIX = "builtin:"
_BUILTIN_TOOLS = ("get_time", "calculator", "set_timer")
_TOOL_REFERENCE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
    r"(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class ToolsConfig(Section):
    """Function calling: tools the model may call during a reply (none unless listed)."""

    enabled: tuple[str, ...] = ()
    """Tools the model may call, in the order it is shown them: ``builtin:get_time``,
    ``builtin:calculator``, ``builtin:set_timer``, or ``module:function`` naming an
    importable Python callable (its signature and docstring describe it) or ToolSpec;
    empty: no tools."""
    timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    """A tool call still running after this long, in seconds, is given up on (the model
    is told it timed out; a sync tool's thread runs on, its result dropped)."""
    filler_after_ms: int = Field(700, gt=0)
    """A tool call still running after this long, in ms, gets one short spoken filler."""
    filler_text: str = "One moment."
    """The filler said while a slow tool runs ("": none)."""
    choice: str = "auto"
    """``auto`` (the model decides whether to call a tool), ``none`` (no tools shown),
    ``required`` (every reply to the user is a call, decoded under the tools' JSON
    schemas: valid by construction; the reply to a tool's result is free) or a tool's
    name (that tool, likewise). Small models (the default SmolLM2-135M) seldom choose a
    tool by themselves: ``required`` makes one that is always wanted reliable."""
    speculative_ok: tuple[str, ...] = ("get_time", "calculator")
    """Tools that may run while the reply is still a speculative draft, by name: only
    read-only tools (a tool not listed waits until the user's turn is committed)."""

    @field_validator("enabled")
    @classmethod
    def _check_references(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for ref in value:
            if not _TOOL_REFERENCE.match(ref):
                raise ValueError(f"{ref!r}: expected module:function or builtin:NAME")
            name = ref[len(_BUILTIN_PREFIX):]
            if ref.startswith(_BUILTIN_PREFIX) and name not in _BUILTIN_TOOLS:
                raise ValueError(f"{ref!r}: no such built-in tool (built-ins: "
                                 f"{', '.join(_BUILTIN_TOOLS)})")
        if len(set(value)) != len(value):
            raise ValueError(f"a tool is listed twice in {list(value)}")
        return value

    @field_validator("speculative_ok")
    @classmethod
    def _check_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _TOOL_NAME.match(name):
                raise ValueError(f"{name!r} is not a tool name ({_TOOL_NAME.pattern})")
        return value
