"""Load test of ``assistant serve`` on this machine, loopback only, bounded in count and time.

Not a test: prints tables. With the real models, in one process (server and clients):

1. Concurrency: N = 1, 4, 8 sessions at once, each streaming recorded questions (Piper
   speech) in real time, 100 ms per append, silence between questions as a microphone
   would send. Reports voice-to-voice latency (client side: the last sample of the
   question sent -> the first audio delta received) p50 / p95, and aggregate generated
   tokens per second. The peer for the ratios is one session alone on the same server,
   which asks every question ``--alone-rounds`` times (whatever ``--turns`` says), so that
   its p50 is over the same questions as the larger N's and each of their turns can be
   set against the same question's median time alone. The sessions speak at the same
   moments (each turn a burst of N) unless ``--stagger`` spreads their first questions
   over some seconds. Where the time goes: each stage's model calls per turn
   (``stage_time.py``), and each turn's waterfall read from its session's event log
   (``serve_falls.py``: when the pause, the scores, the speculation, the end of turn,
   the reply and its first audio came after the end of speech; p50 per N, and the
   slowest three turns at the largest N).
2. Churn: for ``--seconds`` (default 60; ``--minutes 10`` for a soak), sessions come and
   go (each asks ``--churn-turns`` questions, then leaves, at most ``--churn-sessions`` at
   a time). Samples process RSS, engine pages and the largest conversation's context;
   at the end, with every session gone, the engine's ``check()`` must hold and every
   page must be free or cached (no leak).

    .venv/bin/python bench/bench_serve.py [--sessions 1,4,8 | --sessions 0] [--turns 2]
                                          [--stagger 0] [--seconds 60 | --minutes 10]
                                          [--churn-sessions 4]
                                          [--churn-turns 1] [--num-pages N]

The soak of long conversations on a small cache:
    .venv/bin/python bench/bench_serve.py --sessions 0 --minutes 30 --churn-turns 10 \
        --num-pages 256
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import random
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml
from results import Report, add_no_write, write_results
from serve_falls import SessionLogs, p50_rows, slowest_rows
from stage_time import STAGES, StageTimer, StageTotals
from websockets.asyncio.client import connect

from assistant.app.config import default_config_path, load_config
from assistant.loop.metrics import percentile
from assistant.serve.runtime import ServeRuntime, build_runtime
from assistant.serve.transport.limits import ServerLimits
from assistant.serve.transport.server import RealtimeServer, ServerOptions
from audio.resample import resample

QUESTIONS = (
    "What is the capital of France?",
    "What colour is the sky?",
    "Name a big animal.",
    "What do bees make?",
    "What is the opposite of hot?",
    "Which planet do we live on?",
)
CHUNK_MS = 100
RATE = 24_000


@dataclass
class Stats:
    asked: list[tuple[int, float]] = field(default_factory=list)
    """(question index, voice-to-voice s) of each turn."""
    tokens: int = 0
    turns: int = 0
    failed: int = 0
    errors: int = 0
    """``error`` events and responses that did not complete."""
    max_pages_shared: int = 0
    max_pages_used: int = 0
    loop_lag_s: list[float] = field(default_factory=list)
    """Scheduling lag of a 10 ms timer on the event loop, sampled through the run."""

    @property
    def v2v_s(self) -> list[float]:
        """Each turn's voice-to-voice time, s."""
        return [v2v for _, v2v in self.asked]


class FullCollections:
    """A ``gc.callbacks`` entry: how long each full (generation 2) collection took."""

    def __init__(self) -> None:
        self.pauses_s: list[float] = []
        self._start: float | None = None

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.pauses_s.append(time.perf_counter() - self._start)
            self._start = None


async def loop_lag(samples: list[float], period_s: float = 0.01) -> None:
    """Record how late a ``period_s`` sleep wakes up: any blocking call on the event
    loop (an engine step, a lock wait) shows up as lag."""
    loop = asyncio.get_running_loop()
    while True:
        t = loop.time()
        await asyncio.sleep(period_s)
        samples.append(max(0.0, loop.time() - t - period_s))


