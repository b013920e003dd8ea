"""``assistant chat``: a text REPL on the engine, keeping the conversation in the KV cache.

The conversation is a :class:`~assistant.commands.chat_session.ChatSession`: a
:class:`~assistant.dialogue.dialogue.Dialogue` on the engine thread, as in ``talk`` and
the daemon, which this thread sends commands to and streams the reply from. Each turn
extends the cached conversation with the new user message only; a long conversation
keeps inside the model's context and the cache (the oldest exchanges leave, recomputed
in the background); a reply repeating itself is stopped. `/undo` cuts the cache back to before
the last exchange (nothing recomputed), `/retry` samples the last reply again with a new
seed, `/stats` shows what each turn computed and reused. A turn that fails (out of KV
memory with nothing to give back, a turn larger than the context) is reported and
withdrawn; the conversation goes on.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import TextIO

from assistant.app.config import AppConfig
from assistant.commands.chat_session import ChatSession, TurnRecord

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
    from assistant.loop.setup import dialogue_options, load_llm, local_tools, with_local_tools
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
    tools = local_tools(cfg)
    options = with_local_tools(options, tools, cfg)
    with ChatSession(backend, template, options, tools=tools) as session:
        print(f"chat with {backend.name} ({HELP})", file=sys.stderr)
        chat_repl(session, sys.stdin, sys.stdout)
    return 0


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
            stdout.write(f"(undone; {len(session.tokens())} tokens in cache)\n" if done
                         else "(nothing to undo)\n")
        elif text == "/retry":
            _reply(session, stdout, lambda: session.retry(stdout), "(nothing to retry)\n")
        elif text == "/stats":
            stdout.write(session.stats_text() + "\n")
        elif text.startswith("/"):
            stdout.write(f"unknown command {text.split()[0]}; {HELP}\n")
        else:
            _reply(session, stdout, functools.partial(session.say, text, stdout))


def _reply(session: ChatSession, stdout: TextIO, turn: Callable[[], TurnRecord | None],
           nothing: str = "") -> None:
    """Run one turn (``nothing`` is written if there was none to run), then let the
    background work settle. A failed turn was withdrawn: it is reported and the
    conversation goes on."""
    try:
        if turn() is None:
            stdout.write(nothing)
        session.settle()
    except Exception as exc:
        _log.debug("turn failed", exc_info=True)
        stdout.write(f"\n(error: {exc}; that turn was dropped)\n")
