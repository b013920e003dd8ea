"""Re-truncating an assistant turn that is already closed.

A Realtime client's ``conversation.item.truncate`` can arrive after the reply was
closed (the loop's own barge-in cut assumed real-time playback, or the reply played to
its end on the server while the client buffered it). `recut_last_reply` shortens the
closed turn in the history and the backend's sequence (a suffix truncation) to the
generated ids whose text ends with the last heard word, exactly as a barge-in does
(``ReplyTokens.cut_at`` over the ids that were generated, never a re-tokenisation of
the text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from assistant.dialogue.reply import ReplyTokens

if TYPE_CHECKING:
    from assistant.dialogue.dialogue import Dialogue

__all__ = ["Recut", "recut_last_reply"]


@dataclass(frozen=True)
class Recut:
    kept_tokens: int
    text: str
    changed: bool
    """False when the turn already held no more than what was heard."""


def _reply_tokens(tokenizer: Any, context: tuple[int, ...], ids: tuple[int, ...]) -> ReplyTokens:
    from engine.detokenize import IncrementalDetokenizer

    detok = IncrementalDetokenizer(tokenizer, context[-8:])
    reply = ReplyTokens()
    for token in ids:
        reply.add(token, detok.push(token))
    reply.add_text(detok.flush())
    return reply


def recut_last_reply(dialogue: Dialogue, turn_id: int, heard_words: int,
                     spoken_ms: int) -> Recut | None:
    """Cut the closed assistant turn ``turn_id`` to the tokens of its first
    ``heard_words`` words. Only the last turn of the conversation can be cut (a suffix
    truncation); returns None when it is not (or a turn is open).
    Call on the engine thread (e.g. ``DialogueClient.query``)."""
    from audio.word_timing import split_words

    conv = dialogue.conversation
    last = conv.last
    if last is None or last.role != "assistant" or last.turn_id != turn_id:
        return None
    if not dialogue.in_sync():
        return None
    history = conv.messages()[:-1]
    header = tuple(conv.renderer.generation_prompt_ids(history))
    closing = conv.closing_ids(interrupted=last.interrupted)
    ids = last.token_ids
    if ids[: len(header)] != header or (closing and ids[len(ids) - len(closing):] != closing):
        return None  # not shaped as a generated reply (e.g. a text item)
    kept = ids[len(header): len(ids) - len(closing)]
    prefix_len = conv.num_tokens - len(ids)
    context = conv.token_ids[:prefix_len] + header
    reply = _reply_tokens(dialogue.backend.tokenizer, context, kept)
    words = split_words(reply.text)
    if heard_words >= len(words):
        return Recut(len(kept), last.text, changed=False)
    cut = reply.cut_at(words[heard_words - 1].char_end if heard_words > 0 else 0)
    if cut.n_tokens >= len(kept):
        return Recut(len(kept), last.text, changed=False)
    seq = dialogue.sequence
    seq.truncate(prefix_len + len(header) + cut.n_tokens)
    conv.pop()
    conv.add_assistant(cut.text.strip(), header, kept[: cut.n_tokens],
                       generated_tokens=last.generated_tokens or len(kept), interrupted=True,
                       spoken_ms=spoken_ms, turn_id=turn_id)
    seq.extend(conv.closing_ids(interrupted=True))
    if seq.tokens != conv.token_ids:
        raise RuntimeError("sequence and history differ after re-truncating a reply")
    return Recut(cut.n_tokens, conv.last.text if conv.last else "", changed=True)
