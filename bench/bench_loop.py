"""Benchmark the live loop: ``--realtime`` replays of one recorded conversation on this CPU.

Not a test: prints a table. Measures, on the wall clock, with the real models:

- voice-to-voice latency (end of user speech -> first assistant audio), p50 / p95, with
  the semantic end of turn (the default), the fixed 550 ms rule, and speculation off
  (the peer: the same loop without speculative pre-generation); optionally the semantic
  end of turn on the engine in other weight formats (``--weights bf16``) or another
  Whisper window (``--asr-window-s 0``: the stock 30 s one);
- a per-turn waterfall: when each stage happened after the end of speech (pause
  detected, speculation started, end-of-turn score, first clause drafted / synthesised,
  end of turn decided, final transcript, reply started, first audio), p50 per config;
- endpoint-to-first-audio on speculation hits (end of turn detected -> first audio;
  target <= 150 ms);
- barge-in detection -> playback stopped, and audio leaked after detection
  (target: within one output buffer, <= 30 ms).

With ``--interruptions``: sounds over a reply instead, replayed for ``turns.interruption``
``tentative`` and the ``immediate`` baseline (virtual clock unless ``--realtime``):
backchannels and coughs/clicks (a stop is a false stop; target <= 5%), real
interruptions (stopped within one buffer, committed how long after the speech began and
whether before it ended, the answer's voice-to-voice), the gap heard on a resume, and
engine sequence == history after every case.

    .venv/bin/python bench/bench_loop.py [--questions N] [--keep DIR] [--weights bf16]
        [--pause-onset-ms 0] [--compare tts.first_clause_priority=false]
    .venv/bin/python bench/bench_loop.py --interruptions [--realtime] [--interim-every-ms 100]
        [--compare turns.pause_priority=false] [--no-baseline]
    .venv/bin/python bench/bench_loop.py --human [--compare vad.smart_turn_wait_ms=800]

With ``--human``: the 11 recordings of real human speech that issue #47's target is set
on (``bench/loop_human.py``), each its own conversation, in real time, for the same
configurations; writes ``loop-human.md``. ``--human-set other``: held-out voices of the
same source, never tuned on (other speakers and rates, a meeting's turns); writes
``loop-human-other.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import cpu_mask
from human_speech import SETS, human_recordings
from loop_human import ROOM_DBFS, human_report, run_all, stage_rows
from loop_interruptions import STORY, interruption_bench
from results import Report, add_no_write, write_results
from results import percentile_ms as ms
from serve_falls import p50_rows

from assistant.app.config import AppConfig, default_config_path, load_config, parse_override
from assistant.loop import event_log as log
from assistant.loop.metrics import Metrics, percentile
from assistant.loop.setup import LoopModels, load_models
from assistant.loop.waterfall import Waterfall, waterfalls
from assistant.replay.run import ReplayOptions, replay_sync
from assistant.replay.scenario import Say, render_scenario
from audio.wav import write_wav

QUESTIONS = (
    "What is the capital of France?",
    "What colour is the sky?",
    "Name a big animal.",
    "What do bees make?",
    "What is the opposite of hot?",
    "Which planet do we live on?",
)

ROOM_MS = 6000
"""Gap after each question: time for the (real-time) reply to play out."""


def build_input(models: LoopModels, n_questions: int, path: Path) -> None:
    parts = [Say(q, gap_ms=0 if i == 0 else ROOM_MS) for i, q in enumerate(QUESTIONS[:n_questions])]
    # Two barge-ins: a story interrupted ~2 s into the reply (allowing ~1.5 s of latency).
    for _ in range(2):
        parts.append(Say(STORY, gap_ms=ROOM_MS))
        parts.append(Say("Stop, please.", gap_ms=550 + 1500 + 2000))
    scenario = render_scenario(parts, models.synthesizer, tail_ms=3000)
    write_wav(path, scenario.pcm, scenario.sample_rate)


@dataclass
class Stages:
    """Per-turn stage latencies (ms) from the event log."""

    asr_final: list[int] = field(default_factory=list)
    """End of turn detected -> final transcript."""
    to_response: list[int] = field(default_factory=list)
    """Final transcript -> reply prompt in the cache (engine queue + prefill)."""
    to_audio: list[int] = field(default_factory=list)
    """Reply started -> first audio (first clause generated and synthesised)."""


def stages(entries: list[log.Entry]) -> Stages:
    out = Stages()
    stop_t: int | None = None
    final_t: int | None = None
    started: dict[int, int] = {}
    for e in entries:
        if isinstance(e, log.SpeechStoppedEntry) and not e.discarded:
            stop_t = e.t_ms
        elif isinstance(e, log.TranscriptFinalEntry) and stop_t is not None:
            out.asr_final.append(e.t_ms - stop_t)
            final_t, stop_t = e.t_ms, None
        elif isinstance(e, log.ResponseStartedEntry):
            started[e.turn_id] = e.t_ms
            if final_t is not None:
                out.to_response.append(e.t_ms - final_t)
                final_t = None
        elif isinstance(e, log.AudioStartedEntry) and e.turn_id in started:
            out.to_audio.append(e.t_ms - started[e.turn_id])
    return out


def run_once(models: LoopModels, cfg: AppConfig, wav: Path
             ) -> tuple[Metrics, Stages, list[Waterfall], float]:
    t0 = time.perf_counter()
    outcome = replay_sync(models, cfg, wav, ReplayOptions(realtime=True))
    entries = outcome.result.entries
    return (outcome.result.metrics, stages(entries), waterfalls(entries),
            time.perf_counter() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--keep", type=Path, default=None, help="keep the input WAV here")
    parser.add_argument("--slow-endpoint-ms", type=int, default=0,
                        help="also run with this end-of-turn silence (0: skip)")
    parser.add_argument("--only-slow", action="store_true",
                        help="run only the longer end-of-turn configuration")
    parser.add_argument("--short-pause-ms", type=int, default=0,
                        help="also run the semantic end of turn with this short pause (0: skip)")
    parser.add_argument("--pause-onset-ms", type=int, default=None,
                        help="also run the semantic end of turn with this vad.pause_onset_ms "
                             "(0: a pause's transcript decodes only when the pause counts)")
    parser.add_argument("--interruptions", action="store_true",
                        help="the interruption set (backchannels, noises, real interruptions)")
    parser.add_argument("--realtime", action="store_true",
                        help="with --interruptions: replay in real time (default: virtual clock)")
    parser.add_argument("--partial-interval-ms", type=int, default=None,
                        help="override asr.partial_interval_ms (display partials cost ASR "
                             "time that previews and finals then wait for)")
    parser.add_argument("--asr-window-s", type=float, default=None,
                        help="also run the semantic end of turn with this asr.window_s "
                             "(0: Whisper's stock 30 s window)")
    parser.add_argument("--interim-every-ms", type=lambda v: [int(x) for x in v.split(",")],
                        default=[], metavar="MS",
                        help="with --interruptions: also run tentative with these "
                             "turns.interim_every_ms (comma-separated)")
    parser.add_argument("--compare", type=parse_override, action="append", default=[],
                        metavar="SECTION.KEY=VALUE",
                        help="also run the semantic end of turn (with --interruptions: "
                             "tentative) with this config override, on the same models (a "
                             "per-conversation setting, e.g. tts.first_clause_priority=false "
                             "or turns.pause_priority=false; repeatable)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="with --interruptions: skip the immediate baseline (to compare "
                             "tentative settings in less time)")
    parser.add_argument("--weights", type=lambda v: [f for f in v.split(",") if f],
                        default=[], metavar="FORMATS",
                        help="also run the semantic end of turn on the engine loaded in "
                             "these weight formats (comma-separated: fp32,bf16,int8,int4)")
    parser.add_argument("--warmup", type=int, default=2, metavar="N",
                        help="replay N questions first, untimed, on each set of models (0: "
                             "none): a process's first replay also warms the models up and "
                             "measured ~200 ms slower per turn, so the first configuration "
                             "lost to the others")
    parser.add_argument("--human", action="store_true",
                        help="recordings of real human speech (bench/human_speech.py: "
                             "fetched once from the pocketsphinx sdist), each its own "
                             "conversation, in real time")
    parser.add_argument("--human-set", choices=sorted(SETS), default="issue47",
                        help="with --human: issue47, the 11 the target is set on (writes "
                             "loop-human.md), or other, held-out voices never tuned on "
                             "(writes loop-human-other.md)")
    parser.add_argument("--human-cache", type=Path, default=None,
                        help="with --human: where the recordings are kept (default: "
                             "human-speech beside the converted weights, models.cache_dir "
                             "or $XDG_CACHE_HOME/assistant)")
    parser.add_argument("--human-gap-ms", type=int, default=0, metavar="MS",
                        help="with --human: one conversation, the recordings MS apart "
                             "(default 0: each recording its own conversation)")
    parser.add_argument("--human-noise-dbfs", type=float, default=ROOM_DBFS, metavar="DBFS",
                        help="with --human: white room noise under the recordings at this "
                             "level (default %(default)s; their own floors are -43 to -60); "
                             "another level writes loop-human-noise<N>dbfs.md")
    parser.add_argument("--sdist", type=Path, default=None,
                        help="with --human: a copy of the pocketsphinx 5.1.1 sdist on disk "
                             "instead of fetching it")
    add_no_write(parser)
    cpu_mask.add_argument(parser)
    args = parser.parse_args()
    cpu_mask.relaunch(args.as_cpu)
    base = load_config(default_config_path(), env={})
    # Every set of models is closed at the end: left open (the engine's thread running)
    # they made nanobind print a leak report for a soxr resampler at exit.
    with contextlib.ExitStack() as opened:
        return _bench(args, base, opened)


def _human(args: argparse.Namespace, models: LoopModels,
           configs: list[tuple[str, dict[str, object]]]) -> int:
    """``--human``: recordings of real speech (a set of :data:`SETS`), each its own
    conversation."""
    recordings = human_recordings(args.human_cache, args.sdist, args.human_set)
    runs = [(name, load_config(default_config_path(), env={}, overrides=overrides))
            for name, overrides in configs + [(f"semantic, {k}={v}", {k: v})
                                              for k, v in args.compare]]
    if not runs:
        print("error: --human with --only-slow needs a --compare to run", file=sys.stderr)
        return 2
    if args.warmup > 0:
        with tempfile.TemporaryDirectory() as tmp:
            warm = Path(tmp) / "bench_loop_warmup.wav"
            build_input(models, args.warmup, warm)
            print("warming up (untimed) ...", file=sys.stderr)
            run_once(models, runs[0][1], warm)
    print(f"replaying {len(recordings)} recordings in real time, {len(runs)} "
          "configurations alternating ...", file=sys.stderr)
    noise = args.human_noise_dbfs
    report = human_report(run_all(models, runs, recordings, args.human_gap_ms, noise),
                          recordings)
    if not args.no_write:
        suffix = "" if args.human_set == "issue47" else f"-{args.human_set}"
        suffix += "" if noise == ROOM_DBFS else f"-noise{abs(noise):g}dbfs"
        write_results("loop-human" + suffix, report.blocks, command=sys.orig_argv)
    return 0


def _bench(args: argparse.Namespace, base: AppConfig, opened: contextlib.ExitStack) -> int:
    print("loading models ...", file=sys.stderr)
    # The interruption set compares modes on the same audio: Piper without its noise.
    models = load_models(base, deterministic_tts=args.interruptions)
    opened.callback(models.close)
    if args.interruptions:
        report = interruption_bench(models, args.realtime, tuple(args.interim_every_ms),
                                    tuple(args.compare), baseline=not args.no_baseline)
        if not args.no_write:
            write_results("loop-interruptions" + ("-realtime" if args.realtime else ""),
                          report.blocks, command=sys.orig_argv)
        return 0
    configs: list[tuple[str, dict[str, object]]] = []
    if not args.only_slow:
        configs += [
            ("semantic end of turn", {"vad.end_of_turn": "semantic"}),
            ("fixed 550 ms", {"vad.end_of_turn": "fixed"}),
            ("speculation off", {"turns.speculate": False}),
        ]
    if args.human:
        return _human(args, models, configs)
    with tempfile.TemporaryDirectory() as tmp:
        wav = (args.keep or Path(tmp)) / "bench_loop_input.wav"
        wav.parent.mkdir(parents=True, exist_ok=True)
        build_input(models, args.questions, wav)
        results: dict[str, Metrics] = {}
        breakdown: dict[str, Stages] = {}
        falls: dict[str, list[Waterfall]] = {}
        if args.pause_onset_ms is not None:
            configs.append((f"semantic, pause onset {args.pause_onset_ms} ms",
                            {"vad.pause_onset_ms": args.pause_onset_ms}))
        for key, value in args.compare:
            configs.append((f"semantic, {key}={value}", {key: value}))
        if args.short_pause_ms:
            configs.append((f"semantic, short pause {args.short_pause_ms} ms",
                            {"vad.short_pause_ms": args.short_pause_ms}))
        if args.slow_endpoint_ms:
            # On a loaded CPU the pause-time ASR decode can outlast the 350 ms between the
            # short pause and the end of turn; a longer end of turn shows the hit path.
            configs.append((f"fixed {args.slow_endpoint_ms} ms", {
                "vad.end_of_turn": "fixed", "vad.end_of_turn_ms": args.slow_endpoint_ms}))
        runs: list[tuple[str, dict[str, object], LoopModels]] = [
            (name, overrides, models) for name, overrides in configs]
        # The same semantic configuration with settings fixed when the models load (the
        # transcriber's window, the engine's weight format): each with its own models.
        loaded: list[tuple[str, dict[str, object]]] = []
        if args.asr_window_s is not None:
            loaded.append((f"semantic, {args.asr_window_s:g} s ASR window",
                           {"asr.window_s": args.asr_window_s}))
        loaded += [(f"semantic, {fmt} weights", {"engine.weights": fmt}) for fmt in args.weights]
        for name, overrides in loaded:
            print(f"loading the models for {name} ...", file=sys.stderr)
            own = load_models(load_config(default_config_path(), env={},
                                          overrides=overrides))
            opened.callback(own.close)
            runs.append((name, overrides, own))
        if args.warmup > 0:
            warm = wav.with_name("bench_loop_warmup.wav")
            build_input(models, args.warmup, warm)
            for run_models in {id(r[2]): r[2] for r in runs}.values():
                print("warming up (untimed) ...", file=sys.stderr)
                run_once(run_models, base, warm)
        for name, overrides, run_models in runs:
            if args.partial_interval_ms is not None:
                overrides = {**overrides, "asr.partial_interval_ms": args.partial_interval_ms}
            cfg = load_config(default_config_path(), env={}, overrides=overrides)
            print(f"replaying in real time: {name} ...", file=sys.stderr)
            metrics, st, wf, secs = run_once(run_models, cfg, wav)
            print(f"  {secs:.1f} s wall", file=sys.stderr)
            results[name] = metrics
            breakdown[name] = st
            falls[name] = wf
    buffer_ms = base.audio.output_buffer_ms
    rows = []
    for name, m in results.items():
        rows.append([f"voice-to-voice ({name})", ms(m.voice_to_voice_ms, 50),
                     ms(m.voice_to_voice_ms, 95), len(m.voice_to_voice_ms), "-"])
        rows.append([f"endpoint-to-audio ({name})", ms(m.endpoint_to_audio_ms, 50),
                     ms(m.endpoint_to_audio_ms, 95), len(m.endpoint_to_audio_ms), "-"])
        # Per configuration: a late end of turn (fixed 550 ms) finds a hit's first clause
        # long synthesised, so pooling configurations would flatter the earlier ones.
        hits = tuple(t.endpoint_to_audio_ms for t in m.turns
                     if t.speculation == "hit" and t.endpoint_to_audio_ms is not None)
        if hits:
            rows.append([f"  endpoint-to-audio on speculation hits ({name})", ms(hits, 50),
                         ms(hits, 95), len(hits), "<= 150"])
    stops = tuple(v for m in results.values() for v in m.barge_in_stop_ms)
    leaks = tuple(v for m in results.values() for v in m.leaked_audio_ms)
    rows.append(["barge-in detection -> playback stopped", ms(stops, 50), ms(stops, 95),
                 len(stops), f"<= {buffer_ms}"])
    rows.append(["audio leaked after barge-in detection", ms(leaks, 50), ms(leaks, 95),
                 len(leaks), "<= 30"])
    for name, st in breakdown.items():
        for label, values in (("  end of turn -> final transcript", st.asr_final),
                              ("  final transcript -> reply started", st.to_response),
                              ("  reply started -> first audio", st.to_audio)):
            vals = tuple(values)
            rows.append([f"{label} ({name})", ms(vals, 50), ms(vals, 95), len(vals), "-"])
    report = Report()
    report.table(["measure (ms, wall clock)", "p50", "p95", "n", "target"], rows)
    report.line()
    report.table(["waterfall, p50 ms after end of speech"] + list(falls), p50_rows(falls))
    # The slowest three answered turns of the default configuration, stage by stage.
    first = "semantic end of turn" if "semantic end of turn" in falls else next(iter(falls), "")
    default = falls.get(first, [])
    slowest = sorted((w for w in default if w.first_audio is not None),
                     key=lambda w: -(w.first_audio or 0))[:3]
    if slowest:
        said = {t.turn_id: t.user_text for t in results[first].turns}
        report.line()
        report.table(["slowest turns, ms after end of speech"]
                     + [f"turn {w.turn_id} ({w.speculation}): {said.get(w.turn_id, '')!r}"
                        for w in slowest],
                     stage_rows(slowest))
    on, off = results.get("semantic end of turn"), results.get("speculation off")
    p_on = percentile(on.voice_to_voice_ms, 50) if on else None
    p_off = percentile(off.voice_to_voice_ms, 50) if off else None
    if p_on and p_off:
        report.line(f"\nvoice-to-voice p50, semantic end of turn with speculation / without "
                    f"speculation: {p_on / p_off:.2f}x")
    for name, m in results.items():
        rate = "-" if m.speculation_hit_rate is None else f"{100 * m.speculation_hit_rate:.0f}%"
        report.line(f"{name}: speculation {m.speculation_hits} hits / {m.speculation_misses} "
                    f"misses ({rate}); engine vs history {m.sequence_tokens}/"
                    f"{m.history_tokens} tokens")
    if not args.no_write:
        write_results("loop", report.blocks, command=sys.orig_argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
