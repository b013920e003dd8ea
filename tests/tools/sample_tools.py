"""Tools for the loading and runner tests, importable as ``tests.tools.sample_tools``."""

from __future__ import annotations

from typing import Literal

from assistant.tools import ToolSpec

ANSWER = 42
"""Not callable: naming it as a tool is an error."""


def get_weather(city: str, unit: Literal["C", "F"] = "C", days: int = 1) -> dict[str, object]:
    """The weather forecast for a city.

    Says whether to take an umbrella.

    Args:
        city (str): The city's name, e.g. "Paris".
        unit: Degrees Celsius or
            Fahrenheit.
        days: How many days ahead.

    Returns:
        The forecast.
    """
    return {"city": city, "unit": unit, "days": days, "sky": "clear"}


async def shout(text: str) -> str:
    """Say it louder.

    Args:
        text: What to say.
    """
    return text.upper()


class Greeter:
    def greet(self, name: str) -> str:
        """Greet someone.

        Args:
            name: Who.
        """
        return f"Hello, {name}!"


greeter = Greeter()

PING = ToolSpec(name="ping", description="Answers pong.",
                parameters={"type": "object", "properties": {}},
                speculative_ok=True, function=lambda: "pong")
"""A ready-made spec: used as it is."""
