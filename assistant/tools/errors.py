"""Errors of the tools package.

A `ToolError` is a `UserError`: a tool named in the configuration that cannot be loaded,
or a tool definition that breaks the schema rules, is reported as one clear line. A tool
that fails *while running* never raises: the runner turns that into a `ToolResult` the
model is told about (`assistant.tools.runner`).
"""

from __future__ import annotations

from assistant.app.errors import UserError

__all__ = ["ToolCallParseError", "ToolError", "ToolLoadError", "ToolSchemaError",
           "UnknownToolError"]


class ToolError(UserError):
    """Base class for every error the tools package raises on purpose."""


class ToolSchemaError(ToolError):
    """A tool definition breaks the rules: `field` names the offending part
    (``name``, ``parameters.properties.city.type``, ...)."""

    def __init__(self, tool: str, field: str, problem: str) -> None:
        super().__init__(f"tool {tool!r}: {field}: {problem}")
        self.tool = tool
        self.field = field
        self.problem = problem


class ToolLoadError(ToolError):
    """A configured tool reference (``module:function``, ``builtin:NAME``) cannot be loaded."""


class UnknownToolError(ToolError):
    """A tool name that is not in the registry (e.g. a call the model made up)."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        listed = ", ".join(known) if known else "none"
        super().__init__(f"unknown tool {name!r} (tools: {listed})")
        self.name = name


class ToolCallParseError(ToolError):
    """Generated text that opens a tool call whose JSON cannot be read."""

    def __init__(self, problem: str, text: str) -> None:
        super().__init__(f"malformed tool call: {problem} (in {text[:80]!r})")
        self.problem = problem
        self.text = text