def speech(runtime: ServeRuntime, text: str) -> np.ndarray:
    synth = runtime.models.synthesizer
    pcm = np.concatenate([c.pcm for c in synth.synthesize(text)]).astype(np.float32) / 32768
    wire = resample(pcm, synth.sample_rate, RATE)
    return np.clip(np.round(wire * 32767), -32768, 32767).astype(np.int16)


def _append(pcm: np.ndarray) -> str:
    audio = base64.b64encode(pcm.astype("<i2").tobytes()).decode("ascii")
    return json.dumps({"type": "input_audio_buffer.append", "audio": audio})


async def client(url: str, questions: list[tuple[int, np.ndarray]], stats: Stats,
                 deadline: float, delay_s: float = 0.0) -> None:
    """One session: each question in real time, then silence until its response.done;
    the first after ``delay_s`` of silence (connected, as a microphone would be)."""
    loop = asyncio.get_running_loop()
    step = RATE * CHUNK_MS // 1000
    silence = _append(np.zeros(step, np.int16))
    async with connect(f"{url}/realtime", max_size=None, close_timeout=2) as ws:
        done = asyncio.Event()
        first_audio: list[float] = []
        state: dict[str, Any] = {"sent_end": None}

        async def reader() -> None:
            async for raw in ws:
                event = json.loads(raw)
                kind = event["type"]
                if kind == "response.output_audio.delta" and state["sent_end"] is not None:
                    first_audio.append(loop.time() - state["sent_end"])
                    state["sent_end"] = None
                elif kind == "error":
                    stats.errors += 1
                elif kind == "response.done":
                    if event["response"].get("status") not in ("completed", "cancelled"):
                        stats.errors += 1
                    usage = event["response"].get("usage") or {}
                    stats.tokens += int(usage.get("output_tokens") or 0)
                    done.set()

        task = asyncio.create_task(reader())
        t = loop.time()
        try:
            for turn, (index, pcm) in enumerate(questions):
                done.clear()
                lead = 3 + (round(delay_s * 1000 / CHUNK_MS) if turn == 0 else 0)
                audio = np.concatenate([np.zeros(step * lead, np.int16), pcm])
                for i in range(0, len(audio), step):
                    await ws.send(_append(audio[i : i + step]))
                    t += CHUNK_MS / 1000
                    await asyncio.sleep(max(0.0, t - loop.time()))
                state["sent_end"] = loop.time()
                while not done.is_set():  # the microphone keeps sending while we listen
                    if loop.time() > deadline:
                        stats.failed += 1
                        return
                    await ws.send(silence)
                    t += CHUNK_MS / 1000
                    await asyncio.sleep(max(0.0, t - loop.time()))
                stats.turns += 1
                stats.asked.extend((index, v2v) for v2v in first_audio)
                first_audio.clear()
        finally:
            task.cancel()


def asks(n: int, turns: int, count: int) -> list[list[int]]:
    """The questions (indices below ``count``) each of ``n`` sessions asks: session k
    asks k, k+1, ... in turn (mod ``count``). Every question is asked equally often only
    when ``n`` is a multiple of ``count``; hence the per-turn ratio against the same
    question alone (:func:`slowdown_p50`)."""
    return [[(k + j) % count for j in range(turns)] for k in range(n)]


def medians(asked: list[tuple[int, float]]) -> dict[int, float]:
    """Each question's median voice-to-voice time over its asks."""
    times: dict[int, list[float]] = {}
    for q, v2v in asked:
        times.setdefault(q, []).append(v2v)
    return {q: float(np.median(ts)) for q, ts in times.items()}


def slowdown_p50(asked: list[tuple[int, float]], alone: dict[int, float]) -> float | None:
    """The median, over turns, of a turn's voice-to-voice time over the same question's
    time alone (questions not timed alone are left out)."""
    ratios = [v2v / alone[q] for q, v2v in asked if alone.get(q)]
    return percentile(ratios, 50) if ratios else None


