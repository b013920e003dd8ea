"""Interrupt words: how sure must Whisper be of "stop" before it cuts a paused reply?

Not a test: prints tables. Speech over a paused reply is decoded at the pause and every
200 ms after (the loop's interims: the 10 s window with the loops-only guard), and
:func:`assistant.turns.interruption.decide` cuts the reply when the words are real. A
transcript ASR only guessed at (lowest word probability under 0.3) counts as a sound,
except one with a word that asks for the floor (``turns.interrupt_words``), which counts
from ``turns.interrupt_word_min_p``. This decodes each burst once, cut 200 / 250 / 300 /
400 ms after it begins, and applies the rule at each bar (``--bars``; 0.3 is the bar of
other words, i.e. no interrupt words):

- real interruptions cut at that interim, per cut time and in all by 300 ms;
- backchannels and noises that would cut the reply at an interim (false stops), and
  which of them only this bar cuts (what it heard, at what probability).

Voices: Piper (the bundled voice) at three rates and four espeak-ng voices, each quiet
(-65 dBFS room noise) and in -40 dBFS noise; coughs and clicks of 150-600 ms with
different seeds. One process; the decodes are the same for every bar.

    .venv/bin/python bench/bench_interrupt_words.py [--bars 0.3,0.15,0.1] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from loop_interruptions import BACKCHANNELS, REAL  # the interruption set's words
from results import Report, add_no_write, write_results

from assistant.app.config import default_config_path, load_config
from assistant.app.models import resolve_asr, resolve_voice
from assistant.replay.scenario import RATE, Noise, Say, espeak_available, render_scenario
from assistant.turns.interruption import Decision, InterruptionFacts, InterruptionOptions, decide
from audio.asr import ASROptions, Transcriber
from audio.streaming_asr import lowest_word_p
from audio.tts import Synthesizer, TTSOptions
from audio.whisper_window import LOOPS_ONLY

MORE_BACKCHANNELS = ("Mm.", "Hmm.", "Oh.", "Sure.", "Got it.", "I see.", "Wow.", "Nice.", "Yes.",
                     "Oh, okay.")
MORE_REAL = ("Sorry, what?", "Hey, hold on.", "But why?", "Excuse me.", "Stop!", "No, no, no.",
             "What do you mean?", "Can you repeat that?")
PIPER_RATES = (0.8, 1.0, 1.3)  # length_scale: > 1 is slower
ESPEAK_VOICES = (("en-us+f3", 150), ("en-gb+m3", 175), ("en-us+m1", 125), ("en-gb-scotland", 160))
FLOORS_DBFS = (-65.0, -40.0)
CUTS_MS = (200, 250, 300, 400)
LEAD_MS = 300


@dataclass(frozen=True)
class Heard:
    voice: str
    floor_dbfs: float
    text: str
    kind: str  # real | backchannel | noise
    cut_ms: int
    heard: str
    word_p: float


Clip = tuple[str, float, str, str, npt.NDArray[np.float32]]
"""(voice, noise floor dBFS, what was said, kind, audio from LEAD_MS before the sound)."""


def clips(voice_files: tuple[Path, Path], quick: bool) -> list[Clip]:
    piper = {rate: Synthesizer(*voice_files, TTSOptions(length_scale=rate)) for rate in PIPER_RATES}
    texts = [(t, "backchannel") for t in BACKCHANNELS + MORE_BACKCHANNELS] + \
        [(t, "real") for t in REAL + MORE_REAL]
    if quick:
        texts = texts[::3]
    voices: list[tuple[str, Synthesizer, dict[str, Any]]] = [
        (f"piper x{rate:g}", synth, {"voice": "piper"}) for rate, synth in piper.items()]
    if espeak_available():
        voices += [(f"espeak-ng {v} {wpm}", piper[1.0],
                    {"voice": "espeak", "espeak_voice": v, "espeak_rate": wpm})
                   for v, wpm in ESPEAK_VOICES]
    out: list[Clip] = []
    for name, synth, how in voices:
        for floor in FLOORS_DBFS:
            for text, kind in texts:
                sc = render_scenario([Say(text, **how)], synth, lead_ms=LEAD_MS, tail_ms=400,
                                     noise_floor_dbfs=floor)
                out.append((name, floor, text, kind, sc.pcm))
    for noise in ("cough", "click"):
        for ms in (150, 250, 400, 600):
            for seed in range(2 if quick else 5):
                for floor in FLOORS_DBFS:
                    sc = render_scenario([Noise(noise, duration_ms=ms)], piper[1.0],
                                         lead_ms=LEAD_MS, tail_ms=0, noise_floor_dbfs=floor,
                                         seed=seed)
                    out.append((noise, floor, f"{noise} {ms} ms", "noise", sc.pcm))
    return out


def decode_all(tr: Transcriber, data: list[Clip]) -> list[Heard]:
    out = []
    lead = RATE * LEAD_MS // 1000
    for voice, floor, text, kind, pcm in data:
        # A noise is decided on its whole (its final transcript); speech at each interim.
        cuts = (len(pcm) * 1000 // RATE - LEAD_MS,) if kind == "noise" else CUTS_MS
        for cut in cuts:
            h = tr.transcribe(pcm[: lead + RATE * cut // 1000], word_timestamps=True,
                              guard=LOOPS_ONLY)
            out.append(Heard(voice, floor, text, kind, cut, h.text, lowest_word_p(h.words)))
    return out


def cuts(h: Heard, options: InterruptionOptions) -> bool:
    facts = InterruptionFacts(voiced_ms=h.cut_ms, speech_ended=h.kind == "noise", text=h.heard,
                              word_p=h.word_p)
    return decide(facts, options) is Decision.COMMIT


def report(heard: list[Heard], bars: list[float]) -> Report:
    other = InterruptionOptions().min_word_p
    real = [h for h in heard if h.kind == "real"]
    false = [h for h in heard if h.kind != "real"]
    rows, only = [], []
    for bar in bars:
        opts = InterruptionOptions(interrupt_word_min_p=bar)
        base = InterruptionOptions(interrupt_word_min_p=other)
        by_cut: dict[int, int] = defaultdict(int)
        for h in real:
            by_cut[h.cut_ms] += cuts(h, opts)
        early = sum(n for c, n in by_cut.items() if c <= 300)
        n_early = sum(h.cut_ms <= 300 for h in real)
        stops = [h for h in false if cuts(h, opts)]
        new = [h for h in stops if not cuts(h, base)]
        label = f"{bar:g}" + (" (no interrupt words)" if bar >= other else "")
        rows.append([label, *[f"{by_cut[c]}/{sum(h.cut_ms == c for h in real)}" for c in CUTS_MS],
                     f"{early}/{n_early}", f"{len(stops)}/{len(false)}", str(len(new))])
        only += [[label, h.voice, f"{h.floor_dbfs:g}", h.text, str(h.cut_ms), h.heard,
                  f"{h.word_p:.2f}"] for h in new]
    out = Report()
    out.table(["bar", *[f"real cut at {c} ms" for c in CUTS_MS], "real cut by 300 ms",
               "backchannels + noises that would cut", "of them, only at this bar"], rows)
    if only:
        out.line("\nCut only at that bar (false stops the interrupt words add):")
        out.table(["bar", "voice", "noise dBFS", "said", "cut ms", "heard", "word p"], only)
    default = InterruptionOptions()
    stops = [h for h in false if cuts(h, default)]
    if stops:
        out.line(f"\nEvery false stop at the default bar ({default.interrupt_word_min_p:g}): "
                 "what ASR heard of a backchannel or a noise that cuts the reply:")
        out.table(["voice", "noise dBFS", "said", "cut ms", "heard", "word p"],
                  [[h.voice, f"{h.floor_dbfs:g}", h.text, str(h.cut_ms), h.heard,
                    f"{h.word_p:.2f}"] for h in stops])
    per_voice: dict[str, list[int]] = defaultdict(lambda: [0] * len(bars))
    for h in real:
        if h.cut_ms <= 300:
            for i, bar in enumerate(bars):
                per_voice[h.voice][i] += cuts(h, InterruptionOptions(interrupt_word_min_p=bar))
    n = {v: sum(h.voice == v and h.cut_ms <= 300 for h in real) for v in per_voice}
    out.line("\nReal interruptions cut by 300 ms, per voice:")
    out.table(["voice", *[f"bar {b:g}" for b in bars]],
              [[v, *[f"{c}/{n[v]}" for c in counts]] for v, counts in per_voice.items()])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bars", default="0.3,0.15,0.1",
                        help="interrupt_word_min_p values to compare, comma-separated")
    parser.add_argument("--quick", action="store_true", help="a third of the phrases, fewer noises")
    add_no_write(parser)
    args = parser.parse_args()
    cfg = load_config(default_config_path())
    data = clips(resolve_voice(cfg), args.quick)
    tr = Transcriber(resolve_asr(cfg), ASROptions(window_s=cfg.asr.window_s or 10.0))
    tr.transcribe(data[0][4])  # warm up
    print(f"{len(data)} clips; decoding ...", flush=True)
    heard = decode_all(tr, data)
    what = f"{len(heard)} interim decodes (tiny.en int8, the loop's interim window and guard)"
    print(what + "\n")
    out = report(heard, [float(b) for b in args.bars.split(",")])
    if not args.no_write:
        write_results("interrupt-words" + ("-quick" if args.quick else ""),
                      [what, *out.blocks], command=sys.orig_argv)


if __name__ == "__main__":
    main()
