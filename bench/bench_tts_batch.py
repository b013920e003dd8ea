"""Piper for several daemon sessions at once: one after another, side by side, or batched.

Not a test: prints a table. When N daemon sessions each need a clause synthesised at the
same moment, the daemon can run the N calls one after another, on N threads at once (what
it does: each session's TTS worker calls Piper), or as one padded batch through the same
ONNX model (VITS takes ``input_lengths``, so padding does not change an item's audio).
This measures, one process, the same clauses for each, interleaved per repetition:

- wall time until every clause is synthesised (what the last session waits), and until
  the first one is (batching makes every session wait for the longest clause);
- how far a batched item's audio is from the same clause synthesised alone.

Piper's sampling noise is off, so the three ways make the same audio.

    .venv/bin/python bench/bench_tts_batch.py [--sizes 2,4] [--repeat 7]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from results import Report, add_no_write, write_results

from assistant.app.config import load_config
from assistant.app.models import resolve_voice
from audio.tts import load_piper_voice

# First clauses of replies, as the loop's clause rule cuts them (short ones come first).
CLAUSES = ("Sure, I can help with that.", "The weather tomorrow looks sunny and warm.",
           "Here is a short story about a dragon.", "It is twelve past three.",
           "Paris is the capital of France.", "Bees make honey.",
           "Once upon a time, in a quiet valley,", "Ten minutes, starting now.")

Ids = list[int]


class Piper:
    """The voice's ONNX session, called with phoneme ids (one item or a padded batch)."""

    def __init__(self, voice: Any) -> None:
        self.voice = voice
        self.scales = np.array([0.0, voice.config.length_scale, 0.0], np.float32)

    def ids(self, text: str) -> Ids:
        phonemes = [p for sentence in self.voice.phonemize(text) for p in sentence]
        return list(self.voice.phonemes_to_ids(phonemes))

    def one(self, ids: Ids) -> npt.NDArray[np.float32]:
        out = self.voice.session.run(None, {
            "input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
            "scales": self.scales})
        return np.asarray(out[0], np.float32).reshape(-1)

    def batch(self, items: Sequence[Ids]) -> list[npt.NDArray[np.float32]]:
        padded = np.zeros((len(items), max(len(i) for i in items)), np.int64)
        for k, ids in enumerate(items):
            padded[k, : len(ids)] = ids
        out = self.voice.session.run(None, {
            "input": padded, "input_lengths": np.array([len(i) for i in items], np.int64),
            "scales": self.scales})
        audio = np.asarray(out[0], np.float32).reshape(len(items), -1)
        hop = int(self.voice.config.hop_length)
        # Each item's length from its own durations (the alignment output, per phoneme id).
        lengths = (np.asarray(out[1]).reshape(len(items), -1).sum(axis=1) * hop).astype(int)
        return [audio[k, : lengths[k]] for k in range(len(items))]


Way = Callable[[Piper, Sequence[Ids]], list[float]]


def _timed(way: Way, piper: Piper, items: Sequence[Ids]) -> tuple[float, float]:
    """(first done, all done), seconds from the start; ``way`` returns each item's end."""
    t0 = time.perf_counter()
    ends = way(piper, items)
    return min(ends) - t0, max(ends) - t0


def _sequential(piper: Piper, items: Sequence[Ids]) -> list[float]:
    ends = []
    for ids in items:
        piper.one(ids)
        ends.append(time.perf_counter())
    return ends


def _threads(piper: Piper, items: Sequence[Ids]) -> list[float]:
    ends: list[float] = []
    lock = threading.Lock()

    def run(ids: Ids) -> None:
        piper.one(ids)
        with lock:
            ends.append(time.perf_counter())

    workers = [threading.Thread(target=run, args=(ids,)) for ids in items]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return ends


def _batched(piper: Piper, items: Sequence[Ids]) -> list[float]:
    piper.batch(items)
    return [time.perf_counter()] * len(items)


WAYS: dict[str, Way] = {
    "one after another": _sequential, "threads at once": _threads, "one padded batch": _batched}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2,4", help="sessions at once (comma-separated)")
    parser.add_argument("--repeat", type=int, default=7, help="repetitions per way (median)")
    add_no_write(parser)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or max(sizes) > len(CLAUSES):
        parser.error(f"--sizes: each 1..{len(CLAUSES)}")

    onnx, config_json = resolve_voice(load_config())
    piper = Piper(load_piper_voice(onnx, config_json))
    report = Report()
    rows = []
    for n in sizes:
        items = [piper.ids(t) for t in CLAUSES[:n]]
        alone = [piper.one(ids) for ids in items]
        together = piper.batch(items)
        worst = max(float(np.max(np.abs(a[: b.size] - b))) if b.size else 0.0
                    for a, b in zip(alone, together, strict=True))
        lengths_equal = all(a.size == b.size for a, b in zip(alone, together, strict=True))
        times: dict[str, list[tuple[float, float]]] = {w: [] for w in WAYS}
        for _ in range(args.repeat):  # interleaved: load on the machine hits each way alike
            for way, fn in WAYS.items():
                times[way].append(_timed(fn, piper, items))
        base = float(np.median([t[1] for t in times["one after another"]]))
        for way, got in times.items():
            first = float(np.median([t[0] for t in got]))
            last = float(np.median([t[1] for t in got]))
            rows.append([n, way, f"{1000 * first:.0f}", f"{1000 * last:.0f}", f"{base / last:.2f}x",
                         f"{worst:.1e}" if way == "one padded batch" else "",
                         ("yes" if lengths_equal else "no") if way == "one padded batch" else ""])
    report.line(f"Clauses: the first N of {len(CLAUSES)} ({', '.join(map(repr, CLAUSES[:max(sizes)]))}); "
                f"median of {args.repeat}.")
    report.table(["N", "way", "first done ms", "all done ms", "speed vs one after another",
                  "batch vs alone, max |diff|", "same lengths"], rows)
    if not args.no_write:
        write_results("tts-batch", report.blocks, command=sys.orig_argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