async def concurrency(server: RealtimeServer, runtime: ServeRuntime, voices: list[np.ndarray],
                      n: int, turns: int, limit_s: float,
                      stagger_s: float = 0.0) -> tuple[Stats, float]:
    """``n`` sessions at once; session k starts speaking ``k * stagger_s / n`` s after
    the first (0: all in step, the worst case; about one turn's length: users who talk
    independently)."""
    stats = Stats()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s

    async def sampler() -> None:
        while True:
            pages = await asyncio.to_thread(runtime.engine_stats)
            stats.max_pages_shared = max(stats.max_pages_shared, pages["pages_shared"])
            stats.max_pages_used = max(stats.max_pages_used, pages["pages_used"])
            await asyncio.sleep(0.5)

    sampling = asyncio.create_task(sampler())
    lag = asyncio.create_task(loop_lag(stats.loop_lag_s))
    t0 = time.perf_counter()
    await asyncio.gather(*(
        client(server.url, [(q, voices[q]) for q in session], stats, deadline,
               delay_s=k * stagger_s / n)
        for k, session in enumerate(asks(n, turns, len(voices)))
    ))
    wall = time.perf_counter() - t0
    sampling.cancel()
    lag.cancel()
    return stats, wall


async def drained(server: RealtimeServer, limit_s: float = 10.0) -> None:
    """Wait until the server has torn down every session (bounded)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while server.active_sessions and loop.time() < end:
        await asyncio.sleep(0.05)


def rss_mib() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


Sample = tuple[float, float, int, int, int, int]
"""t (s), RSS (MiB), pages used, sessions, largest context (tokens), unowned sequences."""


async def churn(server: RealtimeServer, runtime: ServeRuntime, voices: list[np.ndarray],
                seconds: float, width: int, turns: int) -> list[Sample]:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    rng = random.Random(0)
    samples: list[Sample] = []
    stats = Stats()

    async def one() -> None:
        picks = [rng.randrange(len(voices)) for _ in range(turns)]
        await client(server.url, [(q, voices[q]) for q in picks], stats, end + 60 + 20 * turns)

    async def sampler() -> None:
        t0 = loop.time()
        while loop.time() < end:
            pages = await asyncio.to_thread(runtime.engine_stats)
            gauges = runtime.engine_gauges()
            held = gauges.get("session_tokens", {})
            biggest = max(held.values(), default=0) if isinstance(held, dict) else 0
            unowned = gauges.get("sequences_unowned", 0)
            samples.append((loop.time() - t0, rss_mib(), pages["pages_used"],
                            server.active_sessions, biggest,
                            unowned if isinstance(unowned, int) else 0))
            await asyncio.sleep(max(1.0, seconds / 30))

    running: set[asyncio.Task[None]] = set()
    sample_task = asyncio.create_task(sampler())
    while loop.time() < end:
        while len(running) < width and loop.time() < end:
            task = asyncio.create_task(one())
            running.add(task)
            task.add_done_callback(running.discard)
            await asyncio.sleep(rng.uniform(0.2, 1.5))
        await asyncio.sleep(0.2)
    await asyncio.gather(*running, return_exceptions=True)
    await sample_task
    await drained(server)
    print(f"churn: {stats.turns} turns completed, {stats.failed} timed out, "
          f"{stats.errors} errors")
    return samples


async def main_async(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {"llm.max_new_tokens": args.max_tokens,
                                    "server.max_sessions": 16}
    if args.num_pages:
        overrides["engine.num_pages"] = args.num_pages
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = yaml.safe_load(value)
    cfg = load_config(args.config or default_config_path(), env={}, overrides=overrides)
    print("loading models ...", file=sys.stderr)
    # Frozen heap after loading (assistant/app/heap.py), or as before it.
    runtime = build_runtime(cfg, freeze_heap=args.gc_freeze)
    full_gcs = FullCollections()
    gc.callbacks.append(full_gcs)
    voices = [speech(runtime, q) for q in QUESTIONS]
    limits = ServerLimits(max_sessions=cfg.server.max_sessions)
    logs = SessionLogs(runtime.backend_factory)
    server = RealtimeServer(ServerOptions(host="127.0.0.1", port=0, limits=limits),
                            backend_factory=logs, defaults=runtime.defaults,
                            served=runtime.served, engine_gauges=runtime.engine_gauges)
    await server.start()
    report = Report()
    timer = StageTimer()
    try:
        rows, stage_rows = [], []
        base: tuple[float | None, float] | None = None
        alone: dict[int, float] = {}
        falls: dict[int, list[Any]] = {}
        levels = [n for n in args.sessions if n > 0]
        if levels:  # the peer: one session alone, asking every question --alone-rounds times
            levels = [1, *(n for n in levels if n != 1)]
        for n in levels:
            turns = len(voices) * args.alone_rounds if base is None else args.turns
            with timer.installed():
                before = timer.snapshot()
                stats, wall = await concurrency(server, runtime, voices, n, turns,
                                                args.phase_limit, args.stagger)
                stage_rows.append(stage_row(n, stats.turns, wall,
                                            timer.since(before, timer.snapshot())))
            tps = stats.tokens / wall if wall else 0.0
            p50, p95 = percentile(stats.v2v_s, 50), percentile(stats.v2v_s, 95)
            if base is None:
                base = (p50, tps)
                alone = medians(stats.asked)
            ratio_p50 = f"{p50 / base[0]:.2f}x" if p50 and base[0] else "-"
            ratio_tps = f"{tps / base[1]:.2f}x" if base[1] else "-"
            slowdown = slowdown_p50(stats.asked, alone)
            lag = stats.loop_lag_s
            rows.append([n, stats.turns, stats.failed, _ms(p50), _ms(p95), f"{tps:.1f}",
                         ratio_p50, "-" if slowdown is None else f"{slowdown:.2f}x",
                         ratio_tps, stats.max_pages_used, stats.max_pages_shared,
                         _ms(percentile(lag, 99)), _ms(max(lag) if lag else None)])
            print(f"N={n}: {rows[-1]}", file=sys.stderr, flush=True)
            await drained(server)
            falls[n] = logs.take()
            runtime.check_engine()
        report.table(["sessions", "turns", "timed out", "v2v p50", "v2v p95",
                      "tokens/s (all)", "p50 vs N=1", "turn vs alone (p50)",
                      "tokens/s vs N=1",
                      "pages used (max)", "pages shared (max)",
                      "loop lag p99", "loop lag max"], rows)
        report.line(f"sessions' first questions spread over {args.stagger:g} s (--stagger). "
                    f"N=1: one session alone, asking each question {args.alone_rounds} times "
                    "(the peer); p50 vs N=1: this N's v2v p50 over N=1's; turn vs alone: the "
                    "median over this N's "
                    "turns of each turn's v2v over the same question's median at N=1. "
                    "tokens/s: generated tokens of all sessions / wall time of the run, under a "
                    "real-time load (audio in and out at 1x); pages shared: KV pages referenced "
                    f"by more than one sequence (page size {runtime.cfg.engine.page_size} "
                    "tokens); loop lag: how late a 10 ms timer fired on the server's event loop")
        report.line(f"engine after the concurrency runs: {runtime.engine_stats()}")
        if stage_rows:
            report.table(["sessions", *(f"{s} per turn" for s in STAGES), "decodes per turn",
                          "stages busy / wall"], stage_rows)
            report.line("per turn: the wall time of each stage's model calls over the run "
                        "(bench/stage_time.py), divided by the turns; at N = 1 close to "
                        "what each costs alone, with more sessions it includes waiting for "
                        "the cores. Threads: engine.threads for the engine "
                        f"({runtime.cfg.engine.threads or 'one per core but one'}), one for "
                        "Smart Turn, up to every core for Whisper and Piper. stages busy / "
                        "wall: their sum over the run's wall time")
        logs.stop()
        if falls:
            report.table(["waterfall, p50 ms after end of speech",
                          *(f"N={n}" for n in falls)], p50_rows(falls))
            report.line("server side, each session's own clock (assistant/loop/waterfall.py): "
                        "a stage's p50 over the turns that reached it (how many did, when not "
                        "all); a speculation's stages count for the turns that adopted it")
            top = max(falls)
            header, rows = slowest_rows(falls[top])
            report.table([f"slowest turns at N={top}, ms after end of speech", *header], rows)
        seconds = args.minutes * 60 if args.minutes else args.seconds
        samples = await churn(server, runtime, voices, seconds, args.churn_sessions,
                              args.churn_turns)
    finally:
        await server.shutdown()
        gc.callbacks.remove(full_gcs)
    report.line(f"full garbage collections during the run "
                f"({'frozen' if args.gc_freeze else 'unfrozen'} heap): {len(full_gcs.pauses_s)}, "
                f"longest {_ms(max(full_gcs.pauses_s, default=None))}")
    runtime.check_engine()
    final = runtime.engine_stats()
    report.table(["t (s)", "RSS (MiB)", "pages used", "sessions", "largest context",
                  "unowned sequences"],
                 [[f"{t:.0f}", f"{r:.0f}", p, s, c, u] for t, r, p, s, c, u in samples])
    rss = [sample[1] for sample in samples]
    if rss:
        half = rss[len(rss) // 2:]
        report.line(f"RSS: start {rss[0]:.0f} MiB, max {max(rss):.0f} MiB, end {rss[-1]:.0f} "
                    f"MiB; second half {min(half):.0f}-{max(half):.0f} MiB")
        report.line(f"pages used: max {max(s[2] for s in samples)} of "
                    f"{runtime.cfg.engine.num_pages}; largest context "
                    f"{max(s[4] for s in samples)} tokens; unowned sequences max "
                    f"{max(s[5] for s in samples)}")
    report.line(f"engine at the end: {final}")
    leak = final["pages_used"] != 0 or final["sequences"] != 0
    report.line("pages: OK (all free or cached, check() holds)" if not leak else "pages: LEAK")
    if not args.no_write:
        write_results("serve-soak" if args.minutes else "serve", report.blocks,
                      command=sys.orig_argv)
    return 1 if leak else 0


def stage_row(n: int, turns: int, wall: float, spent: dict[str, StageTotals]) -> list[object]:
    per = max(1, turns)
    busy = sum(spent[s].seconds for s in STAGES)
    return [n, *(f"{1000 * spent[s].seconds / per:.0f} ms" for s in STAGES),
            f"{spent['decodes'].calls / per:.1f}", f"{busy / wall:.2f}" if wall else "-"]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config")
    p.add_argument("--sessions", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 4, 8], help="concurrency levels (default 1,4,8)")
    p.add_argument("--turns", type=int, default=2,
                   help="questions per session for N > 1 (default 2); the N=1 peer asks each "
                        f"of the {len(QUESTIONS)} questions --alone-rounds times")
    p.add_argument("--alone-rounds", type=int, default=3, metavar="R",
                   help="the N=1 peer asks every question R times (default 3); a question's "
                        "time alone is the median of its R")
    p.add_argument("--stagger", type=float, default=0.0, metavar="S",
                   help="spread the sessions' first questions evenly over S seconds (default "
                        "0: all at once, each turn a burst; ~6 s, about one turn, is users "
                        "talking independently)")
    p.add_argument("--seconds", type=float, default=60.0, help="churn phase length (default 60)")
    p.add_argument("--minutes", type=float, default=0.0, help="churn phase in minutes (soak)")
    p.add_argument("--churn-sessions", type=int, default=4, help="sessions at a time in churn")
    p.add_argument("--churn-turns", type=int, default=1,
                   help="questions each churning session asks before it leaves (default 1)")
    p.add_argument("--num-pages", type=int, default=0,
                   help="engine.num_pages for this run (default: the config's)")
    p.add_argument("--max-tokens", type=int, default=40, help="llm.max_new_tokens (default 40)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for this run, e.g. asr.window_s=0 (repeatable)")
    p.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false",
                   help="do not freeze the heap after loading: the models stay in every "
                        "full garbage collection (as before assistant/app/heap.py)")
    p.add_argument("--phase-limit", type=float, default=240.0,
                   help="give up on a concurrency level after this many seconds")
    add_no_write(p)
    args = p.parse_args()
    if not 1 <= args.alone_rounds <= 5:
        p.error("--alone-rounds must be 1-5")
    if max(args.sessions) > 16 or args.turns > 10 or args.churn_turns > 100 or (args.minutes or args.seconds / 60) > 60:
        p.error("bounded benchmark: at most 16 sessions, 10 turns, 60 minutes")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
