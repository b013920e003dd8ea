"""Per-turn latency waterfall from an event log: when each stage happened, in ms after
the end of the user's speech.

The stages, in the order a fast turn goes through them: the pause detected, the
speculation started on its transcript, the end-of-turn score (and the audio model's, at
the same pause, when it is on: either may come first), the first clause drafted,
that clause synthesised, the end of turn decided, the final transcript, the reply
started, its first audio. A stage that did not happen for a turn (no speculation, a
miss) is None. Pure: used by ``bench/bench_loop.py`` and the tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from assistant.loop import event_log as log

__all__ = ["Waterfall", "STAGES", "waterfalls"]


@dataclass(frozen=True)
class Waterfall:
    """One answered turn (times in ms after the end of the user's speech)."""

    turn_id: int
    speculation: str
    pause_detected: int | None = None
    speculation_started: int | None = None
    end_of_turn_score: int | None = None
    audio_end_score: int | None = None
    first_clause_drafted: int | None = None
    first_clause_synthesised: int | None = None
    endpoint_decided: int | None = None
    final_transcript: int | None = None
    reply_started: int | None = None
    first_audio: int | None = None


STAGES: tuple[str, ...] = tuple(f.name for f in fields(Waterfall))[2:]
"""The stage names, in waterfall order."""


def waterfalls(entries: Iterable[log.Entry]) -> list[Waterfall]:
    """Every turn that got a reply, with the stages of the user turn it answered."""
    out: list[Waterfall] = []
    stage: dict[str, int] = {}
    spec: dict[int, dict[str, int]] = {}  # spec_id -> its own stages
    end: int | None = None
    turn: tuple[int, str, int] | None = None  # turn_id, speculation, its speech end

    def first(name: str, t: int, into: dict[str, int]) -> None:
        into.setdefault(name, t)

    for e in entries:
        if isinstance(e, log.PauseEntry):
            if "endpoint_decided" not in stage:  # the last pause before the end of turn
                stage["pause_detected"] = e.t_ms
                stage.pop("audio_end_score", None)  # an earlier pause's
        elif isinstance(e, log.AudioEndScoreEntry):
            if "endpoint_decided" not in stage and "pause_detected" in stage:
                stage.setdefault("audio_end_score", e.t_ms)
        elif isinstance(e, log.SpeculationStartedEntry):
            spec[e.spec_id] = {"speculation_started": e.t_ms}
        elif isinstance(e, log.EndOfTurnScoreEntry) and e.spec_id in spec:
            first("end_of_turn_score", e.t_ms, spec[e.spec_id])
        elif isinstance(e, log.SpeculationDraftedEntry) and e.spec_id in spec:
            first("first_clause_drafted", e.t_ms, spec[e.spec_id])
        elif isinstance(e, log.PresynthesizedEntry) and e.spec_id in spec:
            first("first_clause_synthesised", e.t_ms, spec[e.spec_id])
        elif isinstance(e, log.SpeechStoppedEntry) and not e.discarded:
            end = e.speech_end_ms
            stage["endpoint_decided"] = e.t_ms
        elif isinstance(e, log.TranscriptFinalEntry):
            first("final_transcript", e.t_ms, stage)
        elif isinstance(e, log.SpeculationHitEntry):
            stage.update(spec.get(e.spec_id, {}))
        elif isinstance(e, log.ResponseStartedEntry):
            stage["reply_started"] = e.t_ms
            turn = (e.turn_id, e.speculation, end if end is not None else e.t_ms)
        elif isinstance(e, log.AudioStartedEntry) and turn is not None \
                and e.turn_id == turn[0]:
            stage["first_audio"] = e.t_ms
            turn_id, speculation, speech_end = turn
            out.append(Waterfall(turn_id, speculation,
                                 **{k: v - speech_end for k, v in stage.items()}))
            stage, spec, end, turn = {}, {}, None, None
    return out
