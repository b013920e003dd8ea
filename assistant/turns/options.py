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
    continue_within_ms: int = 500
    """Speech over the reply that began within this long of the reply's first audio (or
    before it) continues the user's turn: it went on after a pause the end of turn took
    for its end, before the reply could be answered. Once it counts, the reply is
    withdrawn (none of it kept) and the words join the user's. 0: such speech is a
    barge-in like any other."""
    pause_at_onset: bool = True
    """Tentative: speech that cannot be the reply's echo (``SpeechStarted.echo_free``)
    pauses the reply at its onset, not after ``barge_in_min_ms``."""
    end_of_turn: EndOfTurnOptions = EndOfTurnOptions(mode="fixed")
    """When silence ends the user's turn (fixed, or semantic: scored by the model)."""
    interruption: InterruptionOptions = InterruptionOptions(mode="immediate")
    """Whether speech over the reply cuts it at once or pauses it until it is known."""

    def __post_init__(self) -> None:
        if self.continue_within_ms < 0:
            raise ValueError("continue_within_ms must be >= 0")
