"""The built-in tools, off unless configured (``tools.enabled: [builtin:get_time, ...]``).

They are made per conversation by `builtin_tools`, since ``set_timer`` needs that
conversation's `TimerService` (the loop says a timer's announcement when it fires);
nothing here is module state.

- ``get_time``: the current local date and time, or in an IANA time zone.
- ``calculator``: safe arithmetic (`assistant.tools.calculator`).
- ``set_timer``: starts a timer and returns at once with a confirmation.

``get_time`` and ``calculator`` are read-only, so they may run during a speculative draft
(`ToolSpec.speculative_ok`); ``set_timer`` may not.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from assistant.tools.calculator import evaluate
from assistant.tools.signature import tool_from_function
from assistant.tools.spec import ToolSpec
from assistant.tools.timers import MAX_TIMER_S, TimerService

__all__ = ["BUILTIN_PREFIX", "BUILTIN_TOOLS", "builtin_tools", "local_now"]

BUILTIN_PREFIX = "builtin:"
"""How the configuration names a built-in tool: ``builtin:get_time``."""
BUILTIN_TOOLS = ("get_time", "calculator", "set_timer")
"""The built-in tools' names."""


def local_now() -> datetime:
    """The wall clock in the local time zone (``get_time``'s default source)."""
    return datetime.now().astimezone()


def builtin_tools(*, timers: TimerService | None = None,
                  now: Callable[[], datetime] = local_now) -> dict[str, ToolSpec]:
    """The built-in tools of one conversation, by name.

    `timers` is the conversation's timer service (None: no ``set_timer``); `now` gives
    the current time zone-aware wall-clock time.
    """

    def get_time(timezone: str | None = None) -> dict[str, Any]:
        """The current date and time.

        Args:
            timezone: An IANA time zone such as "Europe/Paris"; omit it for local time.
        """
        current = now()
        if timezone:
            try:
                current = current.astimezone(ZoneInfo(timezone))
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {timezone!r}") from None
        return {"date": current.strftime("%Y-%m-%d"), "weekday": current.strftime("%A"),
                "time": current.strftime("%H:%M"),
                "timezone": timezone or current.tzname() or "local",
                "iso": current.isoformat(timespec="seconds")}

    def calculator(expression: str) -> dict[str, Any]:
        """Evaluate an arithmetic expression exactly; use it for any arithmetic.

        Args:
            expression: Numbers with + - * / // % ** and parentheses, and sqrt, abs,
                round, floor, ceil, exp, log, log10, log2, sin, cos, tan, min, max, pi;
                for example "(12.5 * 4) ** 2".
        """
        return {"expression": expression, "result": evaluate(expression)}

    specs = {
        "get_time": tool_from_function(get_time, speculative_ok=True),
        "calculator": tool_from_function(calculator, speculative_ok=True),
    }
    if timers is not None:
        service = timers

        async def set_timer(seconds: Annotated[float, Field(gt=0, le=MAX_TIMER_S)],
                            label: str = "") -> dict[str, Any]:
            """Start a timer; the assistant says so out loud when it is done.

            Args:
                seconds: How long the timer runs, in seconds.
                label: What the timer is for, e.g. "pasta".
            """
            timer = service.start(seconds, label)
            return {"timer_id": timer.timer_id, "label": timer.label,
                    "seconds": timer.seconds, "status": "started"}

        specs["set_timer"] = tool_from_function(set_timer)
    return specs
