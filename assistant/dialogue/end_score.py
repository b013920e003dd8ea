"""What the end-of-turn score is asked on: the user's open message, and the ids that end
a sentence (see :mod:`assistant.turns.end_of_turn` for how the score is used).

P(the user's sentence ends here) is the model's probability, right after the user's
words (their trailing punctuation removed), that the next token is a sentence end --
``.``, ``?``, ``!``, an ellipsis -- or the end of the message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assistant.turns.end_of_turn import scoring_text

if TYPE_CHECKING:
    from assistant.dialogue.conversation import Conversation, TurnRenderer

__all__ = ["open_user_ids", "sentence_end_ids"]

_SENTENCE_ENDS = (".", "?", "!", "...", "\u2026", "?!", "!!", "??")


def open_user_ids(conversation: Conversation, user_text: str) -> tuple[int, ...]:
    """The ids of a user message holding ``user_text`` without its trailing punctuation,
    left open (no end-of-message ids); empty when there are no words or the template's
    user message does not end as its assistant message does."""
    text = scoring_text(user_text)
    if not text:
        return ()
    ids, _header = conversation.user_prompt_ids(text)
    close = tuple(conversation.renderer.end_of_turn_ids)
    if not close or tuple(ids[-len(close):]) != close:
        return ()
    return tuple(ids[:-len(close)])


def sentence_end_ids(renderer: TurnRenderer) -> frozenset[int]:
    """Single-token sentence ends of the tokenizer, plus the end of a message."""
    ends = {ids[0] for ids in (renderer.encode(s) for s in _SENTENCE_ENDS) if len(ids) == 1}
    close = tuple(renderer.end_of_turn_ids)
    if close:
        ends.add(close[0])
    return frozenset(ends)
