"""The conversation on the engine: one live sequence that always equals the history.

:class:`Dialogue` owns the engine's live sequence and the :class:`Conversation`, and
keeps them equal token for token between turns: a turn appends the user message and
the reply header (computing only those ids), the reply is generated on the same
sequence, and the turn is closed with what was *heard* -- all of it, or after a
barge-in the generated ids up to the last fully played word, then the end-of-turn ids.
Speculative forks (see :mod:`assistant.dialogue.speculation`) are adopted on a hit.

Not thread-safe: like the engine, call it from one worker thread
(:class:`assistant.loop.workers.EngineWorker`), which also drives :meth:`step`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from assistant.dialogue.conversation import INTERRUPTED_MARKER, Conversation, TurnRenderer
from assistant.dialogue.reply import ReplyTokens
from assistant.dialogue.speculation import Speculation, resolve
from assistant.dialogue.types import (
    DialogueError,
    DialogueOptions,
    DialogueOutput,
    ReplyDelta,
    SpeculationDrafted,
    TurnClosed,
    TurnStart,
)
from engine.events import FinishReason
from engine.params import Priority, SamplingParams

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.events import TokenEvent
    from engine.job import Job
    from engine.sequence import Sequence as EngineSequence

__all__ = [
    "DialogueOptions",
    "TurnStart",
    "ReplyDelta",
    "SpeculationDrafted",
    "TurnClosed",
    "DialogueOutput",
    "Dialogue",
    "DialogueError",
]


@dataclass
class _LiveTurn:
    turn_id: int
    user_text: str
    header_ids: tuple[int, ...]
    reply_start: int
    """Sequence position of the first generated token."""
    reply: ReplyTokens = field(default_factory=ReplyTokens)
    drafted: int = 0
    """Leading reply tokens taken from an adopted speculation."""
    job: Job | None = None
    closed_by_engine: bool = False
    """The generation finished and the engine appended the end-of-turn ids."""
    finished: bool = False
    """No more reply text will come."""
    finish_reason: str | None = None


class Dialogue:
    """See the module docstring."""

    def __init__(self, engine: Engine, renderer: TurnRenderer, options: DialogueOptions) -> None:
        self.engine = engine
        self.options = options
        self.conversation = Conversation(renderer, options.system_prompt,
                                         interrupted_marker=options.interrupted_marker)
        self._seq: EngineSequence = engine.sequence(priority=Priority.LIVE)
        self._seq.extend(self.conversation.token_ids)
        self._specs: dict[int, Speculation] = {}
        self._dropped: set[int] = set()
        self._live: _LiveTurn | None = None
        self._outbox: list[DialogueOutput] = []

    # ------------------------------------------------------------------ queries

    @property
    def sequence(self) -> EngineSequence:
        """The live sequence (history, plus the open turn if any)."""
        return self._seq

    @property
    def live_turn_id(self) -> int | None:
        return self._live.turn_id if self._live else None

    def reply_text(self) -> str:
        """Text of the open turn's reply so far."""
        return self._live.reply.text if self._live else ""

    def has_work(self) -> bool:
        return self.engine.has_work()

    def in_sync(self) -> bool:
        """True when no turn is open and the sequence holds exactly the history's ids."""
        return self._live is None and self._seq.tokens == self.conversation.token_ids

    def history_text_matches(self) -> bool | None:
        """Whether the sequence decodes to the chat template's rendering of the history
        (None when the renderer or tokenizer cannot tell)."""
        renderer: Any = self.conversation.renderer
        tokenizer: Any = getattr(self.engine, "tokenizer", None)
        if not hasattr(renderer, "render_text") or tokenizer is None:
            return None
        marker = INTERRUPTED_MARKER if self.conversation.interrupted_marker else ""
        messages = [{"role": t.role, "content": t.text + (marker if t.interrupted else "")}
                    for t in self.conversation.turns]
        return bool(tokenizer.decode(list(self._seq.tokens)) == renderer.render_text(messages))

    # ------------------------------------------------------------------ speculation

    def speculate(self, spec_id: int, user_text: str) -> None:
        """Fork the committed conversation and draft the reply to ``user_text``.

        Ignored while a reply is open or once ``spec_id`` was cancelled (a cancel may
        overtake its own queued start)."""
        if self._live is not None or spec_id in self._dropped or spec_id in self._specs:
            return
        user_ids, header = self.conversation.user_prompt_ids(user_text)
        fork = self._seq.fork(priority=Priority.SPECULATIVE)
        spec = Speculation(spec_id=spec_id, user_text=user_text, prompt_ids=user_ids + header,
                           seq=fork, base_len=len(self._seq))
        spec.chunker.min_clause_chars = self.options.min_clause_chars
        spec.job = self.engine.enqueue(fork, self._params(speculative=True),
                                       prompt_ids=spec.prompt_ids,
                                       priority=Priority.SPECULATIVE)
        self._specs[spec_id] = spec

    def cancel_speculation(self, spec_id: int) -> None:
        """Drop a speculation (idempotent); its cached pages stay matchable."""
        self._dropped.add(spec_id)
        spec = self._specs.pop(spec_id, None)
        if spec is not None:
            self._stop_spec(spec)
            spec.seq.release()

    def cancel_all_speculations(self) -> None:
        for spec_id in list(self._specs):
            self.cancel_speculation(spec_id)

    # ------------------------------------------------------------------ turns

    def start_turn(self, turn_id: int, user_text: str, spec_id: int | None) -> TurnStart:
        """Commit the user's turn and start the reply (adopting a matching speculation)."""
        if self._live is not None:
            raise DialogueError(f"turn {turn_id} started while turn {self._live.turn_id} is open")
        user_ids, header = self.conversation.user_prompt_ids(user_text)
        prompt = user_ids + header
        spec = self._specs.pop(spec_id, None) if spec_id is not None else None
        self.cancel_all_speculations()
        base = len(self._seq)
        outcome, common, drafted = "none", 0, 0
        reply = ReplyTokens()
        pending_done = False
        if spec is not None:
            self._stop_spec(spec)
            res = resolve(spec.prompt_ids, prompt)
            common = res.common_prefix_tokens
            self._seq.release()
            self._seq = spec.seq
            self._seq.priority = Priority.LIVE
            have = len(self._seq) - base  # what the fork holds past the history
            outcome = "hit" if res.hit else "miss"
            if res.hit and have >= len(prompt):
                drafted = spec.kept_tokens()
                spec.reply.truncate(drafted)
                reply = spec.reply
                computed, reused = 0, base + len(prompt)
                pending_done = spec.finish_reason is FinishReason.EOS
            else:
                # A miss, or a hit whose prompt was not all in yet: keep the shared ids.
                keep = min(common, have)
                self._seq.truncate(base + keep)
                stats = self._seq.extend(prompt[keep:])
                computed, reused = stats.computed, base + keep + stats.reused
        else:
            stats = self._seq.extend(prompt)
            computed, reused = stats.computed, base + stats.reused
        self.conversation.add_user(user_text, user_ids, turn_id=turn_id)
        live = _LiveTurn(turn_id=turn_id, user_text=user_text, header_ids=header,
                         reply_start=base + len(prompt), reply=reply, drafted=drafted)
        self._live = live
        if len(reply):
            self._outbox.append(ReplyDelta(turn_id, reply.text, len(reply), done=pending_done,
                                           finish_reason="eos" if pending_done else None))
        if pending_done:
            # The draft was the whole reply. Its end-of-turn ids are computed when the
            # turn is closed (after playback), not before the first audio.
            live.finished = True
            live.finish_reason = "eos"
        else:
            remaining = max(1, self.options.max_new_tokens - len(reply))
            live.job = self.engine.enqueue(self._seq, self._params(max_new_tokens=remaining),
                                           priority=Priority.LIVE)
        return TurnStart(
            turn_id=turn_id, user_text=user_text, prompt_tokens=len(prompt),
            prompt_tokens_computed=computed, prompt_tokens_reused=reused, speculation=outcome,
            spec_id=spec.spec_id if spec else None, spec_text=spec.user_text if spec else "",
            common_prefix_tokens=common, drafted_tokens=drafted)

    def step(self) -> list[DialogueOutput]:
        """Advance the engine by one step (if it has work); return what came out."""
        if self.engine.has_work():
            self.engine.step()
        self._collect()
        out, self._outbox = self._outbox, []
        return out

    def finish_turn(self, turn_id: int, spoken_ms: int) -> TurnClosed:
        """The reply played to its end: keep all of it."""
        live = self._require(turn_id)
        if not live.finished:
            # Playback can only end after the text did; be safe and keep what exists.
            self._cancel_live(live)
            return self._close(live, len(live.reply), spoken_ms, interrupted=False)
        return self._close(live, len(live.reply), spoken_ms, interrupted=False)

    def cut_turn(self, turn_id: int, heard_chars: int, spoken_ms: int) -> TurnClosed:
        """Barge-in: keep the generated tokens whose text ends within ``heard_chars``."""
        live = self._require(turn_id)
        self._cancel_live(live)
        # Trailing whitespace was not "heard": never keep a token that is only that.
        heard_chars = len(live.reply.text[:max(0, heard_chars)].rstrip())
        cut = live.reply.cut_at(heard_chars)
        return self._close(live, cut.n_tokens, spoken_ms, interrupted=True)

    def withdraw_turn(self, turn_id: int) -> None:
        """Remove the open turn entirely (reply and user message), as if never started."""
        live = self._require(turn_id)
        self._cancel_live(live)
        self._live = None
        user = self.conversation.pop()
        if user.role != "user":
            raise DialogueError("withdrawn turn did not end with its user message")
        self._seq.truncate(self.conversation.num_tokens)
        self._check_sync()

    def close(self) -> None:
        """Cancel everything and release every sequence. Idempotent."""
        self.cancel_all_speculations()
        if self._live is not None:
            self._cancel_live(self._live)
            self._live = None
        self._seq.release()

    # ------------------------------------------------------------------ internals

    def _params(self, *, speculative: bool = False,
                max_new_tokens: int | None = None) -> SamplingParams:
        o = self.options
        renderer = self.conversation.renderer
        stop_ids = tuple(getattr(renderer, "stop_token_ids", ()) or ())
        return SamplingParams(
            max_new_tokens=(o.speculation_max_tokens if speculative
                            else max_new_tokens or o.max_new_tokens),
            temperature=o.temperature, top_p=o.top_p, top_k=o.top_k, seed=o.seed, stop=o.stop,
            stop_token_ids=stop_ids,
            # A draft leaves its turn open: the live reply may continue it. A live reply
            # too: its end-of-turn ids are computed when the turn is closed (after
            # playback), so the step that samples the stop token does not also prefill
            # them -- that step's text is often what the first audio waits for.
            end_of_turn=())

    def _require(self, turn_id: int) -> _LiveTurn:
        if self._live is None or self._live.turn_id != turn_id:
            raise DialogueError(f"turn {turn_id} is not the open turn")
        return self._live

    def _collect(self) -> None:
        for spec in list(self._specs.values()):
            if spec.job is None:
                continue
            for ev in spec.job.take_events():
                self._on_spec_event(spec, ev)
        live = self._live
        if live is not None and live.job is not None:
            events = live.job.take_events()
            text = "".join(_apply(live.reply, ev) for ev in events)
            done = any(ev.finished for ev in events)
            if done:
                self._on_live_finished(live)
            if text or done:
                self._outbox.append(ReplyDelta(live.turn_id, text, len(live.reply), done=done,
                                               finish_reason=live.finish_reason))

    def _on_spec_event(self, spec: Speculation, ev: TokenEvent) -> None:
        if spec.done:
            return
        _apply(spec.reply, ev)
        if ev.finished:
            assert spec.job is not None and spec.job.result is not None
            spec.finish_reason = spec.job.result.finish_reason
            _sync_reply(spec.reply, spec.job)
            spec.on_finished()
        elif spec.on_text(ev.text_delta):
            self._stop_spec(spec)  # a clause is enough: stop drafting
        if spec.done and spec.first_clause is not None:
            self._outbox.append(SpeculationDrafted(spec.spec_id, spec.first_clause))

    def _stop_spec(self, spec: Speculation) -> None:
        """Stop a speculation's generation, keeping what its fork holds."""
        job = spec.job
        if job is None or spec.done:
            return
        if not job.done:
            for ev in job.take_events():
                _apply(spec.reply, ev)
            self.engine.cancel(job)
            job.take_events()
            spec.finish_reason = FinishReason.CANCELLED
        else:
            for ev in job.take_events():
                self._on_spec_event(spec, ev)

    def _on_live_finished(self, live: _LiveTurn) -> None:
        assert live.job is not None and live.job.result is not None
        result = live.job.result
        live.finished = True
        live.finish_reason = result.finish_reason.value
        if result.finish_reason is not FinishReason.CANCELLED:
            _sync_reply(live.reply, live.job, live.drafted)
            live.closed_by_engine = bool(live.job.params.end_of_turn)

    def _cancel_live(self, live: _LiveTurn) -> None:
        job = live.job
        if job is not None and not job.done:
            self.engine.cancel(job)
            job.take_events()
            live.finished = True
            live.finish_reason = "cancelled"

    def _close(self, live: _LiveTurn, n_keep: int, spoken_ms: int, *,
               interrupted: bool) -> TurnClosed:
        generated = len(live.reply)
        if live.closed_by_engine:
            available = len(self._seq) - live.reply_start - len(
                self.conversation.renderer.end_of_turn_ids)
        else:
            available = len(self._seq) - live.reply_start
        n_keep = max(0, min(n_keep, available, generated))
        kept_ids = live.reply.ids[:n_keep]
        full = not interrupted and live.closed_by_engine and n_keep == available
        if not full:
            self._seq.truncate(live.reply_start + n_keep)
            self._seq.extend(self.conversation.closing_ids(interrupted=interrupted))
        text = live.reply.text_of(n_keep)  # exactly the kept ids' text
        turn = self.conversation.add_assistant(
            text, live.header_ids, kept_ids, generated_tokens=generated,
            interrupted=interrupted, spoken_ms=spoken_ms, turn_id=live.turn_id)
        self._live = None
        self._check_sync()
        return TurnClosed(live.turn_id, turn, n_keep, generated, live.reply.text, len(self._seq))

    def _check_sync(self) -> None:
        if self._seq.tokens != self.conversation.token_ids:
            raise DialogueError(
                f"engine sequence ({len(self._seq)} tokens) differs from the history "
                f"({self.conversation.num_tokens} tokens)")


def _apply(reply: ReplyTokens, ev: TokenEvent) -> str:
    """Add one token event to a reply; returns the text it released."""
    if ev.token_id < 0:  # a cancellation carries no token
        reply.add_text(ev.text_delta)
    elif ev.finished and ev.finish_reason is FinishReason.EOS:
        reply.add_text(ev.text_delta)  # the end-of-turn token itself is not kept
    else:
        reply.add(ev.token_id, ev.text_delta)
    return ev.text_delta


def _sync_reply(reply: ReplyTokens, job: Job, offset: int = 0) -> None:
    """Make the reply's ids from ``offset`` on those the job kept (a stop string may
    re-encode the tail); the first ``offset`` tokens came from an adopted draft."""
    result = job.result
    if result is not None and reply.ids[offset:] != result.token_ids:
        reply.reset_to(reply.ids[:offset] + result.token_ids,
                       reply.text_of(offset) + result.text)
