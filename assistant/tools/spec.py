"""What a tool is: `ToolSpec`, and the rules every tool definition must follow.

A spec is what the model is shown (name, description, JSON-schema parameters) plus, for
a local tool, the callable that runs it and the pydantic model its arguments are
validated with. A spec without a callable is a *client* tool (Realtime ``session.update``
tools): the model may call it, and the client runs it.

The checks are JSON-schema-ish, not a full JSON Schema validator: what a chat template and
a constrained decoder need to hold (an object schema with typed, named properties and
consistent ``required``), each failure a `ToolSchemaError` naming the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from assistant.tools.errors import ToolSchemaError

__all__ = ["NAME_PATTERN", "ToolSpec", "spec_from_definition"]

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""A tool name (OpenAI's rule for function names)."""

_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMAS = ("items", "not", "additionalProperties")


@dataclass(frozen=True)
class ToolSpec:
    """One tool: what the model is told about it and, if local, how it runs.

    Construction checks the definition (`ToolSchemaError` naming the field) and keeps
    its own copy of `parameters`.
    """

    name: str
    """What the model calls it: ``^[a-zA-Z0-9_-]{1,64}$``."""
    description: str
    """What it does, for the model (one or two sentences)."""
    parameters: Mapping[str, Any]
    """A JSON schema of ``type: object`` for the arguments."""
    speculative_ok: bool = False
    """Read-only and cheap: may run while the reply is a speculative draft, before the
    user's turn is committed. A tool with effects (a timer, a message) must not."""
    function: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    """The callable (sync: run in a worker thread; async: awaited); None: a client tool."""
    arguments_model: type[BaseModel] | None = field(default=None, compare=False, repr=False)
    """Validates and coerces a call's arguments (from the signature); None: the
    arguments go to `function` as given, checked only for being a JSON object."""

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.description, str):
            raise ToolSchemaError(self.name, "description",
                                  f"expected a string, got {type(self.description).__name__}")
        if self.function is not None and not callable(self.function):
            raise ToolSchemaError(self.name, "function",
                                  f"{type(self.function).__name__} is not callable")
        object.__setattr__(self, "parameters", check_parameters(self.name, self.parameters))

    @property
    def is_local(self) -> bool:
        """Runs in this process (False: a client tool)."""
        return self.function is not None

    def template_dict(self) -> dict[str, Any]:
        """The OpenAI/Hugging Face function definition a chat template renders:
        ``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": json.loads(json.dumps(self.parameters))}}


def spec_from_definition(definition: Mapping[str, Any], *,
                         speculative_ok: bool = False) -> ToolSpec:
    """A client tool from its JSON definition, in the Realtime shape (``{"type":
    "function", "name", "description", "parameters"}``) or the chat shape (the same
    inside ``"function"``)."""
    if not isinstance(definition, Mapping):
        raise ToolSchemaError("?", "definition",
                              f"expected an object, got {type(definition).__name__}")
    body: Any = definition.get("function", definition)
    name = body.get("name", "?") if isinstance(body, Mapping) else "?"
    kind = definition.get("type", "function")
    if kind != "function":
        raise ToolSchemaError(str(name), "type", f"expected 'function', got {kind!r}")
    if not isinstance(body, Mapping):
        raise ToolSchemaError(str(name), "function",
                              f"expected an object, got {type(body).__name__}")
    if not isinstance(name, str) or name == "?":
        raise ToolSchemaError(str(name), "name", "missing")
    return ToolSpec(name=name, description=body.get("description", ""),
                    parameters=body.get("parameters", {"type": "object", "properties": {}}),
                    speculative_ok=speculative_ok)


def check_parameters(tool: str, schema: Any) -> dict[str, Any]:
    """A checked, detached copy of a tool's parameter schema (`ToolSchemaError` unless it
    is a JSON-serialisable object schema whose ``required`` names its properties)."""
    if not isinstance(schema, Mapping):
        raise ToolSchemaError(tool, "parameters",
                              f"expected a JSON schema object, got {type(schema).__name__}")
    try:
        copy = json.loads(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ToolSchemaError(tool, "parameters", f"not JSON-serialisable ({exc})") from None
    if copy.get("type") != "object":
        raise ToolSchemaError(tool, "parameters.type",
                              f"expected 'object', got {copy.get('type')!r}")
    properties = copy.get("properties", {})
    required = copy.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ToolSchemaError(tool, "parameters.required",
                              f"expected a list of property names, got {required!r}")
    _check_schema(tool, "parameters", copy)
    for name in required:
        if name not in properties:
            raise ToolSchemaError(tool, "parameters.required",
                                  f"{name!r} is not one of the properties")
    return dict(copy)


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ToolSchemaError(str(name), "name",
                              f"{name!r} must match {NAME_PATTERN.pattern} (letters, digits, "
                              "_ and -, at most 64)")


def _check_schema(tool: str, where: str, schema: Any) -> None:
    if isinstance(schema, bool):
        return  # true / false are schemas
    if not isinstance(schema, dict):
        raise ToolSchemaError(tool, where,
                              f"expected a schema object, got {type(schema).__name__}")
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        bad = [k for k in kinds if k not in _JSON_TYPES]
        if bad or not kinds:
            raise ToolSchemaError(tool, f"{where}.type",
                                  f"{kind!r} is not a JSON type ({', '.join(sorted(_JSON_TYPES))})")
    if "description" in schema and not isinstance(schema["description"], str):
        raise ToolSchemaError(tool, f"{where}.description", "expected a string")
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        raise ToolSchemaError(tool, f"{where}.enum", "expected a non-empty list")
    for key in _SUBSCHEMA_MAPS:
        if key not in schema:
            continue
        children = schema[key]
        if not isinstance(children, dict):
            raise ToolSchemaError(tool, f"{where}.{key}",
                                  f"expected an object of schemas, got {type(children).__name__}")
        for name, child in children.items():
            _check_schema(tool, f"{where}.{key}.{name}", child)
    for key in _SUBSCHEMA_LISTS:
        if key not in schema:
            continue
        children = schema[key]
        if not isinstance(children, list):
            raise ToolSchemaError(tool, f"{where}.{key}", "expected a list of schemas")
        for i, child in enumerate(children):
            _check_schema(tool, f"{where}.{key}[{i}]", child)
    for key in _SUBSCHEMAS:
        if key in schema:
            _check_schema(tool, f"{where}.{key}", schema[key])
