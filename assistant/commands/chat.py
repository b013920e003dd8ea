"""``assistant chat``: a text REPL on the engine, keeping the conversation in the KV cache.

Each turn extends the cached conversation with the new user message only; `/undo` cuts the
cache back to before the last exchange (nothing recomputed), `/retry` cuts the last reply
and samples a new one, `/stats` shows what each turn computed and reused.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TextIO

from assistant.app.config import AppConfig

if TYPE_CHECKING:
    from engine import Engine, SamplingParams, Sequence
    from engine.chat_template import ChatTemplate, Message

__all__ = ["ChatSession", "TurnRecord", "chat_repl", "register", "run"]

HELP = "commands: /undo (drop the last exchange), /retry (new reply), /stats, /help, /quit"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "chat",
        help="text chat with the LLM on our engine (conversation kept in the KV cache)",
        description="A text REPL on the inference engine. The conversation stays in the "
        "paged KV cache across turns, so each turn computes only its new tokens. "
        + HELP + ".",
    )
    parser.add_argument("--max-new-tokens", type=int, help="override llm.max_new_tokens")
    parser.add_argument("--temperature", type=float, help="override llm.temperature")
    parser.add_argument("--system", help="override llm.system_prompt")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from assistant.app.models import cache_dir, resolve_llm
    from engine import Engine, SamplingParams
    from engine.chat_template import ChatTemplate

    def progress(message: str) -> None:
        print(message, file=sys.stderr)

    path = resolve_llm(cfg, progress=progress)
    engine = Engine.load(path, device=cfg.engine.device, dtype=cfg.engine.dtype,
                         page_size=cfg.engine.page_size, num_pages=cfg.engine.num_pages,
                         max_batch=cfg.engine.max_batch,
                         prefill_chunk=cfg.engine.prefill_chunk,
                         weights=cfg.engine.weights,
                         cache_dir=cache_dir(cfg) / "weights")
    template = ChatTemplate(engine.tokenizer)
    template.verify()
    llm = cfg.llm
    params = SamplingParams(
        max_new_tokens=args.max_new_tokens or llm.max_new_tokens,
        temperature=llm.temperature if args.temperature is None else args.temperature,
        top_p=llm.top_p, top_k=llm.top_k, seed=llm.seed, stop=tuple(llm.stop),
        stop_token_ids=template.stop_token_ids, end_of_turn=template.end_of_turn_ids)
    system = llm.system_prompt if args.system is None else args.system
    with ChatSession(engine, template, params, system_prompt=system) as session:
        print(f"chat with {path.name} ({HELP})", file=sys.stderr)
        chat_repl(session, sys.stdin, sys.stdout)
    return 0


@dataclass(frozen=True)
class TurnRecord:
    """What one reply cost."""

    prompt_computed: int
    """Prompt tokens run through the model (the new user message and its framing)."""
    prompt_reused: int
    """Prompt tokens served from the cache."""
    generated: int
    """Tokens sampled for the reply."""
    seconds: float
    """Wall time of the turn, prompt included."""
    kind: str = "turn"
    """``turn`` or ``retry``."""

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class _Exchange:
    start: int
    """Sequence length before the user message."""
    reply_start: int
    """Sequence length before the reply (after the generation prompt)."""


class ChatSession:
    """A conversation held in one engine sequence."""

    def __init__(self, engine: Engine, template: ChatTemplate, params: SamplingParams, *,
                 system_prompt: str = "", clock: Callable[[], float] = time.perf_counter
                 ) -> None:
        self.engine = engine
        self.template = template
        self.params = params
        self.messages: list[Message] = []
        self.turns: list[TurnRecord] = []
        self._clock = clock
        self._exchanges: list[_Exchange] = []
        self._retries = 0
        self._last_text = ""
        self.seq: Sequence = engine.sequence()
        if system_prompt:
            system = {"role": "system", "content": system_prompt}
            self.seq.extend(template.message_ids([], system))
            self.messages.append(system)

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.seq.release()

    def say(self, text: str, out: TextIO) -> TurnRecord:
        """Add a user message, stream the reply to `out`."""
        user = {"role": "user", "content": text}
        start = len(self.seq)
        prompt = self.template.turn_ids(self.messages, text)
        try:
            record = self._reply(prompt, out, "turn")
        except BaseException:
            if not self.seq.released and len(self.seq) > start:
                self.seq.truncate(start)  # the conversation stays as it was
            raise
        self._exchanges.append(_Exchange(start, start + len(prompt)))
        self.messages += [user, {"role": "assistant", "content": self._last_text}]
        return record

    def undo(self) -> bool:
        """Drop the last exchange (truncate: nothing is recomputed)."""
        if not self._exchanges:
            return False
        self.seq.truncate(self._exchanges.pop().start)
        del self.messages[-2:]
        return True

    def retry(self, out: TextIO) -> TurnRecord | None:
        """Cut the last reply and sample a new one (with a new seed)."""
        if not self._exchanges:
            return None
        self.seq.truncate(self._exchanges[-1].reply_start)
        self._retries += 1
        record = self._reply([], out, "retry", seed=self.params.seed + self._retries)
        self.messages[-1] = {"role": "assistant", "content": self._last_text}
        return record

    def _reply(self, prompt: list[int], out: TextIO, kind: str, *,
               seed: int | None = None) -> TurnRecord:
        params = self.params if seed is None else replace(self.params, seed=seed)
        started = self._clock()
        job = self.engine.enqueue(self.seq, params, prompt_ids=prompt)
        try:
            while not job.done:
                self.engine.step()
                for event in job.take_events():
                    out.write(event.text_delta)
                    out.flush()
        finally:
            if not job.done:
                self.engine.cancel(job)
        out.write("\n")
        result = job.result
        assert result is not None
        self._last_text = result.text
        record = TurnRecord(result.prompt.computed, result.prompt.reused,
                            result.sampled_tokens, self._clock() - started, kind)
        self.turns.append(record)
        return record

    def stats_text(self) -> str:
        lines = []
        for number, turn in enumerate(self.turns, 1):
            lines.append(f"{turn.kind} {number}: prompt {turn.prompt_computed} computed, "
                         f"{turn.prompt_reused} reused; {turn.generated} tokens in "
                         f"{turn.seconds:.2f} s ({turn.tokens_per_s:.1f} tokens/s)")
        stats = self.engine.stats()
        lines.append(f"cache: {len(self.seq)} tokens in conversation; pages used "
                     f"{stats.pages_used}, cached {stats.pages_cached}, free "
                     f"{stats.pages_free}; totals computed {stats.tokens_computed}, "
                     f"referenced {stats.tokens_referenced}, copied {stats.tokens_copied}, "
                     f"decoded {stats.tokens_decoded}")
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
            session.say(text, stdout)
