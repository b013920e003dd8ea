"""Metrics of a conversation, computed from its event log.

Everything is derived from :mod:`assistant.loop.event_log` entries, so a replay's metrics can
be recomputed from its ``events.jsonl``: voice-to-voice latency (end of user speech to
the reply's first audio), endpoint-to-audio latency (end of turn detected to first
audio), barge-in stop latency and leaked audio, speculation hit rate, and prompt tokens
computed / reused per turn. The engine-vs-history token check is passed in by the
pipeline, which owns both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from assistant.loop.event_log import (
    AudioStartedEntry,
    BargeInEntry,
    Entry,
    PlaybackStoppedEntry,
    ResponseDoneEntry,
    ResponseStartedEntry,
    SpeculationHitEntry,
    SpeculationMissEntry,
)

__all__ = ["TurnMetrics", "Metrics", "compute_metrics", "percentile"]


@dataclass(frozen=True)
class TurnMetrics:
    """One assistant turn."""

    turn_id: int
    user_text: str
    speculation: str
    """hit | miss | none."""
    prompt_tokens: int
    prompt_tokens_computed: int
    prompt_tokens_reused: int
    voice_to_voice_ms: int | None
    """End of user speech to the reply's first audio; None if nothing played."""
    endpoint_to_audio_ms: int | None
    """End of turn detected to the reply's first audio."""
    interrupted: bool
    barge_in_stop_ms: int | None
    """Barge-in detected to playback stopped."""
    leaked_ms: int | None
    """Reply audio played after the barge-in was detected."""
    generated_tokens: int
    spoken_ms: int


@dataclass(frozen=True)
class Metrics:
    turns: tuple[TurnMetrics, ...]
    voice_to_voice_ms: tuple[int, ...]
    endpoint_to_audio_ms: tuple[int, ...]
    barge_in_stop_ms: tuple[int, ...]
    leaked_audio_ms: tuple[int, ...]
    speculation_hits: int
    speculation_misses: int
    speculation_hit_rate: float | None
    """hits / (hits + misses); None when nothing was speculated at an end of turn."""
    sequence_tokens: int
    """The engine sequence's length at the end."""
    history_tokens: int
    """Token count of the rendered history at the end."""
    history_text_matches: bool | None = None
    """The sequence decodes to the chat template's rendering of the history."""

    @property
    def sequence_matches_history(self) -> bool:
        return self.sequence_tokens == self.history_tokens

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["sequence_matches_history"] = self.sequence_matches_history
        for key in ("voice_to_voice_ms", "endpoint_to_audio_ms", "barge_in_stop_ms"):
            values = getattr(self, key)
            out[f"{key}_p50"] = percentile(values, 50)
            out[f"{key}_p95"] = percentile(values, 95)
        return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation (numpy's default); None if empty."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def compute_metrics(entries: Iterable[Entry], *, sequence_tokens: int, history_tokens: int,
                    history_text_matches: bool | None = None) -> Metrics:
    """Fold an event log into :class:`Metrics`."""
    started: dict[int, ResponseStartedEntry] = {}
    audio: dict[int, AudioStartedEntry] = {}
    barge: dict[int, BargeInEntry] = {}
    stopped: dict[int, PlaybackStoppedEntry] = {}
    done: dict[int, ResponseDoneEntry] = {}
    hits = misses = 0
    for e in entries:
        if isinstance(e, ResponseStartedEntry):
            started[e.turn_id] = e
        elif isinstance(e, AudioStartedEntry):
            audio.setdefault(e.turn_id, e)
        elif isinstance(e, BargeInEntry):
            barge.setdefault(e.turn_id, e)
        elif isinstance(e, PlaybackStoppedEntry):
            stopped.setdefault(e.turn_id, e)
        elif isinstance(e, ResponseDoneEntry):
            done[e.turn_id] = e
        elif isinstance(e, SpeculationHitEntry):
            hits += 1
        elif isinstance(e, SpeculationMissEntry):
            misses += 1
    turns: list[TurnMetrics] = []
    for turn_id in sorted(started):
        s = started[turn_id]
        a = audio.get(turn_id)
        b = barge.get(turn_id)
        p = stopped.get(turn_id)
        d = done.get(turn_id)
        turns.append(TurnMetrics(
            turn_id=turn_id,
            user_text=s.user_text,
            speculation=s.speculation,
            prompt_tokens=s.prompt_tokens,
            prompt_tokens_computed=s.prompt_tokens_computed,
            prompt_tokens_reused=s.prompt_tokens_reused,
            voice_to_voice_ms=a.t_ms - a.speech_end_ms if a else None,
            endpoint_to_audio_ms=a.t_ms - a.endpoint_ms if a else None,
            interrupted=b is not None,
            barge_in_stop_ms=p.t_ms - b.t_ms if (b and p) else None,
            leaked_ms=p.leaked_ms if (b and p) else None,
            generated_tokens=d.generated_tokens if d else 0,
            spoken_ms=d.spoken_ms if d else 0,
        ))

    def collect(name: str) -> tuple[int, ...]:
        return tuple(v for t in turns if (v := getattr(t, name)) is not None)

    total = hits + misses
    return Metrics(
        turns=tuple(turns),
        voice_to_voice_ms=collect("voice_to_voice_ms"),
        endpoint_to_audio_ms=collect("endpoint_to_audio_ms"),
        barge_in_stop_ms=collect("barge_in_stop_ms"),
        leaked_audio_ms=collect("leaked_ms"),
        speculation_hits=hits,
        speculation_misses=misses,
        speculation_hit_rate=hits / total if total else None,
        sequence_tokens=sequence_tokens,
        history_tokens=history_tokens,
        history_text_matches=history_text_matches,
    )
