"""ASR settings study: decode time and word error rate, per encoder window and threads.

Not a test: prints a table. The transcript at a pause is on the critical path of every
reply (the speculation and the semantic end of turn wait for it), and on a 2-core CPU a
Whisper decode of a short question is mostly the encoder's fixed 30 s window. This
measures, one process, the same clips for every setting:

- decode time (p50 / p90 per utterance, speech padded like the loop's: 250 ms before,
  the ASR tail after, ``--tails-ms``) of the stock 30 s window (faster-whisper, the peer) and of shorter
  encoder windows (``asr.window_s``, with the full-window fallback of
  :mod:`audio.whisper_window`), at CTranslate2 thread counts;
- word error rate per voice (Piper at three rates, Piper in room noise at -35 and -30
  dBFS, espeak-ng when installed), over complete sentences and their first halves (what
  a decode at a mid-sentence pause sees);
- how often the cut window's result was not trusted and decoded again.

With ``--bursts``: the interim transcripts of speech over a paused reply instead. Bursts
of backchannels and real interruptions (Piper and espeak-ng, quiet and with room noise
at -45 dBFS), 250 / 400 / 600 ms after they begin, decoded on the stock window, on the
cut window with its full guard, and with the loops-only guard the loop's interims use
(:data:`audio.whisper_window.LOOPS_ONLY`): decode time, fallbacks, and what the
interruption rule (:func:`assistant.turns.interruption.decide`) makes of each (a
backchannel that would cut the reply; a real interruption cut at this interim).

With ``--numbers``: utterances with numbers instead (``bench/asr_numbers.py``): how many
the cut window's guard decodes again on the full window with and without its floor for
numerals, and for those, whether each window's digits and words were right.

    .venv/bin/python bench/bench_asr.py [--windows 0,10,20] [--threads 0] [--repeat 1]
    .venv/bin/python bench/bench_asr.py --bursts
    .venv/bin/python bench/bench_asr.py --numbers
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
from bench_turns import SENTENCES  # the end-of-turn test set's sentences and their cuts
from loop_interruptions import BACKCHANNELS, REAL  # the interruption set's words
from results import Report, add_no_write, write_results

from assistant.app.config import AppConfig, default_config_path, load_config
from assistant.app.models import resolve_asr, resolve_voice
from assistant.replay.scenario import (
    Say,
    espeak_available,
    espeak_speech,
    piper_speech,
    render_scenario,
)
from assistant.turns.interruption import (
    Decision,
    InterruptionFacts,
    InterruptionOptions,
    decide,
)
from audio.asr import ASROptions, Transcriber
from audio.streaming_asr import lowest_word_p
from audio.tts import Synthesizer, TTSOptions
from audio.vad import frame_energy_dbfs
from audio.whisper_window import LOOPS_ONLY, WindowGuard

RATE = 16_000
SHORT = ("What is the capital of France?", "What colour is the sky?", "Name a big animal.",
         "What do bees make?", "Tell me a story about a brave little dragon.", "Stop, please.",
         "Set a timer for ten minutes.", "Hello there.")
TEXTS = tuple(f"{a} {b}" for a, b in SENTENCES) + tuple(a for a, _ in SENTENCES) + SHORT


@dataclass(frozen=True)
class Voice:
    name: str
    speaker: str  # piper | espeak
    length_scale: float = 1.0
    noise_dbfs: float | None = None


VOICES = (Voice("piper", "piper"), Voice("piper slow", "piper", 1.35),
          Voice("piper fast", "piper", 0.8), Voice("piper noise -35", "piper", 1.0, -35.0),
          Voice("piper slow noise -30", "piper", 1.35, -30.0), Voice("espeak-ng", "espeak"))


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("colour", "color")).split()


def edit_distance(a: list[str], b: list[str]) -> int:
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diag, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1]))
    return row[len(b)]


def speech(onnx: Path, config_json: Path,
           texts: Sequence[str] = TEXTS) -> dict[str, list[npt.NDArray[np.float32]]]:
    """Each voice's utterances of ``texts``, without the synthesiser's trailing silence
    (the VAD ends the speech where the sound ends: the tail after it is the loop's
    choice)."""
    out: dict[str, list[npt.NDArray[np.float32]]] = {}
    for v in VOICES:
        if v.speaker == "espeak":
            if not espeak_available():
                continue
            pcms = [espeak_speech(t) for t in texts]
        else:
            # Deterministic Piper (no sampling noise): the same audio for every setting.
            synth = Synthesizer(onnx, config_json, TTSOptions(
                length_scale=v.length_scale, noise_scale=0.0, noise_w_scale=0.0))
            pcms = [piper_speech(synth, t) for t in texts]
        out[v.name] = [trim_silence(p) for p in pcms]
    return out


def trim_silence(pcm: npt.NDArray[np.float32], frame: int = RATE // 100,
                 floor_dbfs: float = -45.0) -> npt.NDArray[np.float32]:
    """``pcm`` up to the end of its last 10 ms frame louder than ``floor_dbfs``."""
    loud = [i for i in range(pcm.size // frame)
            if frame_energy_dbfs(pcm[i * frame:(i + 1) * frame]) > floor_dbfs]
    return pcm[: (loud[-1] + 1) * frame] if loud else pcm


def clips(voices: dict[str, list[npt.NDArray[np.float32]]],
          tail_ms: int) -> dict[str, list[npt.NDArray[np.float32]]]:
    """Each utterance as a decode sees it: 250 ms before, ``tail_ms`` of silence after,
    plus the voice's room noise."""
    rng = np.random.default_rng(0)
    noise = {v.name: v.noise_dbfs for v in VOICES}
    out: dict[str, list[npt.NDArray[np.float32]]] = {}
    for name, pcms in voices.items():
        tail = np.zeros(RATE * tail_ms // 1000, np.float32)
        padded = [np.concatenate([np.zeros(RATE // 4, np.float32), p, tail]) for p in pcms]
        if (level := noise[name]) is not None:
            padded = [(p + rng.standard_normal(p.size) * 10 ** (level / 20)).astype(np.float32)
                      for p in padded]
        out[name] = padded
    return out


def run(model_dir: Path, window_s: float, threads: int, data: dict[str, list[npt.NDArray[np.float32]]],
        repeat: int, tail_ms: int) -> list[str]:
    tr = Transcriber(model_dir, ASROptions(window_s=window_s, cpu_threads=threads))
    tr.transcribe(data[VOICES[0].name][0])  # warm up
    tr.fallbacks = 0
    times: list[float] = []
    errors = total = 0
    per_voice: list[str] = []
    for pcms in data.values():
        e = n = 0
        for text, pcm in zip(TEXTS, pcms, strict=True):
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                hyp = tr.transcribe(pcm, word_timestamps=False).text
                best = min(best, time.perf_counter() - t0)
            times.append(best)
            e += edit_distance(words(text), words(hyp))
            n += len(words(text))
        per_voice.append(f"{100 * e / n:.1f}")
        errors, total = errors + e, total + n
    decodes = len(times) * repeat
    label = "30 s (stock)" if window_s == 0 else f"{window_s:g} s"
    return [label, str(threads or "auto"), str(tail_ms), f"{1000 * np.median(times):.0f}",
            f"{1000 * np.percentile(times, 90):.0f}", f"{100 * errors / total:.1f}",
            f"{tr.fallbacks}/{decodes}", *per_voice]


BURST_CUTS_MS = (250, 400, 600)


@dataclass(frozen=True)
class Burst:
    text: str
    real: bool
    cut_ms: int
    pcm: npt.NDArray[np.float32]


def bursts(cfg: AppConfig, cuts_ms: tuple[int, ...] = BURST_CUTS_MS) -> list[Burst]:
    """Each burst as the interim decode sees it, ``cuts_ms`` after it begins: 300 ms of
    room noise before it."""
    onnx, config_json = resolve_voice(cfg)
    synth = Synthesizer(onnx, config_json, TTSOptions(noise_scale=0.0, noise_w_scale=0.0))
    voices: list[Literal["piper", "espeak"]] = ["piper"]
    if espeak_available():
        voices.append("espeak")
    out = []
    for voice in voices:
        for floor in (-65.0, -45.0):
            for text in BACKCHANNELS + REAL:
                scenario = render_scenario([Say(text, voice=voice)], synth, lead_ms=300, tail_ms=0,
                                           noise_floor_dbfs=floor)
                start = scenario.placed[0].start_ms * RATE // 1000
                for cut in cuts_ms:
                    pcm = scenario.pcm[max(0, start - RATE * 3 // 10): start + cut * RATE // 1000]
                    out.append(Burst(text, text in REAL, cut, pcm))
    return out


def burst_row(label: str, tr: Transcriber, guard: WindowGuard | None,
              data: list[Burst]) -> list[str]:
    options = InterruptionOptions()
    tr.fallbacks = 0
    times: list[float] = []
    false_cuts = 0
    per_cut: dict[int, int] = {}  # real interruptions cut, by cut time
    for b in data:
        t0 = time.perf_counter()
        heard = tr.transcribe(b.pcm, word_timestamps=True, guard=guard)
        times.append(time.perf_counter() - t0)
        facts = InterruptionFacts(voiced_ms=b.cut_ms, speech_ended=False, text=heard.text,
                                  word_p=lowest_word_p(heard.words))
        commit = decide(facts, options) is Decision.COMMIT
        false_cuts += commit and not b.real
        per_cut[b.cut_ms] = per_cut.get(b.cut_ms, 0) + (commit and b.real)
    cuts = sum(per_cut.values())
    n_real = sum(b.real for b in data)
    n_cuts = len(per_cut)
    return [label, f"{1000 * np.median(times):.0f}", f"{1000 * np.percentile(times, 90):.0f}",
            f"{tr.fallbacks}/{len(data)}", f"{false_cuts}/{len(data) - n_real}",
            f"{cuts}/{n_real}",
            ", ".join(f"{c} ms: {n}/{n_real // n_cuts}" for c, n in sorted(per_cut.items()))]


def burst_bench(cfg: AppConfig, threads: int, interim_windows: list[float],
                cuts_ms: tuple[int, ...]) -> Report:
    data = bursts(cfg, cuts_ms)
    model_dir = resolve_asr(cfg)
    window = cfg.asr.window_s or 10.0
    stock = Transcriber(model_dir, ASROptions(window_s=0.0, cpu_threads=threads))
    cut = Transcriber(model_dir, ASROptions(window_s=window, cpu_threads=threads))
    interim = {w: cut if w == window else Transcriber(model_dir, ASROptions(window_s=w, cpu_threads=threads))
               for w in interim_windows}
    for tr in (stock, cut, *interim.values()):
        tr.transcribe(data[0].pcm)  # warm up
    report = Report()
    report.line(f"{len(data)} bursts (cut {', '.join(map(str, cuts_ms))} ms after they begin); "
                "tiny.en int8")
    rows = [burst_row("30 s (stock)", stock, None, data),
            burst_row(f"{window:g} s, full guard", cut, None, data),
            *[burst_row(f"{w:g} s, loops-only guard (interims)", tr, LOOPS_ONLY, data)
              for w, tr in interim.items()]]
    report.table(["window", "decode p50 ms", "p90 ms", "fallbacks",
                  "backchannels that would cut", "real interruptions cut here",
                  "of them, by cut"], rows)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", default="0,10,20", help="encoder windows in seconds (0 = stock 30 s)")
    parser.add_argument("--threads", default="0", help="CTranslate2 cpu_threads values (0 = auto)")
    parser.add_argument("--tails-ms", default="200",
                        help="silence after the speech in each decode, ms (the loop's asr tail), "
                             "comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="decodes per clip (the fastest counts)")
    parser.add_argument("--bursts", action="store_true",
                        help="interim transcripts of short bursts over a paused reply instead")
    parser.add_argument("--cuts-ms", default=",".join(map(str, BURST_CUTS_MS)),
                        help="--bursts: how long after each burst begins its audio is cut, "
                        "ms, comma-separated")
    parser.add_argument("--numbers", action="store_true",
                        help="utterances with numbers instead: how many the cut window's "
                             "guard decodes again on the full window with and without its "
                             "floor for numerals, and which window's text was right "
                             "(bench/asr_numbers.py; writes asr-numbers.md)")
    parser.add_argument("--interim-windows", help="--bursts: encoder windows (s) of the "
                        "interims' rows, comma-separated (default: the config's asr.window_s)")
    add_no_write(parser)
    args = parser.parse_args()
    cfg = load_config(default_config_path())
    if args.numbers:
        from asr_numbers import numbers_report

        report = numbers_report(resolve_asr(cfg), *resolve_voice(cfg),
                                threads=int(args.threads.split(",")[0]))
        if not args.no_write:
            write_results("asr-numbers", report.blocks, command=sys.orig_argv)
        return
    if args.bursts:
        windows = [float(w) for w in (args.interim_windows or str(cfg.asr.window_s or 10.0)).split(",")]
        cuts = tuple(int(c) for c in args.cuts_ms.split(","))
        report = burst_bench(cfg, int(args.threads.split(",")[0]), windows, cuts)
        if not args.no_write:
            write_results("asr-bursts", report.blocks, command=sys.orig_argv)
        return
    model_dir = resolve_asr(cfg)
    rows = []
    voices = speech(*resolve_voice(cfg))
    sets: list[str] = []
    for tail_ms in (int(t) for t in args.tails_ms.split(",")):
        data = clips(voices, tail_ms)
        n = len(next(iter(data.values())))
        sets.append(f"{n} utterances x {len(data)} voices, {tail_ms} ms of silence after each; "
                    f"tiny.en int8; decode = one utterance, best of {args.repeat}")
        print(sets[-1], flush=True)
        for threads in (int(t) for t in args.threads.split(",")):
            for window in (float(w) for w in args.windows.split(",")):
                rows.append(run(model_dir, window, threads, data, args.repeat, tail_ms))
                print(f"  done: window {window:g} s, threads {threads}", flush=True)
    report = Report()
    report.table(["window", "threads", "tail ms", "decode p50 ms", "p90 ms", "WER %", "fallbacks",
                  *[f"WER {v}" for v in data]], rows)
    if not args.no_write:
        write_results("asr", ["\n\n".join(sets), *report.blocks], command=sys.orig_argv)


if __name__ == "__main__":
    main()
