"""Where a served turn's time goes, stage by stage: the sessions' waterfalls.

`bench_serve.py` measures voice-to-voice at the client. This keeps every session the
server makes (a wrapper around the runtime's backend factory), reads each one's event
log when the level is over (`PipelineBackend.log_entries`, kept after the session
closes), and turns it into per-turn waterfalls (`assistant.loop.waterfall`): when the
pause was detected, the end-of-turn scores came, the speculation's first clause was
drafted and synthesised, the end of turn was decided, the reply started and its first
audio went out, in ms after the end of the user's speech on the session's clock. Set
side by side for one session alone and N at once, they say which stage a burst of users
makes later.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loop_human import stage_rows

from assistant.loop.metrics import percentile
from assistant.loop.waterfall import STAGES, Waterfall, waterfalls

__all__ = ["SessionLogs", "p50_rows", "slowest_rows"]


class SessionLogs:
    """Wraps a backend factory; :meth:`take` gives the waterfalls of the sessions made
    since the last call (call it once they are closed). Sessions made after :meth:`stop`
    are not kept (a soak's thousands of sessions would all stay in memory)."""

    def __init__(self, factory: Callable[[Any], Any]) -> None:
        self._factory = factory
        self._made: list[Any] = []
        self._keep = True

    def __call__(self, settings: Any) -> Any:
        backend = self._factory(settings)
        if self._keep:
            self._made.append(backend)
        return backend

    def stop(self) -> None:
        self._keep = False
        self._made = []

    def take(self) -> list[Waterfall]:
        made, self._made = self._made, []
        return [w for backend in made for w in waterfalls(backend.log_entries())
                if w.first_audio is not None]


def p50_rows(levels: Mapping[Any, Sequence[Waterfall]]) -> list[list[str]]:
    """One row per stage (then the speculation hits), one column per level (a load N, a
    configuration): the stage's p50 over the turns that reached it, with how many did
    when not all."""
    rows = []
    for stage in STAGES:
        row = [stage]
        for falls in levels.values():
            values = [v for w in falls if (v := getattr(w, stage)) is not None]
            p50 = percentile(values, 50) if values else None
            cell = "-" if p50 is None else f"{p50:.0f}"
            if values and len(values) < len(falls):
                cell += f" ({len(values)}/{len(falls)})"
            row.append(cell)
        rows.append(row)
    rows.append(["speculation hits"] + [
        f"{sum(w.speculation == 'hit' for w in falls)}/{len(falls)}"
        for falls in levels.values()])
    return rows


def slowest_rows(falls: Sequence[Waterfall], count: int = 3) -> tuple[list[str], list[list[str]]]:
    """The ``count`` turns with the latest first audio: a header and one row per stage."""
    slowest = sorted(falls, key=lambda w: -(w.first_audio or 0))[:count]
    return [f"turn {w.turn_id} ({w.speculation})" for w in slowest], stage_rows(slowest)
