"""The same conversation on our local engine and on vLLM (the scale-out backend).

Not a test: prints figures. A 10-turn spoken-style conversation with two barge-ins (the
user cuts the reply at 40% of its text; the turn keeps the heard ids and is closed, as
in ``talk``) is driven through the dialogue (:class:`assistant.dialogue.dialogue.Dialogue`,
the code every surface runs) on each backend, greedy fp32. Per turn: the prompt's tokens
computed vs reused (local: the engine's accounting; vLLM: ``cached_tokens`` as the server
reported it, beside the client's whole-block expectation), time to first token, and
whether both backends gave the same reply; then the wall time of the conversation.

    .venv/bin/python bench/bench_vllm.py              # starts a server from .venv-vllm
    .venv/bin/python bench/bench_vllm.py --url http://127.0.0.1:8000   # one already up

The server shares the machine with the local engine (on a 2-core CPU that is the point
of comparison: the same cores); each backend runs alone, one after the other.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from results import add_no_write, capture, fenced, write_results

from assistant.app.config import load_config
from assistant.app.models import resolve_llm
from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueOptions, ReplyDelta
from assistant.llm.protocol import LLMBackend
from assistant.llm.vllm.streams import RequestRecord
from assistant.loop.setup import dialogue_options
from engine.chat_template import ChatTemplate

ROOT = Path(__file__).resolve().parents[1]
TURNS = (
    "Hi! Can you tell me about the moon?",
    "Why does it have phases?",
    "How far away is it from us?",
    "What about the sun, how big is it compared to the earth?",  # barge-in
    "Sorry, I meant how hot is the sun?",
    "Tell me something surprising about Mars.",
    "Could people live there one day?",  # barge-in
    "Okay, what would they need to bring?",
    "Which planet has the most moons?",
    "Thanks! Give me one fun fact to end with.",
)
BARGE_INS = {3, 6}
HEARD_FRACTION = 0.4


@dataclass(frozen=True)
class Turn:
    prompt: int
    computed: int
    reused: int
    expected_reused: int | None
    ttft_s: float
    seconds: float
    reply: str
    cut: bool


def converse(backend: LLMBackend, options: DialogueOptions,
             records: Sequence[RequestRecord] | None = None) -> tuple[list[Turn], float]:
    """The conversation on ``backend``; ``records``: a vLLM backend's request records."""
    dialogue = Dialogue(backend, ChatTemplate(backend.tokenizer), options)
    turns: list[Turn] = []
    started = time.perf_counter()
    for number, text in enumerate(TURNS):
        t0 = time.perf_counter()
        start = dialogue.start_turn(number + 1, text, None)
        reply, first, done = "", None, False
        while not done:
            backend.step()
            for out in dialogue.collect():
                if isinstance(out, ReplyDelta) and out.turn_id == number + 1:
                    if first is None and out.tokens:
                        first = time.perf_counter() - t0
                    reply += out.text
                    done = done or out.done
        cut = number in BARGE_INS
        if cut:
            dialogue.cut_turn(number + 1, int(len(reply) * HEARD_FRACTION), 1000)
            reply = reply[:int(len(reply) * HEARD_FRACTION)] + " [cut]"
        else:
            dialogue.finish_turn(number + 1, 0)
        while backend.has_work():  # a remote request's usage report
            backend.step()
        computed, reused, expected = start.prompt_tokens_computed, start.prompt_tokens_reused, None
        if records is not None:
            record = records[-1]
            reused = record.cached_tokens or 0
            computed = record.prompt_tokens - reused
            expected = record.expected_cached
        turns.append(Turn(computed + reused, computed, reused, expected, first or 0.0,
                          time.perf_counter() - t0, reply, cut))
    wall = time.perf_counter() - started
    dialogue.close()
    return turns, wall


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running vLLM server (else one is started)")
    parser.add_argument("--model", type=Path, help="model directory (default: the packaged one)")
    add_no_write(parser)
    args = parser.parse_args(argv)

    from assistant.llm.local import LocalBackend
    from assistant.llm.vllm.connect import VLLMOptions, connect
    from assistant.llm.vllm.server import ServerOptions, VLLMServer
    from engine import Engine

    cfg = load_config(ROOT / "config.yaml", env={})
    options = dialogue_options(cfg)
    model = args.model or resolve_llm(cfg)
    server = None
    url = args.url
    if url is None:
        log = Path(tempfile.mkdtemp(prefix="bench-vllm-")) / "server.log"
        server = VLLMServer(ServerOptions(model, free_port(), cpu_threads="0-1"), log_path=log)
        t0 = time.perf_counter()
        server.start().wait_ready(timeout_s=600)
        print(f"vLLM server ready in {time.perf_counter() - t0:.0f} s (log: {log})")
        url = server.url
    try:
        remote = connect(VLLMOptions((url,)), model)
        local = LocalBackend(Engine.load(model, dtype="float32"))
        local_turns, local_wall = converse(local, options)
        remote_turns, remote_wall = converse(remote, options, remote.records)
        remote.close()
    finally:
        if server is not None:
            server.stop()
    with capture() as printed:
        report(local_turns, local_wall, remote_turns, remote_wall)
    if not args.no_write:
        write_results("vllm", fenced(printed.getvalue()), command=sys.orig_argv)
    return 0


def report(local_turns: list[Turn], local_wall: float, remote_turns: list[Turn],
           remote_wall: float) -> None:
    print(f"\n10 turns, barge-ins at turns {', '.join(str(b + 1) for b in sorted(BARGE_INS))}; "
          "prompt = the whole conversation sent (vLLM) / held (local) at the turn's start")
    print(f"{'turn':>4} {'prompt':>6} | {'local comp/reused':>17} {'TTFT ms':>8} | "
          f"{'vLLM comp/reused (exp.)':>24} {'TTFT ms':>8} | same")
    for n, (a, b) in enumerate(zip(local_turns, remote_turns, strict=True), 1):
        print(f"{n:>4} {b.prompt:>6} | {a.computed:>8}/{a.reused:<8} {1000 * a.ttft_s:>8.0f} | "
              f"{b.computed:>8}/{b.reused:<5} ({b.expected_reused:>5}) {1000 * b.ttft_s:>11.0f} |"
              f" {'yes' if a.reply == b.reply else 'NO'}{' (cut)' if a.cut else ''}")
    for name, turns, wall in (("local", local_turns, local_wall),
                              ("vLLM", remote_turns, remote_wall)):
        print(f"{name:>5}: wall {wall:.1f} s; prompt tokens computed "
              f"{sum(t.computed for t in turns)}, reused {sum(t.reused for t in turns)}; "
              f"median TTFT {1000 * sorted(t.ttft_s for t in turns)[len(turns) // 2]:.0f} ms")
    same = sum(a.reply == b.reply for a, b in zip(local_turns, remote_turns, strict=True))
    print(f"same replies: {same}/{len(TURNS)}")


if __name__ == "__main__":
    sys.exit(main())
