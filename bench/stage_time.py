"""Where a served turn's compute goes: the wall time of each stage's model calls.

A bench aid, not product code: :class:`StageTimer` wraps the calls that do each stage's
heavy work, on whatever thread runs them, and adds up their wall time and count:

- ``whisper``: the CTranslate2 calls (encode, generate, align) that a daemon's decodes
  share (`audio.asr_batch`, ``server.batch_asr``, on by default; without it they are not
  seen); ``decodes`` counts the sessions' decodes, caller side;
- ``smart turn``: the audio end-of-turn model (`audio.smart_turn`);
- ``piper``: each clause's synthesis (`audio.tts.Synthesizer.synthesize_span`);
- ``engine``: the engine host's steps and commands (prefill, decode, forks, cuts).

At one session the stages seldom overlap, so a stage's time is close to what it costs
alone; with many sessions it includes waiting for the cores. What a stage's time
occupies depends on its threads: the engine runs ``engine.threads`` (one on 2 cores),
Smart Turn one, Whisper and Piper up to every core.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["StageTimer", "StageTotals", "STAGES"]


@dataclass(frozen=True)
class StageTotals:
    seconds: float
    calls: int


def _targets() -> list[tuple[str, Any, str]]:
    """(stage, owner, attribute) of each wrapped call; imported late (heavy modules)."""
    from assistant.llm.host import EngineHost
    from audio.asr import Transcriber
    from audio.asr_batch import _BatchedModel
    from audio.smart_turn import SmartTurn
    from audio.tts import Synthesizer

    return [("whisper", _BatchedModel, "_run_encode"), ("whisper", _BatchedModel, "_run_generate"),
            ("whisper", _BatchedModel, "_run_align"), ("decodes", Transcriber, "transcribe"),
            ("smart turn", SmartTurn, "p_complete"), ("piper", Synthesizer, "synthesize_span"),
            ("engine", EngineHost, "_step"), ("engine", EngineHost, "_run_command")]


STAGES = ("whisper", "smart turn", "piper", "engine")
"""The stages whose time is reported (``decodes`` is a count only)."""


class StageTimer:
    """Adds up the wall time of each stage's calls while :meth:`installed`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}
        self._calls: dict[str, int] = {}

    def snapshot(self) -> dict[str, StageTotals]:
        with self._lock:
            return {k: StageTotals(self._seconds.get(k, 0.0), self._calls.get(k, 0))
                    for k in (*STAGES, "decodes")}

    @staticmethod
    def since(before: dict[str, StageTotals], after: dict[str, StageTotals]
              ) -> dict[str, StageTotals]:
        return {k: StageTotals(after[k].seconds - before[k].seconds,
                               after[k].calls - before[k].calls) for k in after}

    def _wrap(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t
                with self._lock:
                    self._seconds[stage] = self._seconds.get(stage, 0.0) + dt
                    self._calls[stage] = self._calls.get(stage, 0) + 1
        return timed

    @contextmanager
    def installed(self) -> Iterator[StageTimer]:
        """Wrap the calls (class attributes: every instance, every thread) until exit."""
        saved = []
        for stage, owner, name in _targets():
            fn = owner.__dict__[name]
            saved.append((owner, name, fn))
            setattr(owner, name, self._wrap(stage, fn))
        try:
            yield self
        finally:
            for owner, name, fn in reversed(saved):
                setattr(owner, name, fn)
