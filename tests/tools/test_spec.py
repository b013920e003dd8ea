"""Tool definitions follow the rules (errors name the field), and a registry finds them."""

from __future__ import annotations

from typing import Any

import pytest

from assistant.tools import (
    ToolRegistry,
    ToolSchemaError,
    ToolSpec,
    UnknownToolError,
    spec_from_definition,
    tool_from_function,
)
from tests.tools.sample_tools import PING, get_weather

OBJECT = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def spec(**changes: Any) -> ToolSpec:
    fields: dict[str, Any] = {"name": "weather", "description": "The weather.",
                              "parameters": OBJECT}
    return ToolSpec(**(fields | changes))


@pytest.mark.parametrize("name", ["get_time", "a", "A-b_9", "x" * 64])
def test_valid_names(name: str) -> None:
    assert spec(name=name).name == name


@pytest.mark.parametrize("name", ["", "x" * 65, "get time", "get.time", "héllo", "a/b", None])
def test_invalid_names_are_refused_naming_the_field(name: Any) -> None:
    with pytest.raises(ToolSchemaError, match="must match") as caught:
        spec(name=name)
    assert caught.value.field == "name"


@pytest.mark.parametrize("parameters, field, problem", [
    ([], "parameters", "expected a JSON schema object"),
    ({"type": "array"}, "parameters.type", "expected 'object'"),
    ({"properties": {}}, "parameters.type", "expected 'object'"),
    ({"type": "object", "properties": {"a": {"type": "text"}}},
     "parameters.properties.a.type", "not a JSON type"),
    ({"type": "object", "properties": {"a": "string"}},
     "parameters.properties.a", "expected a schema object"),
    ({"type": "object", "properties": []}, "parameters.properties", "expected an object"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
     "parameters.required", "'b' is not one of the properties"),
    ({"type": "object", "required": "a"}, "parameters.required", "list of property names"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "int"}}}},
     "parameters.properties.a.items.type", "not a JSON type"),
    ({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, 3]}}},
     "parameters.properties.a.anyOf[1]", "expected a schema object"),
    ({"type": "object", "properties": {"a": {"enum": []}}}, "parameters.properties.a.enum",
     "non-empty"),
    ({"type": "object", "properties": {"a": {"type": "number", "default": float("nan")}}},
     "parameters", "not JSON-serialisable"),
    ({"type": "object", "properties": {"a": {"type": "string", "default": object()}}},
     "parameters", "not JSON-serialisable"),
])
def test_parameter_schemas_are_checked(parameters: Any, field: str, problem: str) -> None:
    with pytest.raises(ToolSchemaError, match=problem) as caught:
        spec(parameters=parameters)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"tool 'weather': {field}: ")


def test_description_and_function_are_checked() -> None:
    with pytest.raises(ToolSchemaError, match="description: expected a string"):
        spec(description=None)
    with pytest.raises(ToolSchemaError, match="function: int is not callable"):
        spec(function=3)


def test_the_spec_keeps_its_own_copy_of_the_schema() -> None:
    parameters = {"type": "object", "properties": {"a": {"type": "string"}}}
    made = spec(parameters=parameters)
    parameters["properties"]["a"]["type"] = "integer"
    assert made.parameters["properties"]["a"]["type"] == "string"
    exported = made.template_dict()
    exported["function"]["parameters"]["properties"]["a"]["type"] = "boolean"
    assert made.parameters["properties"]["a"]["type"] == "string"


def test_template_dict_is_the_openai_function_shape() -> None:
    assert spec().template_dict() == {"type": "function", "function": {
        "name": "weather", "description": "The weather.", "parameters": OBJECT}}


@pytest.mark.parametrize("definition", [
    {"type": "function", "name": "weather", "description": "The weather.",
     "parameters": OBJECT},  # Realtime's session.update shape
    {"type": "function", "function": {"name": "weather", "description": "The weather.",
                                      "parameters": OBJECT}},  # chat completions' shape
])
def test_client_tools_from_either_definition_shape(definition: dict[str, Any]) -> None:
    made = spec_from_definition(definition)
    assert made == spec()
    assert not made.is_local and made.function is None


@pytest.mark.parametrize("definition, field", [
    ({"type": "code_interpreter", "name": "x"}, "type"),
    ({"type": "function", "description": "no name"}, "name"),
    ({"type": "function", "name": "x", "parameters": {"type": "string"}}, "parameters.type"),
    ("weather", "definition"),
])
def test_bad_client_definitions_name_the_field(definition: Any, field: str) -> None:
    with pytest.raises(ToolSchemaError) as caught:
        spec_from_definition(definition)
    assert caught.value.field == field


def test_a_client_tool_without_parameters_takes_none() -> None:
    made = spec_from_definition({"name": "ping"})
    assert made.parameters == {"type": "object", "properties": {}}


def test_registry_lookup_order_and_template_specs() -> None:
    weather = tool_from_function(get_weather)
    registry = ToolRegistry([weather, PING])
    assert registry.names == ("get_weather", "ping")
    assert registry.get("ping") is PING and "ping" in registry and "pong" not in registry
    assert len(registry) == 2 and bool(registry) and not ToolRegistry()
    assert [s.name for s in registry] == ["get_weather", "ping"]
    assert registry.specs_for_template() == [weather.template_dict(), PING.template_dict()]
    assert registry.speculative_ok("ping") and not registry.speculative_ok("get_weather")
    assert not registry.speculative_ok("nothing")
    with pytest.raises(UnknownToolError, match=r"unknown tool 'pong' \(tools: get_weather, ping\)"):
        registry.get("pong")
    with pytest.raises(UnknownToolError, match=r"\(tools: none\)"):
        ToolRegistry().get("pong")


def test_registry_refuses_two_tools_of_one_name() -> None:
    with pytest.raises(ToolSchemaError, match="two tools have this name"):
        ToolRegistry([PING, spec(name="ping")])
