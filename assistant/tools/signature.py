"""A `ToolSpec` from a typed Python callable: the schema from its signature, the words
from its docstring.

    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> dict:
        '''The current weather in a city.

        Args:
            city: The city's name, e.g. "Paris".
            unit: Degrees Celsius or Fahrenheit.
        '''

Each parameter becomes a field of a pydantic model (its annotation, its default, its
``Args:`` line as the description; ``Annotated[float, Field(gt=0)]`` adds limits), whose
JSON schema is the tool's ``parameters`` and which validates and coerces a call's
arguments (unknown arguments are refused). The description is the docstring's text
before its first section (``Args:``, ``Returns:``, ...), Google style.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PydanticSchemaGenerationError, create_model

from assistant.tools.errors import ToolSchemaError
from assistant.tools.spec import ToolSpec

__all__ = ["parse_docstring", "tool_from_function"]

_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Returns|Return|"
    r"Yields|Raises|Examples?|Notes?|Attributes|See Also|Todo|Warnings?)\s*:\s*$")
_ARG_SECTIONS = frozenset({"Args", "Arguments", "Parameters", "Params", "Keyword Args",
                           "Keyword Arguments"})
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_FIELD_PREFIX = "arg_"
"""Model fields are prefixed (the parameter name is the alias) so that no parameter name
can clash with pydantic's own attributes (``json``, ``schema``, ``_private``)."""


def tool_from_function(function: Callable[..., Any], *, name: str | None = None,
                       description: str | None = None,
                       speculative_ok: bool = False) -> ToolSpec:
    """The spec of a local tool that runs `function` (sync or async).

    `name` defaults to the function's ``__name__``, `description` to its docstring's
    summary. Raises `ToolSchemaError` for a signature a model cannot call: ``*args``,
    ``**kwargs``, positional-only parameters, or an annotation pydantic cannot describe.
    """
    if not callable(function):
        raise ToolSchemaError(str(name), "function",
                              f"{type(function).__name__} is not callable")
    tool = name or getattr(function, "__name__", None) or type(function).__name__
    summary, arg_docs = parse_docstring(inspect.getdoc(function) or "")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise ToolSchemaError(tool, "function", f"has no readable signature ({exc})") from None
    hints = _type_hints(tool, function)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolSchemaError(tool, f"parameters.{param.name}",
                                  "*args / **kwargs cannot be described to a model")
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolSchemaError(tool, f"parameters.{param.name}",
                                  "positional-only parameters cannot be passed by name")
        default = ... if param.default is param.empty else param.default
        fields[_FIELD_PREFIX + param.name] = (
            hints.get(param.name, Any),
            Field(default, alias=param.name, description=arg_docs.get(param.name)))
    model_name = "".join(part.capitalize() for part in re.split(r"[_-]", tool)) + "Arguments"
    try:
        model: type[BaseModel] = create_model(
            model_name, __config__=ConfigDict(extra="forbid", populate_by_name=False),
            **fields)
        schema = model.model_json_schema(by_alias=True)
    except (PydanticSchemaGenerationError, TypeError, ValueError) as exc:
        raise ToolSchemaError(tool, "parameters",
                              f"the signature has a type that has no JSON schema ({exc})"
                              ) from None
    return ToolSpec(name=tool, description=summary if description is None else description,
                    parameters=_ordered(_without_titles(schema)), speculative_ok=speculative_ok,
                    function=function, arguments_model=model)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(summary, {parameter: description}) of a Google-style docstring: the summary is the
    text before the first section, each paragraph on one line; descriptions come from the
    ``Args:`` section (``name (type): text``, continued on more-indented lines)."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    base_indent: int | None = None
    current: str | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section, base_indent, current = header.group(1), None, None
            continue
        if section is None:
            if not line.strip():
                summary.append("")  # a paragraph break
            elif summary and summary[-1]:
                summary[-1] += " " + line.strip()
            else:
                summary.append(line.strip())
            continue
        if section not in _ARG_SECTIONS or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if base_indent is None:
            base_indent = indent
        entry = _ARG_LINE.match(line.strip()) if indent <= base_indent else None
        if entry:
            current = entry.group(1)
            args[current] = entry.group(3).strip()
        elif current is not None:
            args[current] = f"{args[current]} {line.strip()}".strip()
    return "\n\n".join(p for p in summary if p), args


def _type_hints(tool: str, function: Callable[..., Any]) -> dict[str, Any]:
    target = function if inspect.isfunction(function) or inspect.ismethod(function) else (
        getattr(function, "__call__", function))  # noqa: B004 (a callable object's method)
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # an unresolvable forward reference, a bad annotation
        raise ToolSchemaError(tool, "parameters",
                              f"cannot resolve the annotations ({type(exc).__name__}: {exc})"
                              ) from None


def _ordered(schema: dict[str, Any]) -> dict[str, Any]:
    """``type``, ``properties`` and ``required`` first, as tool schemas are usually
    written (pydantic sorts them)."""
    first = {key: schema[key] for key in ("type", "properties", "required") if key in schema}
    return first | {key: value for key, value in schema.items() if key not in first}


def _without_titles(schema: Any, *, in_properties: bool = False) -> Any:
    """The schema without pydantic's generated ``title`` keys (prompt tokens that say
    nothing the names do not); a *property* called ``title`` stays."""
    if isinstance(schema, dict) and in_properties:
        return {key: _without_titles(value) for key, value in schema.items()}
    if isinstance(schema, dict):
        return {key: _without_titles(value, in_properties=key in ("properties", "$defs"))
                for key, value in schema.items() if key != "title"}
    if isinstance(schema, list):
        return [_without_titles(item) for item in schema]
    return schema
