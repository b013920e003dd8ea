"""Values exchanged with :class:`assistant.dialogue.dialogue.Dialogue`: its options, what a turn
start reports, and the outputs of its steps (all frozen)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from assistant.dialogue.conversation import Turn
from assistant.dialogue.loop_guard import LoopGuardOptions
from assistant.speech.voice import DEFAULT_CLAUSES, ClauseRule

__all__ = [
    "DialogueError",
    "DialogueOptions",
    "TurnStart",
    "ReplyDelta",
    "SpeculationDrafted",
    "TurnClosed",
    "CallMade",
    "PromptWarmed",
    "DialogueOutput",
]


class DialogueError(RuntimeError):
    """A dialogue operation out of order (a bug in the caller, never user input)."""


@dataclass(frozen=True)
class DialogueOptions:
    """Generation settings (mapped from the ``llm`` and ``turns`` config sections)."""

    system_prompt: str = ""
    max_new_tokens: int = 96
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    stop: tuple[str, ...] = ()
    repetition_penalty: float = 1.0
    repetition_window: int = 64
    speculation_max_tokens: int = 24
    """Cap on a speculative draft (it normally stops at its first clause)."""
    clauses: ClauseRule = DEFAULT_CLAUSES
    """Same clause rule as TTS, so a drafted clause is the reply's first TTS chunk."""
    interrupted_marker: bool = False
    loop_guard: LoopGuardOptions = LoopGuardOptions()
    """Stop a reply that repeats one n-gram over and over."""
    max_context_tokens: int = 0
    """Keep the model's context under this many tokens (0: the model's own limit)."""
    user_turn_allowance: int = 128
    """Room kept for the next user message when deciding to trim the context."""
    score_end_of_turn: bool = False
    """Each speculation also reports P(the user's sentence ends here)."""
    tools: tuple[Mapping[str, Any], ...] = ()
    """Function tools the model may call, OpenAI chat style (``{"type": "function",
    "function": {"name", "description", "parameters"}}``); see
    :mod:`assistant.dialogue.tool_prompt`. A reply that calls one is not spoken."""
    tool_choice: str = "auto"
    """``auto``, ``none``, ``required`` or a tool's name."""


@dataclass(frozen=True)
class TurnStart:
    """A user turn was committed and its reply started."""

    turn_id: int
    user_text: str
    prompt_tokens: int
    """Ids the turn added before the reply (user message + reply header)."""
    prompt_tokens_computed: int
    """Of those, run through the model now (0 on a speculation hit)."""
    prompt_tokens_reused: int
    """Prompt positions (history included) whose K/V was already in the cache."""
    speculation: str
    """hit | miss | none."""
    spec_id: int | None
    spec_text: str
    common_prefix_tokens: int
    """On a miss: user-turn ids shared with the speculation."""
    drafted_tokens: int
    """On a hit: reply tokens the speculation had already generated."""


@dataclass(frozen=True)
class ReplyDelta:
    """New reply text of turn ``turn_id``."""

    turn_id: int
    text: str
    tokens: int
    """Reply tokens generated so far (including the ones carrying this text)."""
    done: bool
    """The reply is complete (no more deltas for this turn)."""
    finish_reason: str | None = None


@dataclass(frozen=True)
class SpeculationDrafted:
    """Speculation ``spec_id`` has its first clause (the pipeline may pre-synthesise it)."""

    spec_id: int
    text: str
    """The drafted clause, as the reply's TTS chunker will cut it."""


@dataclass(frozen=True)
class EndOfTurnScore:
    """P(the user's sentence ends here) for speculation ``spec_id``'s text, read from
    the model on the speculation's fork (see :mod:`assistant.turns.end_of_turn`)."""

    spec_id: int
    p_end: float


@dataclass(frozen=True)
class PromptWarmed:
    """The user's words so far were computed into the cache while they spoke (see
    :meth:`~assistant.dialogue.dialogue.Dialogue.warm`)."""

    text: str
    tokens: int
    """Ids of the open user message so far."""
    tokens_computed: int
    """Of those, the ids run through the model (the rest were cached already: depends on
    what the engine's cache holds, so it is not in the event log, which must replay
    the same)."""


@dataclass(frozen=True)
class TurnClosed:
    """A turn's reply was closed in the history and the engine."""

    turn_id: int
    turn: Turn
    kept_tokens: int
    generated_tokens: int
    generated_text: str
    sequence_tokens: int
    """Engine sequence length afterwards (equals the history's token count)."""
    tool_calls: tuple[CallMade, ...] = ()
    """The calls the kept reply makes (tools enabled; none once cut before them)."""
    tool_error: str | None = None
    """The kept reply opened a call that could not be read (malformed, cut off)."""


@dataclass(frozen=True)
class CallMade:
    """A tool call a closed reply made."""

    call_id: str
    name: str
    arguments: str
    """The arguments as JSON text."""


DialogueOutput = ReplyDelta | SpeculationDrafted
