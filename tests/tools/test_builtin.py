"""The built-in tools: get_time, a calculator that refuses anything but arithmetic, and
timers that fire through their conversation's TimerService."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime

import pytest

from assistant.tools import (
    BUILTIN_TOOLS,
    CalculatorError,
    Timer,
    TimerService,
    ToolResult,
    ToolSpec,
    builtin_tools,
    evaluate,
    run_tool,
)

NOW = datetime(2025, 3, 30, 0, 30, 5, tzinfo=UTC)  # a Sunday; Paris moves to CEST at 01:00


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def call(spec: ToolSpec, arguments: str) -> ToolResult:
    return asyncio.run(run_tool(spec, arguments, timeout_s=30))


# ---- calculator ---------------------------------------------------------------------------


@pytest.mark.parametrize("expression, value", [
    ("2 * (3 + 4) ** 2", 98),
    ("-2 ** 2", -4),
    ("(-2) ** 2", 4),
    ("7 // 2 + 7 % 2", 4),
    ("1 / 4", 0.25),
    ("0.1 + 0.2", 0.3),
    ("6 / 3", 2),
    ("2 / 3", 0.666666666667),
    ("sqrt(16) + abs(-1) + round(2.5) + floor(1.9) + ceil(1.1)", 10),
    ("max(1, 5, 3) - min(2, 4)", 3),
    ("pi", 3.14159265359),
    ("log10(1000)", 3),
    ("2 ** 10", 1024),
    ("2 ** -1", 0.5),
    ("1e3 * 3", 3000),
    ("+5", 5),
])
def test_arithmetic(expression: str, value: float) -> None:
    result = evaluate(expression)
    assert result == value
    assert isinstance(result, int) == isinstance(value, int)


@pytest.mark.parametrize("expression, problem", [
    ("__import__('os').system('true')", "only these functions are allowed"),
    ("(1).real", "Attribute is not allowed"),
    ("math.pi", "Attribute is not allowed"),
    ("[1, 2][0]", "Subscript is not allowed"),
    ("'a' * 3", "only numbers are allowed"),
    ("True + 1", "only numbers are allowed"),
    ("x + 1", "unknown name 'x'"),
    ("open", "unknown name 'open'"),
    ("lambda: 1", "Lambda is not allowed"),
    ("[x for x in (1, 2)]", "ListComp is not allowed"),
    ("1 if 1 else 2", "IfExp is not allowed"),
    ("1 < 2", "Compare is not allowed"),
    ("2 ^ 10", r"operator \^ is not allowed \(use \*\* for powers\)"),
    ("1 << 10000", "operator << is not allowed"),
    ("~1", "operator ~ is not allowed"),
    ("sqrt(x=4)", "plain positional arguments"),
    ("sqrt(*[4])", "plain positional arguments"),
    ("9 ** 9 ** 9", "too large"),
    ("10 ** 100000", "too large"),
    ("2 ** 4096", "too large"),
    ("(2 ** 4000) * (2 ** 4000)", "too large"),
    ("1 ** 10 ** 6", "the exponent is too large"),
    ("10.0 ** 400", "too large"),
    ("exp(1000)", "too large"),
    ("1 / 0", "division by zero"),
    ("5 % 0", "division by zero"),
    ("sqrt(-1)", "math error"),
    ("(-8) ** 0.5", "not a real number"),
    ("1 +", "not an arithmetic expression"),
    ("import os", "not an arithmetic expression"),
    ("1" * 300, "too long"),
])
def test_anything_but_arithmetic_is_refused(expression: str, problem: str) -> None:
    with pytest.raises(CalculatorError, match=problem):
        evaluate(expression)


def test_the_largest_allowed_power_is_exact() -> None:
    assert evaluate("2 ** 4095") == 2 ** 4095
    assert math.isclose(evaluate("0.5 ** 10000"), 0.0)


def test_the_calculator_tool_reports_refusals_to_the_model() -> None:
    calculator = builtin_tools()["calculator"]
    assert json.loads(call(calculator, '{"expression": "12.5 * 4"}').output) == {
        "expression": "12.5 * 4", "result": 50}
    refused = call(calculator, '{"expression": "__import__(\\"os\\")"}')
    assert not refused.ok and refused.error is not None
    assert refused.error.startswith("CalculatorError: only these functions are allowed")


# ---- get_time -------------------------------------------------------------------------------


def test_get_time_in_the_local_zone_and_in_an_iana_zone() -> None:
    get_time = builtin_tools(now=lambda: NOW)["get_time"]
    assert json.loads(call(get_time, "{}").output) == {
        "date": "2025-03-30", "weekday": "Sunday", "time": "00:30", "timezone": "UTC",
        "iso": "2025-03-30T00:30:05+00:00"}
    paris = json.loads(call(get_time, '{"timezone": "Europe/Paris"}').output)
    assert (paris["time"], paris["timezone"], paris["iso"]) == (
        "01:30", "Europe/Paris", "2025-03-30T01:30:05+01:00")
    tokyo = json.loads(call(get_time, '{"timezone": "Asia/Tokyo"}').output)
    assert (tokyo["date"], tokyo["time"]) == ("2025-03-30", "09:30")


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", "/etc/localtime"])
def test_get_time_refuses_unknown_zones(zone: str) -> None:
    result = call(builtin_tools(now=lambda: NOW)["get_time"], json.dumps({"timezone": zone}))
    assert result.error == f"ValueError: unknown time zone {zone!r}"


def test_read_only_builtins_may_run_speculatively_the_timer_may_not() -> None:
    tools = builtin_tools(timers=TimerService(FakeClock()))
    assert tuple(tools) == BUILTIN_TOOLS
    assert {name: spec.speculative_ok for name, spec in tools.items()} == {
        "get_time": True, "calculator": True, "set_timer": False}
    assert "set_timer" not in builtin_tools()  # no timer service, no timers


def test_each_conversation_gets_its_own_timers() -> None:
    first, second = TimerService(FakeClock()), TimerService(FakeClock())
    call(builtin_tools(timers=first)["set_timer"], '{"seconds": 5}')
    assert len(first.pending()) == 1 and second.pending() == ()


# ---- set_timer and its service --------------------------------------------------------------


def test_set_timer_returns_at_once_and_the_timer_fires_on_the_clock() -> None:
    clock = FakeClock()
    timers = TimerService(clock)
    result = call(builtin_tools(timers=timers)["set_timer"], '{"seconds": "90", "label": "pasta"}')
    assert json.loads(result.output) == {"timer_id": 1, "label": "pasta", "seconds": 90.0,
                                         "status": "started"}
    assert timers.pending() == (Timer(timer_id=1, label="pasta", seconds=90.0, due_s=190.0),)
    assert timers.next_due_s() == 190.0
    assert timers.pop_due() == []
    clock.now_s = 189.99
    assert timers.pop_due() == []
    clock.now_s = 190.0
    (fired,) = timers.pop_due()
    assert fired.announcement == "Your timer for pasta is done."
    assert timers.pending() == () and timers.pop_due() == [] and timers.next_due_s() is None


@pytest.mark.parametrize("arguments, error", [
    ('{"seconds": 0}', "seconds: Input should be greater than 0"),
    ('{"seconds": 90000}', "seconds: Input should be less than or equal to 86400"),
    ('{"label": "tea"}', "seconds: Field required"),
])
def test_set_timer_refuses_bad_durations(arguments: str, error: str) -> None:
    timers = TimerService(FakeClock())
    result = call(builtin_tools(timers=timers)["set_timer"], arguments)
    assert result.error == f"invalid arguments: {error}"
    assert timers.pending() == ()


def test_timers_fire_in_due_order_and_cancel_is_idempotent() -> None:
    clock = FakeClock()
    timers = TimerService(clock, max_timers=3, max_seconds=60)
    eggs = timers.start(30, " eggs ")
    tea = timers.start(10)
    rice = timers.start(20, "rice")
    assert [t.label for t in timers.pending()] == ["", "rice", "eggs"]
    with pytest.raises(ValueError, match="too many timers"):
        timers.start(5)
    with pytest.raises(ValueError, match="at most 60"):
        TimerService(clock, max_seconds=60).start(61)
    assert timers.cancel(rice.timer_id) and not timers.cancel(rice.timer_id)
    assert timers.pop_due(now_s=clock.now_s + 60) == [tea, eggs]
    assert tea.announcement == "Your timer is done."
    assert eggs.label == "eggs"


def test_fired_yields_timers_as_they_come_due() -> None:
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        timers = TimerService(loop.time)
        fired = timers.fired()
        timers.start(60, "later")
        waiting = asyncio.ensure_future(anext(fired))
        await asyncio.sleep(0)  # the iterator now sleeps toward the 60 s timer
        timers.start(0.01, "sooner")  # ... and wakes for the sooner one
        labels = [(await asyncio.wait_for(waiting, 10)).label]
        # Started from another thread (a sync tool's worker), while nothing is pending.
        timers.cancel(timers.pending()[0].timer_id)
        waiting = asyncio.ensure_future(anext(fired))
        await asyncio.sleep(0)
        await asyncio.to_thread(timers.start, 0.01, "threaded")
        labels.append((await asyncio.wait_for(waiting, 10)).label)
        await fired.aclose()
        return labels

    assert asyncio.run(scenario()) == ["sooner", "threaded"]


def test_fired_has_one_reader_at_a_time() -> None:
    async def scenario() -> None:
        timers = TimerService(asyncio.get_running_loop().time)
        first = timers.fired()
        timers.start(0.01, "x")
        await asyncio.wait_for(anext(first), 10)
        with pytest.raises(RuntimeError, match="already being iterated"):
            await anext(timers.fired())
        await first.aclose()
        second = timers.fired()  # free again once the first is closed
        timers.start(0.01, "y")
        assert (await asyncio.wait_for(anext(second), 10)).label == "y"
        await second.aclose()

    asyncio.run(scenario())
