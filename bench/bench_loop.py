"""Benchmark the live loop: ``--realtime`` replays of one recorded conversation on this CPU.

Not a test: prints a table. Measures, on the wall clock, with the real models:

- voice-to-voice latency (end of user speech -> first assistant audio), p50 / p95, with
  the semantic end of turn (the default), the fixed 550 ms rule, and speculation off
  (the peer: the same loop without speculative pre-generation);
- a per-turn waterfall: when each stage happened after the end of speech (pause
  detected, speculation started, end-of-turn score, first clause drafted / synthesised,
  end of turn decided, final transcript, reply started, first audio), p50 per config;
- endpoint-to-first-audio on speculation hits (end of turn detected -> first audio;
  target <= 150 ms);
- barge-in detection -> playback stopped, and audio leaked after detection
  (target: within one output buffer, <= 30 ms).

    .venv/bin/python bench/bench_loop.py [--questions N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from assistant.app.config import AppConfig, default_config_path, load_config
from assistant.app.report import format_table
from assistant.loop import event_log as log
from assistant.loop.metrics import Metrics, percentile
from assistant.loop.setup import LoopModels, load_models
from assistant.loop.waterfall import STAGES, Waterfall, waterfalls
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
STORY = "Tell me a story about a brave little dragon."

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


def ms(values: tuple[int, ...], q: float) -> str:
    v = percentile(values, q)
    return "-" if v is None else f"{v:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--keep", type=Path, default=None, help="keep the input WAV here")
    parser.add_argument("--slow-endpoint-ms", type=int, default=0,
                        help="also run with this end-of-turn silence (0: skip)")
    parser.add_argument("--only-slow", action="store_true",
                        help="run only the longer end-of-turn configuration")
    parser.add_argument("--partial-interval-ms", type=int, default=None,
                        help="override asr.partial_interval_ms (display partials cost ASR "
                             "time that previews and finals then wait for)")
    args = parser.parse_args()
    base = load_config(default_config_path(), env={})
    print("loading models ...", file=sys.stderr)
    models = load_models(base)
    with tempfile.TemporaryDirectory() as tmp:
        wav = (args.keep or Path(tmp)) / "bench_loop_input.wav"
        wav.parent.mkdir(parents=True, exist_ok=True)
        build_input(models, args.questions, wav)
        results: dict[str, Metrics] = {}
        breakdown: dict[str, Stages] = {}
        falls: dict[str, list[Waterfall]] = {}
        configs: list[tuple[str, dict[str, object]]] = []
        if not args.only_slow:
            configs += [
                ("semantic end of turn", {"vad.end_of_turn": "semantic"}),
                ("fixed 550 ms", {"vad.end_of_turn": "fixed"}),
                ("speculation off", {"turns.speculate": False}),
            ]
        if args.slow_endpoint_ms:
            # On a loaded CPU the pause-time ASR decode can outlast the 350 ms between the
            # short pause and the end of turn; a longer end of turn shows the hit path.
            configs.append((f"fixed {args.slow_endpoint_ms} ms", {
                "vad.end_of_turn": "fixed", "vad.end_of_turn_ms": args.slow_endpoint_ms}))
        for name, overrides in configs:
            if args.partial_interval_ms is not None:
                overrides = {**overrides, "asr.partial_interval_ms": args.partial_interval_ms}
            cfg = load_config(default_config_path(), env={}, overrides=overrides)
            print(f"replaying in real time: {name} ...", file=sys.stderr)
            metrics, st, wf, secs = run_once(models, cfg, wav)
            print(f"  {secs:.1f} s wall", file=sys.stderr)
            results[name] = metrics
            breakdown[name] = st
            falls[name] = wf
    hit_endpoint = tuple(t.endpoint_to_audio_ms for m in results.values() for t in m.turns
                         if t.speculation == "hit" and t.endpoint_to_audio_ms is not None)
    buffer_ms = base.audio.output_buffer_ms
    rows = []
    for name, m in results.items():
        rows.append([f"voice-to-voice ({name})", ms(m.voice_to_voice_ms, 50),
                     ms(m.voice_to_voice_ms, 95), len(m.voice_to_voice_ms), "-"])
        rows.append([f"endpoint-to-audio ({name})", ms(m.endpoint_to_audio_ms, 50),
                     ms(m.endpoint_to_audio_ms, 95), len(m.endpoint_to_audio_ms), "-"])
    rows.append(["endpoint-to-audio on speculation hits", ms(hit_endpoint, 50),
                 ms(hit_endpoint, 95), len(hit_endpoint), "<= 150"])
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
    print(format_table(["measure (ms, wall clock)", "p50", "p95", "n", "target"], rows))
    print()
    print(format_table(["waterfall, p50 ms after end of speech"] + list(falls),
                       [[stage] + [ms(tuple(v for w in wf if (v := getattr(w, stage))
                                             is not None), 50) for wf in falls.values()]
                        for stage in STAGES]))
    on, off = results.get("semantic end of turn"), results.get("speculation off")
    p_on = percentile(on.voice_to_voice_ms, 50) if on else None
    p_off = percentile(off.voice_to_voice_ms, 50) if off else None
    if p_on and p_off:
        print(f"\nvoice-to-voice p50, semantic end of turn with speculation / without "
              f"speculation: {p_on / p_off:.2f}x")
    for name, m in results.items():
        rate = "-" if m.speculation_hit_rate is None else f"{100 * m.speculation_hit_rate:.0f}%"
        print(f"{name}: speculation {m.speculation_hits} hits / {m.speculation_misses} misses "
              f"({rate}); engine vs history {m.sequence_tokens}/{m.history_tokens} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
