"""Tools named in the configuration: built-ins and module:function references, each
failure a clear error naming the reference; the config section that lists them."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from assistant.app import config_tools
from assistant.app.config import AppConfig, ConfigError, load_config
from assistant.app.errors import UserError
from assistant.tools import (
    BUILTIN_PREFIX,
    BUILTIN_TOOLS,
    NAME_PATTERN,
    REFERENCE_PATTERN,
    TimerService,
    ToolLoadError,
    ToolOptions,
    build_registry,
    builtin_tools,
    load_tool,
    run_tool,
)
from tests.tools.sample_tools import PING, get_weather


def test_module_function_references_load() -> None:
    weather = load_tool("tests.tools.sample_tools:get_weather")
    assert weather.name == "get_weather" and weather.function is get_weather
    assert load_tool("tests.tools.sample_tools:PING") is PING  # a ToolSpec, used as it is
    greet = load_tool("tests.tools.sample_tools:greeter.greet")
    assert greet.name == "greet"
    result = asyncio.run(run_tool(greet, '{"name": "Ada"}', timeout_s=30))
    assert result.output == '"Hello, Ada!"'


@pytest.mark.parametrize("ref, message", [
    ("get_weather", "expected module:function or builtin:NAME"),
    ("tests.tools.sample_tools:", "expected module:function or builtin:NAME"),
    ("a:b:c", "expected module:function or builtin:NAME"),
    ("tests/tools:x", "expected module:function or builtin:NAME"),
    ("no_such_module_7f3a:f", "no module named 'no_such_module_7f3a' (is it installed, or "
                              "on PYTHONPATH?)"),
    ("tests.tools.no_such_module:f", "no module named 'tests.tools.no_such_module' (is it "
                                     "installed, or on PYTHONPATH?)"),
    ("tests.tools.sample_tools:nothing", "'tests.tools.sample_tools' has no attribute "
                                         "'nothing'"),
    ("tests.tools.sample_tools:greeter.wave", "'tests.tools.sample_tools.greeter' has no "
                                              "attribute 'wave'"),
    ("tests.tools.sample_tools:ANSWER", "neither callable nor a ToolSpec (type int)"),
    ("builtin:weather", "no such built-in tool (built-ins: get_time, calculator, set_timer)"),
])
def test_bad_references_say_what_is_wrong(ref: str, message: str) -> None:
    with pytest.raises(ToolLoadError) as caught:
        load_tool(ref, builtins=builtin_tools())
    assert str(caught.value) == f"tools.enabled {ref!r}: {message}"
    assert isinstance(caught.value, UserError)  # the CLI prints it as one line


def test_a_module_that_fails_to_import_is_named(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_a_dependency_7f3a.py").write_text("import missing_dependency_7f3a\n")
    (tmp_path / "raises_on_import_7f3a.py").write_text("raise RuntimeError('no config')\n")
    (tmp_path / "untyped_tools_7f3a.py").write_text("def f(*args):\n    return args\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("needs_a_dependency_7f3a", "raises_on_import_7f3a", "untyped_tools_7f3a"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ToolLoadError, match=r"importing 'needs_a_dependency_7f3a' failed: "
                                            r"No module named 'missing_dependency_7f3a'"):
        load_tool("needs_a_dependency_7f3a:f")
    with pytest.raises(ToolLoadError, match=r"importing 'raises_on_import_7f3a' raised "
                                            r"RuntimeError: no config"):
        load_tool("raises_on_import_7f3a:f")
    with pytest.raises(ToolLoadError, match=r"'untyped_tools_7f3a:f': tool 'f': "
                                            r"parameters.args: \*args"):
        load_tool("untyped_tools_7f3a:f")


def test_the_timer_needs_its_conversations_service() -> None:
    with pytest.raises(ToolLoadError, match="needs the conversation's TimerService"):
        build_registry(["builtin:set_timer"])


def test_build_registry_in_order_with_the_configured_speculation() -> None:
    timers = TimerService(lambda: 0.0)
    now = datetime(2025, 1, 1, tzinfo=UTC)
    enabled = ["builtin:set_timer", "tests.tools.sample_tools:get_weather", "builtin:get_time"]
    registry = build_registry(enabled, speculative_ok=ToolOptions().speculative_ok,
                              timers=timers, now=lambda: now)
    assert registry.names == ("set_timer", "get_weather", "get_time")
    assert [registry.speculative_ok(n) for n in registry.names] == [False, False, True]
    everything = build_registry(enabled, speculative_ok=["set_timer", "get_weather"],
                                timers=timers)
    assert [everything.speculative_ok(n) for n in everything.names] == [True, True, False]
    own = build_registry(["builtin:calculator", "tests.tools.sample_tools:PING"])
    assert own.speculative_ok("calculator") and own.speculative_ok("ping")  # their own flags
    result = asyncio.run(run_tool(registry.get("get_time"), "{}", timeout_s=30))
    assert '"date":"2025-01-01"' in result.output


# ---- the config section ---------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_tools_are_off_by_default_and_the_options_mirror_the_config() -> None:
    config = AppConfig().tools
    assert config.enabled == ()
    assert ToolOptions(**config.model_dump()) == ToolOptions()


def test_a_tools_section_loads(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, (
        "tools:\n  enabled: [builtin:get_time, 'tests.tools.sample_tools:get_weather']\n"
        "  timeout_s: 2\n  speculative_ok: [get_time, get_weather]\n")), env={})
    assert cfg.tools.enabled == ("builtin:get_time", "tests.tools.sample_tools:get_weather")
    assert cfg.tools.timeout_s == 2.0
    registry = build_registry(cfg.tools.enabled, speculative_ok=cfg.tools.speculative_ok)
    assert registry.speculative_ok("get_weather")


@pytest.mark.parametrize("text, message", [
    ("tools:\n  enabled: [get_time]\n", "'get_time': expected module:function or builtin:NAME"),
    ("tools:\n  enabled: [builtin:clock]\n", "'builtin:clock': no such built-in tool"),
    ("tools:\n  enabled: [builtin:get_time, builtin:get_time]\n", "listed twice"),
    ("tools:\n  speculative_ok: [get time]\n", "'get time' is not a tool name"),
    ("tools:\n  timeout_s: 0\n", "tools.timeout_s': Input should be greater than 0"),
    ("tools:\n  filler_after_ms: 0\n", "tools.filler_after_ms': Input should be greater than 0"),
    ("tools:\n  enabled: builtin:get_time\n", "tools.enabled': Input should be a valid tuple"),
])
def test_bad_tools_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="tools.") as caught:
        load_config(write(tmp_path, text), env={})
    assert message in str(caught.value)


def test_the_config_checks_follow_the_tools_package() -> None:
    # config_tools repeats these (it may not import assistant.tools): they must agree.
    assert config_tools._BUILTIN_PREFIX == BUILTIN_PREFIX
    assert config_tools._BUILTIN_TOOLS == BUILTIN_TOOLS == tuple(
        builtin_tools(timers=TimerService(lambda: 0.0)))
    assert config_tools._TOOL_REFERENCE.pattern == REFERENCE_PATTERN.pattern
    assert config_tools._TOOL_NAME.pattern == NAME_PATTERN.pattern
