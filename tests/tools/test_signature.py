"""A tool's spec from a typed function: the schema from the signature, the words from the
docstring, and arguments validated by the model built from it."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import Field

from assistant.tools import ToolSchemaError, parse_arguments, parse_docstring, tool_from_function
from tests.tools.sample_tools import get_weather, greeter, shout


def test_schema_and_description_come_from_the_signature_and_docstring() -> None:
    spec = tool_from_function(get_weather)
    assert spec.name == "get_weather"
    assert spec.description == "The weather forecast for a city.\n\nSays whether to take an umbrella."
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": 'The city\'s name, e.g. "Paris".'},
            "unit": {"type": "string", "enum": ["C", "F"], "default": "C",
                     "description": "Degrees Celsius or Fahrenheit."},
            "days": {"type": "integer", "default": 1, "description": "How many days ahead."},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert list(spec.parameters)[:3] == ["type", "properties", "required"]
    assert spec.function is get_weather and spec.is_local and not spec.speculative_ok


def test_name_description_and_speculation_can_be_given() -> None:
    spec = tool_from_function(shout, name="yell", description="Louder.", speculative_ok=True)
    assert (spec.name, spec.description, spec.speculative_ok) == ("yell", "Louder.", True)
    assert spec.parameters["required"] == ["text"]


def test_a_bound_method_loses_self() -> None:
    spec = tool_from_function(greeter.greet)
    assert spec.name == "greet"
    assert list(spec.parameters["properties"]) == ["name"]


def test_annotated_limits_reach_the_schema_and_the_validation() -> None:
    def wait(seconds: Annotated[float, Field(gt=0, le=60)]) -> None:
        """Wait.

        Args:
            seconds: How long.
        """

    spec = tool_from_function(wait)
    assert spec.parameters["properties"]["seconds"] == {
        "type": "number", "exclusiveMinimum": 0, "maximum": 60, "description": "How long."}
    assert parse_arguments(spec, '{"seconds": "2.5"}') == {"seconds": 2.5}
    with pytest.raises(ValueError, match="seconds: Input should be greater than 0"):
        parse_arguments(spec, '{"seconds": 0}')


def test_arguments_are_coerced_and_unknown_or_missing_ones_refused() -> None:
    spec = tool_from_function(get_weather)
    assert parse_arguments(spec, '{"city": "Oslo", "days": "3"}') == {
        "city": "Oslo", "unit": "C", "days": 3}
    with pytest.raises(ValueError, match=r"city: Field required"):
        parse_arguments(spec, "{}")
    with pytest.raises(ValueError, match=r"wind: Extra inputs are not permitted"):
        parse_arguments(spec, '{"city": "Oslo", "wind": true}')
    with pytest.raises(ValueError, match=r"unit: Input should be 'C' or 'F'"):
        parse_arguments(spec, '{"city": "Oslo", "unit": "K"}')


def test_parameter_names_that_pydantic_reserves_still_work() -> None:
    def lookup(json: str, schema: int = 0, _hidden: bool = False) -> str:
        """Look up."""
        return json

    spec = tool_from_function(lookup)
    assert list(spec.parameters["properties"]) == ["json", "schema", "_hidden"]
    assert parse_arguments(spec, '{"json": "x", "_hidden": true}') == {
        "json": "x", "schema": 0, "_hidden": True}


def test_a_property_called_title_keeps_its_name() -> None:
    def note(title: str) -> str:
        """A note."""
        return title

    spec = tool_from_function(note)
    assert spec.parameters["properties"] == {"title": {"type": "string"}}
    assert "title" not in spec.parameters


def test_no_arguments_is_an_empty_object_schema() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    spec = tool_from_function(ping)
    assert spec.parameters["properties"] == {}
    assert parse_arguments(spec, "") == {} == parse_arguments(spec, "  {} ")


@pytest.mark.parametrize("signature, field, problem", [
    ("def f(*args): ...", "parameters.args", r"\*args"),
    ("def f(**options): ...", "parameters.options", r"\*\*kwargs"),
    ("def f(x, /): ...", "parameters.x", "positional-only"),
    ("def f(x: 'NoSuchType'): ...", "parameters", "cannot resolve the annotations"),
    ("import threading\ndef f(lock: threading.Lock): ...", "parameters", "no JSON schema"),
])
def test_signatures_a_model_cannot_call_are_refused(signature: str, field: str,
                                                    problem: str) -> None:
    namespace: dict[str, Any] = {}
    exec(signature, namespace)  # a function with exactly this signature
    with pytest.raises(ToolSchemaError, match=problem) as caught:
        tool_from_function(namespace["f"])
    assert caught.value.field == field
    assert caught.value.tool == "f"


def test_an_invalid_function_name_needs_a_name() -> None:
    with pytest.raises(ToolSchemaError, match="must match"):
        tool_from_function(lambda: None)  # "<lambda>"
    assert tool_from_function(lambda: None, name="noop").name == "noop"


def test_docstring_sections_and_continuations() -> None:
    summary, args = parse_docstring("""Do a thing
    over two lines.

    Second paragraph.

    Arguments:
        a (int): First,
          continued.
        *rest: Ignored kind, still described.
    Raises:
        ValueError: not an argument.
    """)
    assert summary == "Do a thing over two lines.\n\nSecond paragraph."
    assert args == {"a": "First, continued.", "rest": "Ignored kind, still described."}
    assert parse_docstring("") == ("", {})
