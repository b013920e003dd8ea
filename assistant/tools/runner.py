"""Running a local tool: arguments in as the model wrote them, a `ToolResult` out.

Whatever goes wrong with the call -- arguments that are not JSON or fail validation, the
tool raising, the tool taking longer than its timeout, a result that is not
JSON-serialisable or too long -- becomes an error result whose ``output`` tells the model
what happened (``{"error": "timed out after 5 s"}``); no exception escapes for it.
Cancellation is different: a barge-in cancels the task awaiting `run_tool`, and
`asyncio.CancelledError` propagates to that caller as usual (an async tool is cancelled
with it).

A sync tool runs in a worker thread (`asyncio.to_thread`). A thread cannot be killed: on
a timeout or a cancellation the thread runs on to its end and its result is dropped (and
the event loop's shutdown waits for it: `asyncio.run` joins its worker threads), so a
sync tool that can hang should take its own timeout.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_json

from assistant.tools.errors import ToolError, UnknownToolError
from assistant.tools.registry import ToolRegistry
from assistant.tools.spec import ToolSpec

__all__ = ["MAX_OUTPUT_CHARS", "ToolResult", "error_output", "parse_arguments", "run_call",
           "run_tool"]

MAX_OUTPUT_CHARS = 8000
"""Default cap on a result's JSON text: more would crowd the model's context."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolResult:
    """What running one tool call gave."""

    name: str
    """The tool that ran."""
    ok: bool
    """The tool returned a value (False: an error the model is told about)."""
    output: str
    """JSON text for the model: the returned value, or ``{"error": "..."}``."""
    error: str | None = None
    """What went wrong, in words (None when `ok`)."""

    @classmethod
    def failure(cls, name: str, error: str) -> ToolResult:
        return cls(name=name, ok=False, output=error_output(error), error=error)

    def message(self) -> dict[str, Any]:
        """The ``tool`` message that returns this result to the model (chat templates'
        convention: ``{"role": "tool", "name": ..., "content": ...}``)."""
        return {"role": "tool", "name": self.name, "content": self.output}


def error_output(error: str) -> str:
    """What the model is told when a call gives no result: ``{"error": ...}``."""
    return json.dumps({"error": error})


async def run_call(registry: ToolRegistry, name: str, arguments_json: str, *,
                   timeout_s: float) -> ToolResult:
    """Run a call of the tool named ``name`` in ``registry`` (see `run_tool`); a tool it
    does not hold is an error result."""
    try:
        spec = registry.get(name)
    except UnknownToolError as exc:
        return ToolResult.failure(name, str(exc))
    return await run_tool(spec, arguments_json, timeout_s=timeout_s)


async def run_tool(spec: ToolSpec, arguments_json: str, *, timeout_s: float,
                   max_output_chars: int = MAX_OUTPUT_CHARS) -> ToolResult:
    """Run a local tool on the arguments the model generated (a JSON object's text; an
    empty string means no arguments).

    Returns an error result for bad arguments, an exception, a timeout or an unusable
    result; raises `asyncio.CancelledError` when the awaiting task is cancelled, and
    `ToolError` for a client tool (nothing here can run it).
    """
    if spec.function is None:
        raise ToolError(f"tool {spec.name!r} is a client tool: the client runs it")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    try:
        kwargs = parse_arguments(spec, arguments_json)
    except ValueError as exc:
        return ToolResult.failure(spec.name, str(exc))
    function = spec.function
    if _is_async(function):
        work: Any = function(**kwargs)
    else:
        work = asyncio.to_thread(function, **kwargs)
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(functools.partial(_log_late_end, spec.name))
        raise
    if not done:
        task.cancel()
        task.add_done_callback(functools.partial(_log_late_end, spec.name))
        _log.warning("tool %s timed out after %g s%s", spec.name, timeout_s,
                     "" if _is_async(function) else " (its thread runs on, result dropped)")
        return ToolResult.failure(spec.name, f"timed out after {timeout_s:g} s")
    raised = task.exception()
    if raised is not None:
        _log.info("tool %s raised %s: %s", spec.name, type(raised).__name__, raised)
        return ToolResult.failure(spec.name, f"{type(raised).__name__}: {raised}")
    try:
        output = to_json(task.result(), inf_nan_mode="null").decode()
    except PydanticSerializationError as exc:
        return ToolResult.failure(spec.name, f"the result is not JSON-serialisable ({exc})")
    if len(output) > max_output_chars:
        return ToolResult.failure(
            spec.name, f"the result is too long ({len(output)} characters; at most "
                       f"{max_output_chars})")
    return ToolResult(name=spec.name, ok=True, output=output)


def parse_arguments(spec: ToolSpec, arguments_json: str) -> dict[str, Any]:
    """The keyword arguments for `spec`'s function: the JSON object parsed and, when the
    spec has an arguments model, validated and coerced by it. Raises `ValueError` with a
    message for the model."""
    text = arguments_json.strip()
    try:
        arguments = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc.msg} at character "
                         f"{exc.pos})") from None
    if not isinstance(arguments, Mapping):
        raise ValueError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    model = spec.arguments_model
    if model is None:
        return dict(arguments)
    try:
        validated = model.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in exc.errors(include_url=False))
        raise ValueError(f"invalid arguments: {problems}") from None
    return {info.alias or name: getattr(validated, name)
            for name, info in type(validated).model_fields.items()}


def _is_async(function: Any) -> bool:
    return (inspect.iscoroutinefunction(function)
            or inspect.iscoroutinefunction(getattr(function, "__call__", None)))  # noqa: B004


def _log_late_end(name: str, task: asyncio.Future[Any]) -> None:
    """Retrieves the outcome of a tool that was given up on (no 'exception never
    retrieved'), and says when it failed."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        _log.info("tool %s, given up on, raised %s: %s", name, type(exc).__name__, exc)
