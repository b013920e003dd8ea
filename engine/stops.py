"""Stop strings that may span several tokens and arrive split across steps.

Text that could still become a stop string is held back, so streamed text never contains
any part of a stop string: if a stop string starts at character j of the generated text,
every character before j has been (or will be) released, and none after.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopMatcher"]


class StopMatcher:
    def __init__(self, stops: Sequence[str]) -> None:
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        self.stops = tuple(stops)

    def find(self, text: str, start: int = 0) -> int | None:
        """Index of the earliest stop string in `text[start:]` (in `text` coordinates)."""
        found = [i for i in (text.find(s, start) for s in self.stops) if i >= 0]
        return min(found) if found else None

    def holdback(self, text: str) -> int:
        """Characters at the end of `text` that are a proper prefix of some stop string
        (and so must not be released yet)."""
        hold = 0
        for stop in self.stops:
            for length in range(min(len(stop) - 1, len(text)), hold, -1):
                if text.endswith(stop[:length]):
                    hold = length
                    break
        return hold
