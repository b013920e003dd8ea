"""A reply whose words are given, not generated: the assistant says a fixed text.

Used for what the loop itself has to say -- the short filler while a slow tool runs
("One moment."), a timer's announcement -- so that it is spoken, cut by a barge-in and
kept in the history (and the cache) exactly like a generated reply: the turn is the
reply header and the text's ids, with no user message before it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from assistant.dialogue.live_turn import LiveTurn
from assistant.dialogue.reply import ReplyTokens
from assistant.dialogue.types import ReplyDelta, TurnStart

if TYPE_CHECKING:
    from assistant.dialogue.conversation import Conversation
    from assistant.llm.protocol import LLMSequence

__all__ = ["open_said_turn"]


def open_said_turn(seq: LLMSequence, conversation: Conversation, tokenizer: Any,
                   turn_id: int, text: str) -> tuple[LiveTurn, TurnStart, ReplyDelta]:
    """Put the reply header and ``text``'s ids into ``seq`` (computing them) and open the
    turn, finished: its one delta is the whole text."""
    from engine.detokenize import IncrementalDetokenizer

    header = tuple(conversation.renderer.generation_prompt_ids(conversation.messages()))
    ids = list(conversation.renderer.encode(text))
    reply = ReplyTokens()
    detok = IncrementalDetokenizer(tokenizer, (*seq.tokens[-8:], *header))
    for token in ids:
        reply.add(token, detok.push(token))
    reply.add_text(detok.flush())
    base = len(seq)
    stats = seq.extend(header + tuple(ids))
    live = LiveTurn(turn_id=turn_id, user_text="", header_ids=header,
                    reply_start=base + len(header), reply=reply, finished=True,
                    finish_reason="eos", said=True)
    start = TurnStart(turn_id=turn_id, user_text="", prompt_tokens=len(header),
                      prompt_tokens_computed=stats.computed,
                      prompt_tokens_reused=base + stats.reused, speculation="none",
                      spec_id=None, spec_text="", common_prefix_tokens=0, drafted_tokens=0)
    return live, start, ReplyDelta(turn_id, reply.text, len(reply), done=True,
                                   finish_reason="eos")
