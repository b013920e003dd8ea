"""Putting the user's prompt into the live sequence at a turn start, adopting the
turn's speculation when there is one.

A hit whose fork already holds the whole prompt is taken as is (nothing computed; its
drafted reply tokens become the reply's start); a miss, or a hit whose prompt was not
all in yet, keeps the ids the fork shares with the prompt and computes the rest; with
no speculation the prompt is simply extended. Against the LLM backend protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from assistant.dialogue.reply import ReplyTokens
from assistant.dialogue.speculation import resolve
from assistant.dialogue.types import TurnStart
from engine.events import FinishReason
from engine.params import Priority

if TYPE_CHECKING:
    from assistant.dialogue.speculation import Speculation
    from assistant.llm.protocol import LLMSequence

__all__ = ["PromptIn", "put_prompt"]


@dataclass
class PromptIn:
    seq: LLMSequence
    """The live sequence now (the speculation's fork when one was adopted)."""
    computed: int
    reused: int
    """Prompt positions, history included, whose K/V was already cached."""
    outcome: str = "none"
    """hit | miss | none."""
    common: int = 0
    drafted: int = 0
    reply: ReplyTokens = field(default_factory=ReplyTokens)
    pending_done: bool = False
    """The adopted draft was the whole reply (it ended with the end of turn)."""

    def turn_start(self, turn_id: int, user_text: str, prompt_tokens: int,
                   spec: Speculation | None) -> TurnStart:
        """What the turn's start reports."""
        return TurnStart(
            turn_id=turn_id, user_text=user_text, prompt_tokens=prompt_tokens,
            prompt_tokens_computed=self.computed, prompt_tokens_reused=self.reused,
            speculation=self.outcome, spec_id=spec.spec_id if spec else None,
            spec_text=spec.user_text if spec else "", common_prefix_tokens=self.common,
            drafted_tokens=self.drafted)


def put_prompt(seq: LLMSequence, prompt: Sequence[int], spec: Speculation | None) -> PromptIn:
    """``prompt`` after ``seq``'s history; ``seq`` is released if the fork replaces it."""
    base = len(seq)
    if spec is None:
        stats = seq.extend(prompt)
        return PromptIn(seq, stats.computed, base + stats.reused)
    res = resolve(spec.prompt_ids, prompt)
    seq.release()
    fork = spec.seq
    fork.priority = Priority.LIVE
    have = len(fork) - base  # what the fork holds past the history
    if res.hit and have >= len(prompt):
        drafted = spec.kept_tokens()
        spec.reply.truncate(drafted)
        # A draft stopped at its first clause may hold ids its reply never took: ids that
        # came in the same backend step after the clause's end (a vLLM stream batches).
        fork.truncate(spec.reply_start + drafted)
        return PromptIn(fork, 0, base + len(prompt), "hit", res.common_prefix_tokens, drafted,
                        spec.reply, spec.finish_reason is FinishReason.EOS)
    keep = min(res.common_prefix_tokens, have)
    fork.truncate(base + keep)
    stats = fork.extend(prompt[keep:])
    return PromptIn(fork, stats.computed, base + keep + stats.reused,
                    "hit" if res.hit else "miss", res.common_prefix_tokens)
