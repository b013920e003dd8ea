"""Smart Turn v3.2's P(complete) against the silence after the speech, on the end-of-turn set.

Not a test: prints a table. The loop asks the audio model once per pause, at the VAD's
short pause (``vad.short_pause_ms``, 200 ms of silence), as pipecat does. This bench asks
what it would say later in the same silence, on bench/bench_turns.py's speech (its voices,
its short requests and sentences, and the same sentences cut mid-way by a 900 ms pause):

- complete requests and sentences called complete (P >= 0.5) at each silence: a turn
  the audio model calls unfinished waits ``vad.smart_turn_wait_ms``;
- cut sentences called complete: a pause the audio model no longer guards.

    .venv/bin/python bench/bench_smart_turn.py [--silences 200,300,400,600,800]
        [--half all|tune|held-out]

A second look later in the pause would only pay if the first row rose and the second did
not; both rise (docs/benchmarks.md, End of turn).
"""

from __future__ import annotations

import argparse
import sys

from bench_turns import HALVES, SENTENCES, SHORT, cut_sentence, speak, voices
from results import Report, add_no_write, write_results

from assistant.app.config import default_config_path, load_config
from assistant.loop.setup import load_models
from assistant.replay.scenario import Say
from assistant.replay.splice import word_gap_ms
from audio.smart_turn import COMPLETE_P

CUT_PAUSE_MS = 900


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--silences", default="200,300,400,600,800",
                   help="silence after the speech at which the model is asked (ms)")
    p.add_argument("--half", choices=tuple(HALVES), default="all",
                   help="bench_turns.py's halves: even-numbered entries (tune), odd ones")
    add_no_write(p)
    args = p.parse_args()
    silences = [int(x) for x in args.silences.split(",")]
    if not silences or max(silences) >= CUT_PAUSE_MS or min(silences) <= 0:
        p.error(f"--silences must lie between 0 and the cut's pause ({CUT_PAUSE_MS} ms)")
    keep = HALVES[args.half]
    cfg = load_config(default_config_path(), env={}, overrides={"vad.smart_turn": True})
    print("loading models ...", file=sys.stderr)
    models = load_models(cfg, deterministic_tts=True)
    model = models.end_model
    if model is None:
        print("no Smart Turn model (models.smart_turn)", file=sys.stderr)
        return 1
    called: dict[str, list[list[bool]]] = {"complete": [], "cut": []}

    def ask(kind: str, pcm: object, end_ms: int) -> None:
        ps = [model.p_complete(pcm[:(end_ms + s) * 16])  # type: ignore[index]
              for s in silences]
        called[kind].append([x >= COMPLETE_P for x in ps])
        print(f"  {kind}: " + " ".join(f"{x:.2f}" for x in ps), file=sys.stderr)

    for voice in voices(models, cfg):
        for i, text in enumerate(SHORT):
            if i % 2 in keep:
                short = speak(models, voice, [Say(text)])
                ask("complete", short.pcm, short.said()[0].end_ms)
        for i, (head, tail) in enumerate(SENTENCES):
            if i % 2 not in keep:
                continue
            whole = speak(models, voice, [Say(f"{head} {tail}")])
            ask("complete", whole.pcm, whole.said()[0].end_ms)
            at = word_gap_ms(models.transcriber, whole, head)
            cut = cut_sentence(models, voice, whole, head, tail, at, CUT_PAUSE_MS)
            ask("cut", cut.pcm, cut.said()[0].end_ms)
        print(f"{voice.name} done", file=sys.stderr, flush=True)

    def share(kind: str, k: int) -> str:
        rows = called[kind]
        n = sum(r[k] for r in rows)
        return f"{n}/{len(rows)} ({100 * n / len(rows):.0f}%)" if rows else "-"

    report = Report()
    report.table(["silence after the speech", "complete turns called complete",
                  "cut sentences called complete (unguarded pauses)"],
                 [[f"{s} ms", share("complete", k), share("cut", k)]
                  for k, s in enumerate(silences)])
    report.line(f"half: {args.half}; complete: the short requests and the sentences spoken "
                f"whole; cut: the sentences with a {CUT_PAUSE_MS} ms pause inside, asked "
                f"within that pause; called complete: P(complete) >= {COMPLETE_P}")
    if not args.no_write:
        name = "smart-turn" if args.half == "all" else f"smart-turn-{args.half}"
        write_results(name, report.blocks, command=sys.orig_argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
