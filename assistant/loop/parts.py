"""What a handler of the loop's events may touch: the parts of one pipeline.

The turn manager, the utterance tracker (ASR), the playback controller (sink), the
dialogue client (engine thread), the TTS and tool workers, the event log, and the few
facts that outlive one event (speculated texts, per-response token limits, a turn's tool
results or given text, the last end of turn). The router's tables
(:mod:`assistant.loop.router`) dispatch to functions over these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from assistant.loop import event_log as log
from assistant.loop.engine_client import DialogueClient
from assistant.loop.output import ConversationEvent
from assistant.loop.playback import PlaybackController
from assistant.loop.tool_worker import ToolWorker
from assistant.loop.tts_worker import TtsWorker
from assistant.loop.types import PipelineOptions
from assistant.loop.utterances import UtteranceTracker
from assistant.turns.actions import TurnAction
from assistant.turns.events import EndOfTurn, TurnInput
from assistant.turns.turn_manager import TurnManager

__all__ = ["LoopParts"]


@dataclass
class LoopParts:
    """The parts of one pipeline, as its handlers see them (see the module docstring)."""

    tm: TurnManager
    utterances: UtteranceTracker
    playback: PlaybackController
    dialogue: DialogueClient
    tts: TtsWorker
    tools: ToolWorker
    options: PipelineOptions
    emit: Callable[[log.Entry], None]
    publish: Callable[[ConversationEvent], None]
    """A public event that is not a log entry's (`assistant.loop.output`)."""
    now_ms: Callable[[], int]
    turn_input: Callable[[TurnInput], list[TurnAction]]
    """Feed the turn manager (and carry out its actions); returns them."""
    fail: Callable[[BaseException], None]
    """The conversation cannot go on: raise this at the next frame."""
    asr_tail_ms: Callable[[], int]
    """Silence after the speech that preview and final decodes include."""
    set_pause_limit: Callable[[int], None]
    """End the user's turn after this much silence in the current pause (the VAD)."""
    hears_speaker: Callable[[], bool]
    """The speaker's echo was found in the microphone (the echo processor's
    ``echo_heard``): words heard over the reply may be its own voice."""
    spec_texts: dict[int, str] = field(default_factory=dict)
    response_tokens: dict[int, int] = field(default_factory=dict)
    """Per-response ``max_new_tokens`` by turn id (that response only)."""
    tool_results: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """By turn id: the turn is these tool results ``(name, output)``, not user words."""
    open_turns: set[int] = field(default_factory=set)
    """Replies started and not closed (or withdrawn) yet on the engine thread."""
    said: dict[int, str] = field(default_factory=dict)
    """By turn id: the reply is this given text (a filler, a timer), not generated."""

    def forget(self, turn_id: int) -> None:
        """Drop what was prepared for a turn that did not start."""
        self.response_tokens.pop(turn_id, None)
        self.tool_results.pop(turn_id, None)
        self.said.pop(turn_id, None)
    last_end: EndOfTurn | None = None
