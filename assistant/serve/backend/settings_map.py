"""Realtime session settings mapped onto the loop's own options.

The protocol's ``session`` (instructions, token limit, temperature, server-VAD knobs,
``interrupt_response``) becomes the dialogue's, the turn manager's and the VAD's
options on top of the daemon's configured defaults. Pure functions.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from assistant.serve.backend import contract as B

if TYPE_CHECKING:
    from assistant.dialogue.types import DialogueOptions
    from assistant.turns.turn_manager import TurnOptions

__all__ = ["vad_options", "dialogue_options", "turn_options"]


def vad_options(base: Any, td: B.TurnDetectionSettings) -> Any:
    """Realtime server-VAD knobs on top of the configured VAD."""
    short = min(base.short_pause_ms, max(20, td.silence_duration_ms - 20))
    return dataclasses.replace(
        base,
        aggressiveness=min(3, max(0, round(td.threshold * 4))),
        silero_threshold=min(0.99, max(0.01, td.threshold)),
        prefix_padding_ms=td.prefix_padding_ms,
        end_of_turn_ms=max(td.silence_duration_ms, short),
        short_pause_ms=short,
    )


def dialogue_options(base: DialogueOptions, settings: B.SessionSettings) -> DialogueOptions:
    """The configured generation options with the session's overrides."""
    return dataclasses.replace(
        base, system_prompt=settings.instructions,
        max_new_tokens=settings.max_output_tokens or base.max_new_tokens,
        temperature=base.temperature if settings.temperature is None else settings.temperature)


def turn_options(base: TurnOptions, settings: B.SessionSettings) -> TurnOptions:
    """``interrupt_response: false`` means speech never interrupts a reply."""
    td = settings.turn_detection or B.TurnDetectionSettings()
    if td.interrupt_response:
        return base
    return dataclasses.replace(base, barge_in_min_ms=10**9)
