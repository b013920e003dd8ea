"""The session's tools: ``session.tools`` and ``tool_choice`` checked, and reported back.

A Realtime client offers the model functions (``{"type": "function", "name",
"description", "parameters"}``) and runs them itself when a reply calls one. Each
definition is checked by the tools package's own rules
(:func:`~assistant.tools.spec.spec_from_definition`: a valid name, an object JSON
schema...), and a refusal names the field (``session.tools.0.parameters.type``). Other
tool types (``mcp``, ...) are refused by name (``session.tools.0.type``).

``tool_choice``: ``auto``, ``none``, ``required``, or ``{"type": "function", "name": ...}``
(a beta client may send the bare name); a name must be one of the session's tools.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from assistant.serve.backend.contract import TOOL_CHOICE_MODES, FunctionTool
from assistant.serve.protocol import server_events as S
from assistant.serve.protocol.codec import ProtocolError

__all__ = ["parse_tools", "parse_tool_choice", "check_tool_choice", "describe_tools",
           "describe_tool_choice"]


def parse_tools(definitions: Sequence[Any] | None) -> tuple[FunctionTool, ...]:
    """The session's tools from ``session.tools`` (``None``: none)."""
    from assistant.tools.errors import ToolSchemaError
    from assistant.tools.spec import spec_from_definition

    tools: list[FunctionTool] = []
    names: set[str] = set()
    for i, definition in enumerate(definitions or ()):
        where = f"session.tools.{i}"
        if not isinstance(definition, Mapping):
            raise ProtocolError("invalid_tool", "a tool must be an object", param=where)
        kind = definition.get("type", "function")
        if kind != "function":
            raise ProtocolError(
                "unsupported_tool_type",
                f"tool type {kind!r} is not supported; only function tools "
                "(type 'function', run by the client)",
                param=f"{where}.type")
        try:
            spec = spec_from_definition(definition)
        except ToolSchemaError as exc:
            raise ProtocolError("invalid_tool", str(exc), param=f"{where}.{exc.field}") from None
        if spec.name in names:
            raise ProtocolError("duplicate_tool_name", f"two tools are named {spec.name!r}",
                                param=f"{where}.name")
        names.add(spec.name)
        tools.append(FunctionTool(name=spec.name, description=spec.description,
                                  parameters=spec.parameters))
    return tuple(tools)


def parse_tool_choice(choice: str | Mapping[str, Any],
                      tools: Sequence[FunctionTool]) -> str:
    """``tool_choice`` as the settings hold it: a mode, or the name of one of ``tools``."""
    param = "session.tool_choice"
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        if kind != "function":
            raise ProtocolError(
                "unsupported_tool_choice",
                f"tool_choice of type {kind!r} is not supported; use 'auto', 'none', "
                "'required' or {'type': 'function', 'name': ...}",
                param=f"{param}.type")
        name = choice.get("name")
        param = f"{param}.name"
        if not isinstance(name, str):
            raise ProtocolError("invalid_value", "tool_choice names no function", param=param)
    elif choice in TOOL_CHOICE_MODES:
        return choice
    else:
        name = choice
    if name in TOOL_CHOICE_MODES:
        raise ProtocolError("unsupported_value",
                            f"a function named {name!r} cannot be chosen by name", param=param)
    check_tool_choice(name, tools, param)
    return name


def check_tool_choice(choice: str, tools: Sequence[FunctionTool], param: str) -> None:
    """Refuse a ``tool_choice`` that names none of ``tools``."""
    if choice in TOOL_CHOICE_MODES or any(t.name == choice for t in tools):
        return
    known = ", ".join(t.name for t in tools) or "none"
    raise ProtocolError("unknown_tool",
                        f"tool_choice names {choice!r}, which is not one of the session's "
                        f"tools (known: {known})", param=param)


def describe_tools(tools: Sequence[FunctionTool]) -> tuple[S.SessionTool, ...]:
    return tuple(S.SessionTool(name=t.name, description=t.description,
                               parameters=dict(t.parameters)) for t in tools)


def describe_tool_choice(choice: str) -> Any:
    """A mode as is; a function's name as ``{"type": "function", "name": ...}``."""
    return choice if choice in TOOL_CHOICE_MODES else S.ToolChoiceFunction(name=choice)
