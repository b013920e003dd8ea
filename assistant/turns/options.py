"""The turn-taking rules a :class:`~assistant.turns.turn_manager.TurnManager` follows
(mapped from the ``turns`` config section; a client's ``session.update`` may change them
mid-session: :class:`~assistant.turns.events.TurnRulesChanged`)."""

from __future__ import annotations

from dataclasses import dataclass

from assistant.turns.end_of_turn import EndOfTurnOptions
from assistant.turns.interruption import InterruptionOptions

__all__ = ["TurnOptions"]


@dataclass(frozen=True)
class TurnOptions:
    """Turn-taking knobs (mapped from the ``turns`` config section)."""

    barge_in_min_ms: int = 200
    """Voiced user speech needed, while the assistant holds the floor, to interrupt it."""
    speculate: bool = True
    """Start speculative replies at short pauses."""
    pause_at_onset: bool = True
    """Tentative: speech that cannot be the reply's echo (``SpeechStarted.echo_free``)
    pauses the reply at its onset, not after ``barge_in_min_ms``."""
    end_of_turn: EndOfTurnOptions = EndOfTurnOptions(mode="fixed")
    """When silence ends the user's turn (fixed, or semantic: scored by the model)."""
    interruption: InterruptionOptions = InterruptionOptions(mode="immediate")
    """Whether speech over the reply cuts it at once or pauses it until it is known."""
