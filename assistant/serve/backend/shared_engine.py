"""One engine, many conversations: serialised access and the after-close truncation.

The engine is not thread-safe (one worker thread, see :mod:`engine.engine`), but every
daemon session runs the live loop's own engine worker thread over its own
:class:`~assistant.dialogue.dialogue.Dialogue`. `EngineGate` is the one lock all of them take
(FIFO, so no session's turn start waits behind another's stream of decode steps), and
`GatedDialogue` is the dialogue a session's pipeline sees: each call runs under the gate.
Every ``Dialogue.step()`` is one scheduler step of the *shared* engine, i.e. one batched
decode of every session's active generation; a session's outputs stay in its jobs until
its own worker collects them.

`recut_last_reply` re-truncates an assistant turn that is already closed (the client's
``conversation.item.truncate`` arrived after the pipeline's own barge-in cut, which
assumed real-time playback): it keeps the generated ids whose text ends with the last
heard word, exactly as a barge-in does (``ReplyTokens.cut_at`` over the ids that were
generated, never a re-tokenisation of the text).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from assistant.dialogue.dialogue import ReplyDelta
from assistant.dialogue.reply import ReplyTokens

if TYPE_CHECKING:
    from assistant.dialogue.dialogue import Dialogue

__all__ = ["EngineGate", "GatedDialogue", "Recut", "recut_last_reply"]


class EngineGate:
    """A FIFO (ticket) lock: waiters enter in arrival order. Not reentrant."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next = 0
        self._serving = 0

    def __enter__(self) -> EngineGate:
        with self._cond:
            ticket = self._next
            self._next += 1
            while ticket != self._serving:
                self._cond.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()

    def run(self, fn: Callable[[], Any]) -> Any:
        with self:
            return fn()

    def try_run(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` only if nobody holds or waits for the gate; else return None."""
        with self._cond:
            if self._next != self._serving:
                return None
            self._next += 1
        try:
            return fn()
        finally:
            self.__exit__()


class GatedDialogue:
    """Proxy of a `Dialogue` whose method calls run under the engine gate.

    ``has_work`` also stays true while this dialogue's reply has not reported its end:
    another session's worker may have run the step that finished it, and this session's
    worker must still collect the final events (the local loop never meets this case,
    its one worker both steps and collects).
    """

    _ENDS_REPLY = frozenset({"cut_turn", "finish_turn", "withdraw_turn", "close"})

    def __init__(self, dialogue: Dialogue, gate: EngineGate) -> None:
        self._dialogue = dialogue
        self._gate = gate
        self._awaiting_end = False

    @property
    def inner(self) -> Dialogue:
        return self._dialogue

    def has_work(self) -> bool:
        with self._gate:
            return self._awaiting_end or self._dialogue.has_work()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._dialogue, name)
        if not callable(attr):
            return attr
        gate = self._gate

        def gated(*args: Any, **kwargs: Any) -> Any:
            with gate:
                try:
                    result = attr(*args, **kwargs)
                except BaseException:
                    self._awaiting_end = False
                    raise
                self._track(name, result)
                return result

        return gated

    def _track(self, name: str, result: Any) -> None:
        if name == "start_turn":
            self._awaiting_end = True
            return
        ended = name == "step" and any(isinstance(o, ReplyDelta) and o.done for o in result)
        if ended or name in self._ENDS_REPLY:
            self._awaiting_end = False


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
    Call on the engine thread, under the gate."""
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
    reply = _reply_tokens(dialogue.engine.tokenizer, context, kept)
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
