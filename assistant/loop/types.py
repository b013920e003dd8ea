"""Options, result and error of :class:`assistant.loop.pipeline.Pipeline`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from assistant.loop import event_log as log
from assistant.loop.metrics import Metrics

__all__ = ["PipelineError", "PipelineOptions", "PipelineResult", "EntryCallback"]

EntryCallback = Callable[[log.Entry], None]
"""Called with every event-log entry as it happens (display, live logs)."""


class PipelineError(RuntimeError):
    """A worker failed; the conversation cannot go on."""


@dataclass(frozen=True)
class PipelineOptions:
    asr_tail_ms: int = 200
    """At most this much audio after the end of speech is included in preview and final
    decodes (no more than a pause has when its preview decodes: see
    :func:`assistant.loop.utterances.decode_tail_ms`)."""
    quiet_hold_ms: int = 40
    """Hold display partials after this much unvoiced input in an open utterance (0: only
    at the short pause), so the pause-time preview decode does not queue behind one."""
    listening_partials: bool = True
    """Display partials (the open utterance re-decoded every
    ``asr.partial_interval_ms``) for speech that starts while the assistant listens: they
    show the user's words and compute them into the cache as they come. False: only
    speech over a reply gets them (its words tell an interruption from a backchannel);
    the user's own turn is decoded at its pauses and its end and no more -- where many
    conversations share the cores (the daemon, which shows no partials), the re-decodes
    cost the other conversations' turns more than the early cache saves."""
    presynthesize: bool = True
    """Synthesise a speculation's first clause ahead (never played unless adopted)."""
    first_clause_priority: bool = True
    """The engine's steps wait while a reply's first clause is synthesised, where the
    engine host has a gate (a CPU engine: :mod:`assistant.llm.step_gate`)."""
    pause_priority: bool = False
    """While a reply is paused by speech over it (tentative interruptions), the engine's
    steps wait too (TTS is held anyway), where the engine host has a gate: the speech's
    transcript decides the cut and gets the cores. For a conversation that has the engine
    to itself (`assistant.loop.setup.conversation_settings` takes ``turns.pause_priority``); off
    where one engine serves several (the daemon): one pause would slow the others."""
    virtual: bool = False
    """Settle every worker after each frame (deterministic replay on a virtual clock)."""
    max_tail_ms: int = 30_000
    """After the input ends, keep time running at most this long for the reply."""
    output_gain_db: float = 0.0
    """Speaker level applied to the TTS audio (also what the echo handling compares)."""


@dataclass
class PipelineResult:
    conversation: list[dict[str, Any]]
    metrics: Metrics
    entries: list[log.Entry]
