"""Numbers through Whisper's cut window: ``bench_asr.py --numbers``.

Whisper splits a number's probability between its spellings ("12" / "twelve", "6.30" /
"630"), so a segment with a numeral has a lower average log-probability on any window,
and the cut window's guard (`audio.whisper_window.looks_wrong`) sent such results to the
full 30 s window (~300 ms more at a pause on 2 cores) under its -1.0 floor. This decodes
utterances with numbers, spoken by Piper at three rates and in room noise (and espeak-ng
when installed), on the 10 s window with the floor for numerals
(``WindowGuard.min_avg_logprob_numerals``) and without it (-1.0 for every segment), and
for each utterance that falls back without it, compares the cut window's text with the
full window's: are the digits right (the digits of the text, in order, against what was
said) and are the words right (the rest).

Two sets: ``picked``, the sentences the floor was chosen on, and ``check``, other
sentences not used to choose it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
from bench_asr import clips, speech
from bench_asr import words as all_words
from results import Report

from audio.asr import ASROptions, Transcriber
from audio.whisper_window import WindowGuard

__all__ = ["NUMBER_TEXTS", "digits", "words", "numbers_report"]

NUMBER_TEXTS: tuple[tuple[str, str], ...] = (
    *(("picked", t) for t in (
        "Set a timer for 12 minutes.", "What is 17 times 23?", "Call 555 0192.",
        "My PIN is 4 7 1 9.", "Wake me up at 6 30.", "Add 3 eggs and 2 cups of milk.",
        "The code is 8 8 3 2 1.", "What is 144 divided by 12?", "Remind me on May 14th at 9.",
        "Turn the volume to 40 percent.", "Room 2 0 4 please.", "Count from 1 to 5.")),
    *(("check", t) for t in (
        "Set an alarm for 7 15 tomorrow.", "What is 38 plus 94?", "My number is 0 7 9 1 1 2 3.",
        "Take 2 tablets every 8 hours.", "It costs 19 dollars 99.", "Flight 4 1 7 to Boston.",
        "Play track number 11.", "How far is 60 miles in kilometres?", "I was born in 1987.",
        "Set the oven to 180 degrees.", "Table for 6 at 8 30.", "Page 312, line 4.")),
)
"""(set, what is said): Piper reads the numerals as numbers ("Room 2 0 4" as digits)."""

TAIL_MS = 100
"""Silence after the speech, as a pause's decode has it (``vad.pause_onset_ms``)."""


def digits(text: str) -> str:
    """The digits of ``text`` in order ("Call 555-0192." -> "5550192")."""
    return "".join(ch for ch in text if ch.isdigit())


def words(text: str) -> list[str]:
    """The words of ``text`` (as bench_asr's WER counts them) without its numerals."""
    return [w for w in all_words(text)
            if not any(ch.isdigit() for ch in w) and w not in ("percent", "pm", "am")]


def _right(hyp: str, said: str) -> str:
    return ("digits " + ("right" if digits(hyp) == digits(said) else "wrong") + ", words "
            + ("right" if words(hyp) == words(said) else "wrong"))


def _falls_back(cut: Transcriber, pcm: npt.NDArray[np.float32], guard: WindowGuard) -> bool:
    """Whether the cut window's decode of ``pcm`` is sent to the full window by ``guard``."""
    before = cut.fallbacks
    cut.transcribe(pcm, word_timestamps=False, guard=guard)
    return cut.fallbacks > before


def numbers_report(model_dir: Path, onnx: Path, config_json: Path, threads: int = 0) -> Report:
    """Each utterance on the 10 s window with and without the numeral floor; the texts of
    those that fall back without it, on the cut window and on the full one."""
    cut = Transcriber(model_dir, ASROptions(window_s=10.0, cpu_threads=threads))
    full = Transcriber(model_dir, ASROptions(window_s=0.0, cpu_threads=threads))
    with_floor = WindowGuard()
    without = replace(with_floor, min_avg_logprob_numerals=with_floor.min_avg_logprob)
    no_logprob = replace(with_floor, min_avg_logprob=-np.inf, min_avg_logprob_numerals=-np.inf)
    counts: dict[str, list[int]] = {}
    rows: list[list[object]] = []
    said = [t for _, t in NUMBER_TEXTS]
    for voice, pcms in clips(speech(onnx, config_json, said), TAIL_MS).items():
        for (which, text), pcm in zip(NUMBER_TEXTS, pcms, strict=True):
            fell_without = _falls_back(cut, pcm, without)
            fell_with = _falls_back(cut, pcm, with_floor)
            n = counts.setdefault(which, [0, 0, 0])
            n[0], n[1], n[2] = n[0] + 1, n[1] + fell_without, n[2] + fell_with
            if fell_without:
                on_cut = cut.transcribe(pcm, word_timestamps=False, guard=no_logprob).text
                on_full = full.transcribe(pcm, word_timestamps=False).text
                rows.append([which, voice, text, on_cut, _right(on_cut, text), on_full,
                             _right(on_full, text), "yes" if fell_with else "no"])
            print(f"  {which:6s} {voice:22s} {text!r}: fell back {fell_without} / {fell_with}",
                  flush=True)
    report = Report()
    report.table(["set", "utterances", "full-window decodes, floor -1.0",
                  "with the floor for numerals (-1.5)"],
                 [[w, c[0], c[1], c[2]] for w, c in counts.items()])
    report.line()
    report.table(["set", "voice", "said", "cut window (10 s)", "", "full window (30 s)", "",
                  "falls back with the floor"], rows)
    return report
