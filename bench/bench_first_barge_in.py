"""Barge-in in the first second of the first reply: how soon the reply falls silent.

A session's first question, then a second speaker talking over the first reply about a
second into it (``--into-ms``, as people do: "no, not that"). The echo gate has not yet
decided whether the speaker reaches the microphone then, so until it does it drops the
user's frames that are not 10 dB over the reply, and the reply paused only after 200 ms
of voiced speech got through. Two settings, side by side on the same audio and models:

- before: the gate decides "no echo" after ~1.5 s of playback only
  (``echo.stand_down_probe_ms=0``), and speech over the reply must be voiced for
  ``turns.barge_in_min_ms`` to pause it (``turns.pause_at_onset=false``);
- after (the defaults): the gate decides a few hundred ms into the reply's speech, and
  speech that cannot be the echo pauses the reply at its onset.

Each on two paths: a headset (no echo) and a speaker whose echo reaches the microphone
(``--echo-db``, 30 ms late), in quiet and in a -45 dBFS room. Reported per setting and
path: the reply paused after the user began (p50 / max over the interruptions), fell
silent (pause plus the audio still in the buffer), whether any reply paused or cut
itself before the user spoke (its own echo), and whether the cut stood.

    .venv/bin/python bench/bench_first_barge_in.py [--into-ms 1000] [--echo-db -6] [--realtime]

Virtual clock by default: the rule's own delays, the same on every machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results import Report, add_no_write, write_results

from assistant.app.config import AppConfig, default_config_path, load_config
from assistant.loop import event_log as log
from assistant.loop.metrics import percentile
from assistant.loop.setup import LoopModels, load_models
from assistant.replay.run import ReplayOptions, replay_sync
from assistant.replay.scenario import Say, espeak_available, render_scenario
from audio.wav import write_wav

QUESTION = "Tell me about the weather tomorrow."
INTERRUPTIONS = ("No, not that.", "Stop, please.", "Wait, what about cats?")
SETTINGS = {
    "before": {"echo.stand_down_probe_ms": 0, "turns.pause_at_onset": False},
    "after": {},
}


@dataclass(frozen=True)
class AudioPath:
    name: str
    echo_db: float | None
    noise_dbfs: float


@dataclass
class Outcome:
    paused_ms: int | None
    """From the user's first sound to the reply's pause (or cut)."""
    silent_ms: int | None
    """... to the reply's last sample heard."""
    self_stopped: bool
    """The reply paused or was cut before the user spoke."""
    cut: bool
    into_ms: int | None
    """How far into the first reply's audio the user began."""


def reply_start_ms(models: LoopModels, cfg: AppConfig, path: AudioPath, tmp: Path) -> int:
    """When the first reply's audio starts after the question ends (virtual clock)."""
    scenario = render_scenario([Say(QUESTION)], models.synthesizer, tail_ms=4000,
                               noise_floor_dbfs=path.noise_dbfs)
    entries = _replay(models, cfg, scenario, path, tmp, realtime=False)
    started = next(e.t_ms for e in entries if isinstance(e, log.AudioStartedEntry))
    return started - scenario.placed[0].end_ms


def _replay(models: LoopModels, cfg: AppConfig, scenario: Any, path: AudioPath, tmp: Path,
            realtime: bool) -> list[log.Entry]:
    wav = tmp / "first_barge_in.wav"
    write_wav(wav, scenario.pcm, scenario.sample_rate)
    outcome = replay_sync(models, cfg, wav, ReplayOptions(
        realtime=realtime, echo_loopback_db=path.echo_db, echo_delay_ms=30))
    return list(outcome.result.entries)


def run_case(models: LoopModels, cfg: AppConfig, text: str, voice: str, path: AudioPath,
             lead_ms: int, peak_dbfs: float, tmp: Path, realtime: bool) -> Outcome:
    """``lead_ms``: the user begins this long after the question ends."""
    said = Say(text, gap_ms=lead_ms, voice=voice, peak_dbfs=peak_dbfs)  # type: ignore[arg-type]
    scenario = render_scenario([Say(QUESTION), said],
                               models.synthesizer, tail_ms=4000,
                               noise_floor_dbfs=path.noise_dbfs)
    entries = _replay(models, cfg, scenario, path, tmp, realtime)
    start = scenario.placed[1].start_ms
    stops = [e for e in entries
             if isinstance(e, (log.InterruptionPausedEntry, log.PlaybackStoppedEntry))]
    early = [e for e in stops if e.t_ms < start]
    late = [e for e in stops if e.t_ms >= start]
    first = late[0] if late else None
    return Outcome(
        paused_ms=None if first is None else first.t_ms - start,
        silent_ms=None if first is None else first.t_ms + first.leaked_ms - start,
        self_stopped=bool(early),
        cut=any(isinstance(e, (log.InterruptionCommittedEntry, log.BargeInEntry))
                and e.t_ms >= start for e in entries),
        into_ms=next((start - e.t_ms for e in entries if isinstance(e, log.AudioStartedEntry)),
                     None))


