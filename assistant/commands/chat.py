"""``assistant chat``: a text REPL on the engine, keeping the conversation in the KV cache.

The conversation is a :class:`~assistant.dialogue.dialogue.Dialogue` (as in ``talk`` and
the daemon), driven synchronously on this thread: each turn extends the cached
conversation with the new user message only; a long conversation keeps inside the
model's context and the cache (the oldest exchanges leave, recomputed in the
background); a reply repeating itself is stopped. `/undo` cuts the cache back to before
the last exchange (nothing recomputed), `/retry` samples the last reply again with a new
seed, `/stats` shows what each turn computed and reused. A turn that fails (out of KV
memory with nothing to give back, a turn larger than the context) is reported and
withdrawn; the conversation goes on.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TextIO

from assistant.app.config import AppConfig

if TYPE_CHECKING:
    from assistant.dialogue.dialogue import Dialogue, DialogueOptions
    from assistant.llm.protocol import LLMBackend, LLMSequence
    from engine.chat_template import ChatTemplate

__all__ = ["ChatSession", "TurnRecord", "chat_repl", "register", "run"]

HELP = "commands: /undo (drop the last exchange), /retry (new reply), /stats, /help, /quit"
_log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "chat",
        help="text chat with the LLM on our engine (conversation kept in the KV cache)",
        description="A text REPL on the inference engine. The conversation stays in the "
        "paged KV cache across turns, so each turn computes only its new tokens; a long "
        "conversation keeps inside the model's context and engine.num_pages (the oldest "
        "exchanges leave the model's view). " + HELP + ".",
    )
    parser.add_argument("--max-new-tokens", type=int, help="override llm.max_new_tokens")
    parser.add_argument("--temperature", type=float, help="override llm.temperature")
    parser.add_argument("--system", help="override llm.system_prompt")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from assistant.loop.setup import dialogue_options, load_llm
    from engine.chat_template import ChatTemplate

    def progress(message: str) -> None:
        print(message, file=sys.stderr)

    backend, tokenizer, _engine = load_llm(cfg, progress=progress)
    template = ChatTemplate(tokenizer)
    template.verify()
    options = dialogue_options(cfg)
    options = replace(
        options, max_new_tokens=args.max_new_tokens or options.max_new_tokens,
        temperature=options.temperature if args.temperature is None else args.temperature,
        system_prompt=options.system_prompt if args.system is None else args.system)
    with ChatSession(backend, template, options) as session:
        print(f"chat with {backend.name} ({HELP})", file=sys.stderr)
        chat_repl(session, sys.stdin, sys.stdout)
    return 0


@dataclass(frozen=True)
class TurnRecord:
    """What one reply cost."""

    prompt_computed: int
    """Prompt tokens run through the model (the new user message and its framing)."""
    prompt_reused: int
    """Prompt positions (history included) served from the cache."""
    generated: int
    """Tokens sampled for the reply."""
    seconds: float
    """Wall time of the turn, prompt included."""
    kind: str = "turn"
    """``turn`` or ``retry``."""

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds if self.seconds > 0 else 0.0


class ChatSession:
    """A conversation held in one :class:`Dialogue` on a backend this thread steps."""

    def __init__(self, backend: LLMBackend, template: ChatTemplate, options: DialogueOptions,
                 *, clock: Callable[[], float] = time.perf_counter) -> None:
        from assistant.dialogue.dialogue import Dialogue
        from assistant.llm.host import fair_share

        self.backend = backend
        self.options = options
        self.dialogue: Dialogue = Dialogue(backend, template, options)
        # Alone on the cache: the same share a single conversation gets on the host.
        self.dialogue.set_token_budget(fair_share(backend.capacity_tokens, 1))
        self.turns: list[TurnRecord] = []
        self._clock = clock
        self._turn_id = 0
        self._retries = 0

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dialogue.close()

    @property
    def seq(self) -> LLMSequence:
        return self.dialogue.sequence

    @property
    def messages(self) -> list[dict[str, str]]:
        """What the model sees (hidden old exchanges excluded)."""
        return self.dialogue.conversation.messages()

    def say(self, text: str, out: TextIO, *, kind: str = "turn") -> TurnRecord:
        """Add a user message, stream the reply to `out`. On any failure the turn is
        withdrawn: the conversation stays as it was."""
        from assistant.dialogue.types import ReplyDelta

        d = self.dialogue
        self._turn_id += 1
        turn_id = self._turn_id
        hidden = d.conversation.hidden_turns
        started = self._clock()
        start = d.start_turn(turn_id, text, None)
        try:
            while d.has_work():
                self._step()
                for output in d.collect():
                    if isinstance(output, ReplyDelta) and output.turn_id == turn_id:
                        out.write(output.text)
                        out.flush()
        except BaseException:
            d.withdraw_turn(turn_id)
            raise
        out.write("\n")
        closed = d.finish_turn(turn_id, 0)
        if d.conversation.hidden_turns > hidden:
            _log.info("the oldest %d turns left the model's context",
                      d.conversation.hidden_turns - hidden)
        record = TurnRecord(start.prompt_tokens_computed, start.prompt_tokens_reused,
                            closed.generated_tokens, self._clock() - started, kind)
        self.turns.append(record)
        return record

    def settle(self) -> None:
        """Run background work (a context window being recomputed) to its end: called
        while the user reads the reply, so the next turn finds it done."""
        d = self.dialogue
        try:
            while d.has_work():
                self._step()
                d.collect()
        except Exception as exc:  # background work only: dropped, never fatal
            _log.info("background work dropped: %s", exc)
            d.shed()

    def undo(self) -> bool:
        """Drop the last exchange (truncate: nothing is recomputed)."""
        return self.dialogue.undo_exchange()

    def retry(self, out: TextIO) -> TurnRecord | None:
        """Drop the last exchange and ask it again with a new seed."""
        turns = self.dialogue.conversation.visible_turns
        if len(turns) < 2 or turns[-1].role != "assistant":
            return None
        question = turns[-2].text
        self.dialogue.undo_exchange()
        self._retries += 1
        self.dialogue.set_options(replace(self.options, seed=self.options.seed + self._retries))
        try:
            return self.say(question, out, kind="retry")
        finally:
            self.dialogue.set_options(self.options)

    def _step(self) -> None:
        """One backend step; out of KV pages, background work yields first."""
        try:
            self.backend.step()
        except Exception as exc:
            if not self.backend.is_out_of_pages(exc) or not self.dialogue.shed():
                raise
            self.backend.step()

    def stats_text(self) -> str:
        lines = []
        for number, turn in enumerate(self.turns, 1):
            lines.append(f"{turn.kind} {number}: prompt {turn.prompt_computed} computed, "
                         f"{turn.prompt_reused} reused; {turn.generated} tokens in "
                         f"{turn.seconds:.2f} s ({turn.tokens_per_s:.1f} tokens/s)")
        stats = self.backend.stats()
        conv = self.dialogue.conversation
        lines.append(f"context: {len(self.seq)} tokens (limit {self.dialogue.context_limit}), "
                     f"{len(conv.visible_turns)} turns seen, {conv.hidden_turns} hidden")
        lines.append(f"cache: pages used {stats.pages_used}, cached {stats.pages_cached}, "
                     f"free {stats.pages_free}; totals computed {stats.tokens_computed}, "
                     f"reused {stats.tokens_reused}, decoded {stats.tokens_decoded}")
        return "\n".join(lines)


def chat_repl(session: ChatSession, stdin: TextIO, stdout: TextIO, *,
              prompt: str = "> ") -> None:
    """Read lines from `stdin` until EOF or /quit; replies and notices go to `stdout`."""
    while True:
        stdout.write(prompt)
        stdout.flush()
        line = stdin.readline()
        if not line:
            stdout.write("\n")
            return
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            return
        if text == "/help":
            stdout.write(HELP + "\n")
        elif text == "/undo":
            done = session.undo()
            stdout.write(f"(undone; {len(session.seq)} tokens in cache)\n" if done
                         else "(nothing to undo)\n")
        elif text == "/retry":
            if session.retry(stdout) is None:
                stdout.write("(nothing to retry)\n")
        elif text == "/stats":
            stdout.write(session.stats_text() + "\n")
        elif text.startswith("/"):
            stdout.write(f"unknown command {text.split()[0]}; {HELP}\n")
        else:
            try:
                session.say(text, stdout)
                session.settle()
            except Exception as exc:  # the turn was withdrawn; the conversation goes on
                _log.debug("turn failed", exc_info=True)
                stdout.write(f"\n(error: {exc}; that turn was dropped)\n")
