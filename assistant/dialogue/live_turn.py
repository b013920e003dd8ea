"""The open turn of a dialogue: its reply as it streams, how it stops, how it closes.

From the turn's start to its close the reply is one job on the live sequence (or a
draft adopted whole). Its events become reply text (:class:`ReplyDelta`); it stops when
the model ends it, when it keeps repeating itself (:mod:`~.loop_guard`) or when it is
cancelled; and it closes with what was *heard*: the sequence is cut to the kept reply
ids, then the turn is closed with the template's end-of-turn ids (never generated into
the sequence, see :func:`reply_params`: they are added here, after playback), and the
history records exactly the kept ids' text. The dialogue (:mod:`~.dialogue`) owns the
sequence and the history and hands them in; written against the LLM backend protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from assistant.dialogue.loop_guard import LoopGuardOptions, repeated_tail
from assistant.dialogue.reply import ReplyTokens
from assistant.dialogue.speculation import apply_event, sync_reply
from assistant.dialogue.types import CallMade, DialogueOptions, ReplyDelta, TurnClosed
from assistant.tools.calls import ToolCallDetector, Verdict, call_json_start, parse_tool_calls
from assistant.tools.errors import ToolCallParseError
from engine.events import FinishReason
from engine.params import Priority, SamplingParams

if TYPE_CHECKING:
    from assistant.dialogue.conversation import Conversation, TurnRenderer
    from assistant.llm.protocol import LLMBackend, LLMJob, LLMSequence

__all__ = ["LiveTurn", "reply_params"]

_log = logging.getLogger(__name__)


@dataclass
class LiveTurn:
    """The turn whose user message is in the sequence and whose reply is not closed."""

    turn_id: int
    user_text: str
    header_ids: tuple[int, ...]
    reply_start: int
    """Sequence position of the first generated token."""
    reply: ReplyTokens = field(default_factory=ReplyTokens)
    drafted: int = 0
    """Leading reply tokens taken from an adopted speculation."""
    job: LLMJob | None = None
    finished: bool = False
    """No more reply text will come."""
    finish_reason: str | None = None
    calls: ToolCallDetector | None = None
    """With tools: keeps a call's text out of the deltas (they are what is spoken)."""
    said: bool = False
    """A given text, not generated (:mod:`~.said`): no user message before it."""
    call_schema: str | None = None
    """A free reply with tools: once it opens a call, the call is decoded under this
    JSON schema (:meth:`_constrain_call`), so its arguments are valid by construction."""
    _restart: tuple[LLMSequence, Callable[[int, str | None], SamplingParams], int, int | None] \
        | None = None

    @property
    def calling(self) -> bool:
        """The reply has begun a tool call."""
        return self.calls is not None and self.calls.verdict is Verdict.TOOL_CALL

    @property
    def running(self) -> bool:
        """Its job is still generating."""
        return self.job is not None and not self.job.done

    def open_with_draft(self, whole: bool) -> ReplyDelta | None:
        """The reply a speculation drafted, as the turn's first delta (None if none);
        ``whole``: the draft was the whole reply, so no job follows. Its end-of-turn
        ids are computed when the turn is closed (after playback), not before the
        first audio."""
        if whole:
            self.finished = True
            self.finish_reason = "eos"
        if not len(self.reply):
            return None
        return ReplyDelta(self.turn_id, self._speech(self.reply.text, whole), len(self.reply),
                          done=whole, finish_reason=self.finish_reason)

    def generate(self, backend: LLMBackend, seq: LLMSequence,
                 params: Callable[[int, str | None], SamplingParams], *, limit: int,
                 room: int | None, json_schema: str | None = None) -> None:
        """Start the job generating the rest of the reply: at most ``limit`` tokens in
        all (a draft's included) and ``room`` more (the context's), at least one;
        ``params(max_new_tokens, json_schema)``."""
        end = None if room is None else len(seq) + room
        self._restart = (seq, params, limit, end)
        self._enqueue(backend, json_schema)

    def _enqueue(self, backend: LLMBackend, json_schema: str | None) -> None:
        assert self._restart is not None
        seq, params, limit, end = self._restart
        remaining = max(1, limit - len(self.reply))
        if end is not None:
            remaining = max(1, min(remaining, end - len(seq)))
        self.job = backend.enqueue(seq, params(remaining, json_schema), priority=Priority.LIVE)

    def _constrain_call(self, backend: LLMBackend) -> None:
        """The free reply just opened a call: regenerate the call from where its JSON
        starts, under the call schema (the marker before it stays as generated)."""
        assert self.job is not None and self._restart is not None and self.call_schema
        start = call_json_start(self.reply.text)
        backend.cancel(self.job)
        self.job.take_events()
        keep = self.reply.cut_at(start).n_tokens
        self.reply.truncate(keep)
        self.drafted = keep  # the ids before the job's (see sync_reply)
        seq = self._restart[0]
        have = len(seq) - self.reply_start  # the last sampled id may not be in it yet
        if have > keep:
            seq.truncate(self.reply_start + keep)
        elif have < keep:
            seq.extend(self.reply.ids[have:keep])
        schema, self.call_schema = self.call_schema, None
        try:
            self._enqueue(backend, schema)
        except ValueError as exc:  # the backend cannot decode under a schema
            _log.warning("turn %d: the call is decoded unconstrained: %s", self.turn_id, exc)
            self._enqueue(backend, None)

    def collect(self, backend: LLMBackend, guard: LoopGuardOptions) -> ReplyDelta | None:
        """The reply text the job produced since the last call, and whether it is done
        (None when there is neither); a reply that loops is stopped here."""
        if self.job is None:
            return None
        events = self.job.take_events()
        text = "".join(apply_event(self.reply, ev) for ev in events)
        done = any(ev.finished for ev in events)
        if done:
            self._on_finished()
        elif events and self._stop_if_looping(backend, guard):
            done = True
        if not (text or done):
            return None
        speech = self._speech(text, done)
        if not done and self.call_schema and self.calling:
            self._constrain_call(backend)
        return ReplyDelta(self.turn_id, speech, len(self.reply), done=done,
                          finish_reason=self.finish_reason)

    def _speech(self, text: str, done: bool) -> str:
        """What of the reply's new ``text`` is spoken (all of it, without tools)."""
        if self.calls is None:
            return text
        speech = self.calls.feed(text).speech
        return speech + self.calls.finish().speech if done else speech

    def cancel(self, backend: LLMBackend) -> None:
        """Stop the job if it runs; the reply keeps what it has."""
        job = self.job
        if job is not None and not job.done:
            backend.cancel(job)
            job.take_events()
            self.finished = True
            self.finish_reason = "cancelled"

    def heard_tokens(self, heard_chars: int) -> int:
        """Leading generated tokens whose text ends within the first ``heard_chars`` of
        the reply (trailing whitespace was not "heard": never a token that is only that)."""
        heard_chars = len(self.reply.text[:max(0, heard_chars)].rstrip())
        return self.reply.cut_at(heard_chars).n_tokens

    def close(self, seq: LLMSequence, conversation: Conversation, n_keep: int,
              spoken_ms: int, *, interrupted: bool) -> TurnClosed:
        """Keep the first ``n_keep`` generated ids (at most those generated and in
        ``seq``): cut ``seq`` there, append the closing ids and record the turn in
        ``conversation``."""
        generated = len(self.reply)
        available = len(seq) - self.reply_start
        n_keep = max(0, min(n_keep, available, generated))
        kept_ids = self.reply.ids[:n_keep]
        seq.truncate(self.reply_start + n_keep)
        seq.extend(conversation.closing_ids(interrupted=interrupted))
        text = self.reply.text_of(n_keep)  # exactly the kept ids' text
        turn = conversation.add_assistant(
            text, self.header_ids, kept_ids, generated_tokens=generated,
            interrupted=interrupted, spoken_ms=spoken_ms, turn_id=self.turn_id)
        calls, error = self._calls_in(text)
        return TurnClosed(self.turn_id, turn, n_keep, generated, self.reply.text, len(seq),
                          tool_calls=calls, tool_error=error)

    def _calls_in(self, text: str) -> tuple[tuple[CallMade, ...], str | None]:
        """The calls the kept reply ``text`` makes (tools enabled)."""
        if self.calls is None:
            return (), None
        try:
            parsed = parse_tool_calls(text)
        except ToolCallParseError as exc:
            _log.warning("turn %d: a tool call that cannot be read: %s", self.turn_id, exc)
            return (), str(exc)
        return tuple(CallMade(f"call_{self.turn_id}_{i}", c.name, c.arguments_json)
                     for i, c in enumerate(parsed.calls)), None

    def _on_finished(self) -> None:
        assert self.job is not None and self.job.result is not None
        result = self.job.result
        self.finished = True
        self.finish_reason = result.finish_reason.value
        if result.finish_reason is not FinishReason.CANCELLED:
            sync_reply(self.reply, self.job, self.drafted)

    def _stop_if_looping(self, backend: LLMBackend, guard: LoopGuardOptions) -> bool:
        """Stop a reply that keeps repeating itself (see :mod:`~.loop_guard`)."""
        rep = repeated_tail(self.reply.ids, guard)
        if rep is None:
            return False
        _log.warning("turn %d repeats %d tokens %d times: reply stopped", self.turn_id,
                     len(rep.ngram), rep.repeats)
        self.cancel(backend)
        self.finish_reason = "repetition"
        return True


def reply_params(options: DialogueOptions, renderer: TurnRenderer, *,
                 speculative: bool = False, max_new_tokens: int | None = None,
                 json_schema: str | None = None) -> SamplingParams:
    """How a reply is sampled under ``options``: a live one (``max_new_tokens``
    overriding the option), or a speculative draft."""
    o = options
    stop_ids = tuple(getattr(renderer, "stop_token_ids", ()) or ())
    return SamplingParams(
        max_new_tokens=(o.speculation_max_tokens if speculative
                        else max_new_tokens or o.max_new_tokens),
        temperature=o.temperature, top_p=o.top_p, top_k=o.top_k, seed=o.seed, stop=o.stop,
        stop_token_ids=stop_ids, repetition_penalty=o.repetition_penalty,
        repetition_window=o.repetition_window, json_schema=json_schema,
        # A draft leaves its turn open: the live reply may continue it. A live reply
        # too: its end-of-turn ids are added when the turn is closed (after playback),
        # so the step that samples the stop token does not also prefill them -- that
        # step's text is often what the first audio waits for.
        end_of_turn=())