def _ms(values: list[int]) -> str:
    if not values:
        return "-"
    return f"{percentile(values, 50):.0f} / {max(values)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--into-ms", type=int, default=1000,
                        help="how far into the first reply the user begins (ms)")
    parser.add_argument("--echo-db", type=float, default=-6.0,
                        help="the speaker path's echo level relative to the reply (dB)")
    parser.add_argument("--user-peak-dbfs", type=float, default=-20.0,
                        help="the interrupting speaker's peak level; the reply plays at "
                             "ReplayOptions.output_gain_db (-20 dB) under the voice's own, "
                             "so -20 is a talker at the reply's level, -1 one far louder")
    parser.add_argument("--realtime", action="store_true", help="replay in real time")
    add_no_write(parser)
    args = parser.parse_args()
    base = load_config(default_config_path(), env={})
    cfgs = {name: load_config(default_config_path(), env={},
                              overrides={**overrides, "llm.max_new_tokens": 60})
            for name, overrides in SETTINGS.items()}
    paths = [AudioPath("headset", None, -65.0), AudioPath("headset, room -45 dBFS", None, -45.0),
             AudioPath(f"speaker, echo {args.echo_db:+.0f} dB", args.echo_db, -65.0),
             AudioPath(f"speaker, echo {args.echo_db:+.0f} dB, room -45 dBFS", args.echo_db, -45.0)]
    voices = ["piper"] + (["espeak"] if espeak_available() else [])
    print("loading models ...", file=sys.stderr)
    models = load_models(base, deterministic_tts=True)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for path in paths:
                results: dict[str, list[Outcome]] = {name: [] for name in cfgs}
                leads = {name: reply_start_ms(models, cfg, path, Path(tmp)) + args.into_ms
                         for name, cfg in cfgs.items()}
                for voice in voices:
                    for text in INTERRUPTIONS:
                        for name, cfg in cfgs.items():  # alternating: drift hits both alike
                            print(f"{path.name}, {voice}: {text} ({name}) ...", file=sys.stderr)
                            results[name].append(run_case(models, cfg, text, voice, path,
                                                          leads[name], args.user_peak_dbfs,
                                                          Path(tmp), args.realtime))
                for name, res in results.items():
                    paused = [r.paused_ms for r in res if r.paused_ms is not None]
                    silent = [r.silent_ms for r in res if r.silent_ms is not None]
                    into = [r.into_ms for r in res if r.into_ms is not None]
                    rows.append([path.name, name, _ms(into), f"{len(paused)}/{len(res)}",
                                 _ms(paused),
                                 _ms(silent), f"{sum(r.self_stopped for r in res)}/{len(res)}",
                                 f"{sum(r.cut for r in res)}/{len(res)}"])
    finally:
        models.close()
    clock = "wall clock" if args.realtime else "virtual clock"
    report = Report()
    report.line(f"barge-in {args.into_ms} ms into the first reply ({clock}; voices: "
                f"{', '.join(voices)}; {len(INTERRUPTIONS)} interruptions each, peaks at "
                f"{args.user_peak_dbfs:.0f} dBFS)")
    report.table(["path", "setting", "user began into the reply p50 / max ms",
                  "reply paused", "paused after the user began "
                  "p50 / max ms", "silent after p50 / max ms",
                  "stopped itself before the user spoke", "cut stood"], rows)
    if not args.no_write:
        # One file per interrupter level and clock: the two tables docs/benchmarks.md shows.
        name = ("first-barge-in" + ("-realtime" if args.realtime else "")
                + ("" if args.user_peak_dbfs == -20.0 else f"-user{args.user_peak_dbfs:+g}dbfs"))
        write_results(name, report.blocks, command=sys.orig_argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
