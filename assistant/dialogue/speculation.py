"""Speculative pre-generation: a reply's first clause, drafted while the user pauses.

At a short pause inside the user's turn the committed conversation is forked, the fork
is extended with the partial transcript rendered as a user turn, and the first clause
of the reply is generated on it at speculative priority (and may be pre-synthesised,
never played). At the end of the turn the final transcript is rendered the same way:

- same token ids: a *hit*. The fork becomes the live sequence; its prompt is not
  computed again and the clause already generated is the start of the reply.
- different ids: a *miss*. The fork is cut back to the longest common token prefix
  and extended with only the ids that differ, so the shared part is not recomputed.

This module holds the state of one speculation and the pure decisions; the backend
calls are made by :class:`~assistant.dialogue.speculation_pool.SpeculationPool` and
:class:`~assistant.dialogue.dialogue.Dialogue` on the engine thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from assistant.dialogue.reply import ReplyTokens
from assistant.speech.voice import ReplyChunker
from engine.events import FinishReason

if TYPE_CHECKING:
    from assistant.llm.protocol import LLMJob, LLMSequence
    from engine.events import TokenEvent

__all__ = ["Speculation", "Resolution", "resolve", "common_prefix_len", "apply_event",
           "sync_reply"]


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(frozen=True)
class Resolution:
    """What to do with a speculation at the end of the user's turn."""

    hit: bool
    common_prefix_tokens: int
    """Prompt ids shared by the speculated and the final user turn."""


def resolve(spec_prompt: Sequence[int], final_prompt: Sequence[int]) -> Resolution:
    """A hit exactly when the final user turn renders to the speculated ids."""
    common = common_prefix_len(spec_prompt, final_prompt)
    hit = common == len(spec_prompt) == len(final_prompt)
    return Resolution(hit=hit, common_prefix_tokens=common)


@dataclass
class Speculation:
    """One speculative fork and what it generated so far."""

    spec_id: int
    user_text: str
    prompt_ids: tuple[int, ...]
    """The user-turn ids the fork was extended with."""
    seq: LLMSequence
    base_len: int
    """Length of the committed conversation the fork was taken from."""
    job: LLMJob | None = None
    reply: ReplyTokens = field(default_factory=ReplyTokens)
    chunker: ReplyChunker = field(default_factory=ReplyChunker)
    """The live reply's chunking rule (a short first clause), so a pre-synthesised
    first clause is the one the live reply cuts."""
    first_clause: str | None = None
    """Text of the first complete clause, once there is one."""
    finish_reason: FinishReason | None = None
    """Set when the speculative generation ended (a clause done, EOS, length, cancel)."""

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def reply_start(self) -> int:
        """Position of the first generated token in the fork."""
        return self.base_len + len(self.prompt_ids)

    def on_text(self, text_delta: str) -> bool:
        """Feed generated text; True once the first clause is complete."""
        if self.first_clause is None and text_delta:
            clauses = self.chunker.feed(text_delta)
            if clauses:
                self.first_clause = clauses[0].text
        return self.first_clause is not None

    def on_finished(self) -> None:
        """End of generation: a reply shorter than a clause is its own first clause."""
        if self.first_clause is None:
            clauses = self.chunker.flush()
            if clauses:
                self.first_clause = clauses[0].text

    def kept_tokens(self) -> int:
        """Generated tokens whose K/V is in the fork (a pending sampled token is not)."""
        return max(0, min(len(self.reply), len(self.seq) - self.reply_start))


def apply_event(reply: ReplyTokens, ev: TokenEvent) -> str:
    """Add one token event to a reply; returns the text it released."""
    if ev.token_id < 0:  # a cancellation carries no token
        reply.add_text(ev.text_delta)
    elif ev.finished and ev.finish_reason is FinishReason.EOS:
        reply.add_text(ev.text_delta)  # the end-of-turn token itself is not kept
    else:
        reply.add(ev.token_id, ev.text_delta)
    return ev.text_delta


def sync_reply(reply: ReplyTokens, job: LLMJob, offset: int = 0) -> None:
    """Make the reply's ids from ``offset`` on those the job kept (a stop string may
    re-encode the tail); the first ``offset`` tokens came from an adopted draft."""
    result = job.result
    if result is not None and reply.ids[offset:] != result.token_ids:
        reply.reset_to(reply.ids[:offset] + result.token_ids,
                       reply.text_of(offset) + result.text)
