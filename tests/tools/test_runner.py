"""Running a tool call: every failure of the call becomes a result the model is told
about; cancellation (a barge-in) propagates to the caller."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from assistant.tools import ToolError, ToolResult, ToolSpec, run_tool, tool_from_function
from tests.tools.sample_tools import PING, get_weather, shout


def run(spec: ToolSpec, arguments: str, timeout_s: float = 30.0, **kwargs: Any) -> ToolResult:
    return asyncio.run(run_tool(spec, arguments, timeout_s=timeout_s, **kwargs))


def test_a_sync_tool_runs_in_a_worker_thread_and_returns_json() -> None:
    threads: list[threading.Thread] = []

    def where(label: str) -> dict[str, Any]:
        """Where it ran."""
        threads.append(threading.current_thread())
        return {"label": label, "n": 1.5}

    result = run(tool_from_function(where), '{"label": "é"}')
    assert result == ToolResult(name="where", ok=True, output='{"label":"é","n":1.5}')
    assert threads and threads[0] is not threading.main_thread()
    assert result.message() == {"role": "tool", "name": "where",
                                "content": '{"label":"é","n":1.5}'}


def test_an_async_tool_is_awaited_and_arguments_are_coerced() -> None:
    assert run(tool_from_function(shout), '{"text": "hi"}').output == '"HI"'
    weather = run(tool_from_function(get_weather), '{"city": "Oslo", "days": "2"}')
    assert json.loads(weather.output) == {"city": "Oslo", "unit": "C", "days": 2, "sky": "clear"}


def test_a_spec_without_a_model_gets_the_arguments_as_given() -> None:
    seen: list[dict[str, Any]] = []
    spec = ToolSpec(name="echo", description="", parameters={"type": "object"},
                    function=lambda **kw: seen.append(kw) or "ok")
    assert run(spec, '{"anything": [1, 2]}').ok
    assert seen == [{"anything": [1, 2]}]
    assert run(PING, "").output == '"pong"'


def failure(result: ToolResult) -> str:
    assert not result.ok
    assert result.error is not None
    assert json.loads(result.output) == {"error": result.error}
    return result.error


def test_an_exception_is_an_error_result() -> None:
    def broken(x: int) -> int:
        """Fails."""
        raise KeyError("no such record")

    assert failure(run(tool_from_function(broken), '{"x": 1}')) == "KeyError: 'no such record'"


@pytest.mark.parametrize("arguments, error", [
    ('{"city": ', "arguments are not valid JSON (Expecting value at character 8)"),
    ('["Oslo"]', "arguments must be a JSON object, got list"),
    ('{"city": "Oslo", "unit": "K"}', "invalid arguments: unit: Input should be 'C' or 'F'"),
    ('{"days": 2}', "invalid arguments: city: Field required"),
])
def test_bad_arguments_are_an_error_result_and_the_tool_never_runs(arguments: str,
                                                                   error: str) -> None:
    calls: list[str] = []

    def get_weather_logged(city: str, unit: str = "C") -> str:
        calls.append(city)
        return city

    spec = tool_from_function(get_weather)
    spec = ToolSpec(name=spec.name, description=spec.description, parameters=spec.parameters,
                    function=get_weather_logged, arguments_model=spec.arguments_model)
    assert failure(run(spec, arguments)) == error
    assert calls == []


def test_unusable_results_are_error_results() -> None:
    def opaque() -> object:
        """An object JSON cannot hold."""
        return threading.Lock()

    def chatty() -> str:
        """Too much."""
        return "x" * 100

    assert "not JSON-serialisable" in failure(run(tool_from_function(opaque), "{}"))
    assert failure(run(tool_from_function(chatty), "{}", max_output_chars=50)) == (
        "the result is too long (102 characters; at most 50)")


def test_a_slow_sync_tool_times_out_its_thread_runs_on_and_its_result_is_dropped() -> None:
    release = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        """Blocks until released."""
        release.wait(30)
        finished.set()
        return "late"

    async def scenario() -> ToolResult:
        try:
            return await run_tool(tool_from_function(slow), "{}", timeout_s=0.05)
        finally:
            assert not finished.is_set()
            release.set()  # (asyncio.run waits for the worker threads to end)

    assert failure(asyncio.run(scenario())) == "timed out after 0.05 s"
    assert finished.is_set()  # the thread ran on to its end; nobody got its result


def test_a_slow_async_tool_times_out_and_is_cancelled() -> None:
    cancelled: list[bool] = []

    async def hang() -> str:
        """Never answers."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    async def scenario() -> ToolResult:
        result = await run_tool(tool_from_function(hang), "{}", timeout_s=0.05)
        await asyncio.sleep(0)  # let the cancelled tool unwind
        return result

    assert failure(asyncio.run(scenario())) == "timed out after 0.05 s"
    assert cancelled == [True]


def test_cancelling_the_caller_cancels_an_async_tool() -> None:
    cancelled: list[bool] = []

    async def scenario() -> None:
        began = asyncio.Event()

        async def listen() -> str:
            """Waits."""
            began.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
            return "never"

        task = asyncio.create_task(run_tool(tool_from_function(listen), "{}", timeout_s=30))
        await began.wait()
        task.cancel()  # a barge-in
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert cancelled == [True]


def test_cancelling_the_caller_of_a_sync_tool_raises_at_once() -> None:
    started = threading.Event()
    release = threading.Event()

    def block() -> str:
        """Blocks."""
        started.set()
        release.wait(30)
        return "late"

    async def scenario() -> None:
        task = asyncio.create_task(run_tool(tool_from_function(block), "{}", timeout_s=30))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        try:
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            release.set()  # the thread was still blocked when the caller saw the cancel

    asyncio.run(scenario())


def test_a_client_tool_and_a_bad_timeout_are_caller_errors() -> None:
    client = ToolSpec(name="client", description="", parameters={"type": "object"})
    with pytest.raises(ToolError, match="client tool"):
        run(client, "{}")
    with pytest.raises(ValueError, match="timeout_s"):
        run(PING, "{}", timeout_s=0)


def test_run_call_runs_a_registered_tool_and_an_unknown_one_is_an_error_result() -> None:
    from assistant.tools import ToolRegistry
    from assistant.tools.runner import run_call

    registry = ToolRegistry([tool_from_function(shout)])
    ok = asyncio.run(run_call(registry, "shout", '{"text": "hi"}', timeout_s=5))
    assert ok.ok and ok.output == '"HI"'
    unknown = asyncio.run(run_call(registry, "whisper", "{}", timeout_s=5))
    assert not unknown.ok and unknown.name == "whisper"
    assert "whisper" in json.loads(unknown.output)["error"]
