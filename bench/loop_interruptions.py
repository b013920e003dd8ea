"""The interruption set of ``bench_loop.py --interruptions``: sounds over a playing reply.

Backchannels ("Mm-hmm.", "Right."), coughs and a click, and real interruptions ("Stop,
please.", "Wait, what about cats?"), each in Piper's voice in a quiet room, in -45 dBFS
room noise and in espeak-ng's, ~1.5 s into a story, replayed per mode (``turns.interruption``
``immediate`` and ``tentative``, and any ``--compare``), the modes alternating case by case:
false stops, real interruptions stopped, how long after the sound began the cut was final,
the interruption's own answer's voice-to-voice, the gap heard on a resume, engine sequence
== history. ``bench_asr.py`` and ``bench_interrupt_words.py`` reuse its words.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from results import Report
from results import percentile_ms as ms

from assistant.app.config import AppConfig, default_config_path, load_config
from assistant.loop import event_log as log
from assistant.loop.setup import LoopModels
from assistant.replay.run import ReplayOptions, replay_sync
from assistant.replay.scenario import Noise, Say, espeak_available, render_scenario
from audio.wav import write_wav

__all__ = ["STORY", "BACKCHANNELS", "REAL", "NOISES", "Case", "CaseResult", "interruption_cases",
           "run_case", "interruption_bench"]

STORY = "Tell me a story about a brave little dragon."
"""The request whose reply the sounds interrupt (and ``bench_loop``'s barge-ins')."""

BACKCHANNELS = ("Mm-hmm.", "Uh-huh.", "Right.", "Okay, I see.", "Yeah.", "Okay.")
REAL = ("Stop, please.", "Wait, what about cats?", "No.", "Hold on.", "Hang on a second.",
        "Actually, tell me about dogs.")
NOISES = (("cough", 250), ("cough", 400), ("click", 150))


@dataclass(frozen=True)
class Case:
    kind: str  # backchannel | noise | real
    label: str
    part: Say | Noise
    noise_floor_dbfs: float = -65.0


def interruption_cases() -> list[Case]:
    voices: list[tuple[str, str, float]] = [("piper", "piper", -65.0),
                                            ("piper, room noise -45 dBFS", "piper", -45.0)]
    if espeak_available():
        voices.append(("espeak-ng", "espeak", -65.0))
    cases = [Case("noise", f"{kind} {ms_} ms", Noise(kind, duration_ms=ms_))  # type: ignore[arg-type]
             for kind, ms_ in NOISES]
    for vname, voice, floor in voices:
        cases += [Case("backchannel", f"{t} ({vname})", Say(t, voice=voice), floor)  # type: ignore[arg-type]
                  for t in BACKCHANNELS]
        cases += [Case("real", f"{t} ({vname})", Say(t, voice=voice), floor)  # type: ignore[arg-type]
                  for t in REAL]
    return cases


@dataclass
class CaseResult:
    stopped: bool
    paused: bool
    stop_ms: int | None = None
    """Playback stopped after the speech counted (real interruptions)."""
    commit_ms: int | None = None
    """From the start of the sound to the cut being final."""
    held_ms: int | None = None
    """From the reply's pause to the cut being final (0: cut at once, as ``immediate``)."""
    before_end: bool | None = None
    """The cut was final before the interrupting speech ended (real interruptions)."""
    reply_ms: int | None = None
    """Voice-to-voice of the answer to the interruption: from the end of its speech to the
    new reply's first audio (real interruptions)."""
    gap_ms: int | None = None
    consistent: bool = True
    heard: str = ""
    """What ASR made of the sound when it was decided (the last transcript by then)."""


def run_case(models: LoopModels, cfg: AppConfig, case: Case, tmp: Path,
             realtime: bool) -> CaseResult:
    into_reply_ms = 1500
    lead = cfg.vad.end_of_turn_ms + 20 + into_reply_ms
    part = (Say(case.part.text, gap_ms=lead, voice=case.part.voice) if isinstance(case.part, Say)
            else Noise(case.part.kind, gap_ms=lead, duration_ms=case.part.duration_ms))
    scenario = render_scenario([Say(STORY), part], models.synthesizer, tail_ms=3000,
                               noise_floor_dbfs=case.noise_floor_dbfs)
    wav = tmp / "case.wav"
    write_wav(wav, scenario.pcm, scenario.sample_rate)
    outcome = replay_sync(models, cfg, wav, ReplayOptions(realtime=realtime))
    entries = outcome.result.entries
    start = scenario.placed[1].start_ms
    barge = [e for e in entries if isinstance(e, log.BargeInEntry)]
    stopped_at = [e for e in entries if isinstance(e, log.PlaybackStoppedEntry)]
    paused = [e for e in entries if isinstance(e, log.InterruptionPausedEntry)]
    resumed = [e for e in entries if isinstance(e, log.InterruptionResumedEntry)]
    committed = [e for e in entries if isinstance(e, log.InterruptionCommittedEntry)]
    out = CaseResult(stopped=bool(barge), paused=bool(paused))
    decided = (committed or resumed or barge or entries[-1:])[0].t_ms
    heard = [e.text for e in entries if start <= e.t_ms <= decided
             and isinstance(e, (log.TranscriptPartialEntry, log.TranscriptFinalEntry))]
    out.heard = heard[-1] if heard else ""
    if barge and stopped_at:
        out.stop_ms = stopped_at[0].t_ms - barge[0].t_ms
        final = committed[0].t_ms if committed else barge[0].t_ms
        out.commit_ms = final - start
        out.held_ms = committed[0].after_ms if committed else 0
        out.before_end = final <= scenario.placed[1].end_ms
    answers = [e for e in entries if isinstance(e, log.AudioStartedEntry) and e.t_ms > start]
    if case.kind == "real" and answers:
        out.reply_ms = answers[0].t_ms - answers[0].speech_end_ms
    if resumed:
        out.gap_ms = resumed[0].gap_ms
    m = outcome.result.metrics
    out.consistent = bool(m.sequence_matches_history and m.history_text_matches)
    return out


def interruption_bench(models: LoopModels, realtime: bool,
                       interim_every_ms: tuple[int, ...] = (),
                       compare: tuple[tuple[str, object], ...] = (),
                       baseline: bool = True) -> Report:
    cases = interruption_cases()
    modes: list[tuple[str, dict[str, object]]] = [
        ("immediate", {"turns.interruption": "immediate"})] if baseline else []
    modes += [("tentative", {"turns.interruption": "tentative"})]
    modes += [(f"tentative, interims every {n} ms", {"turns.interruption": "tentative",
                                                      "turns.interim_every_ms": n})
              for n in interim_every_ms]
    modes += [(f"tentative, {key}={value}", {"turns.interruption": "tentative", key: value})
              for key, value in compare]
    cfgs = {mode: load_config(default_config_path(), env={},
                              overrides={**overrides, "llm.max_new_tokens": 50})
            for mode, overrides in modes}
    results: dict[str, list[tuple[Case, CaseResult]]] = {mode: [] for mode in cfgs}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:  # modes alternate case by case: the host's drift hits them alike
            for mode, cfg in cfgs.items():
                print(f"{mode}: {case.label} ...", file=sys.stderr)
                results[mode].append((case, run_case(models, cfg, case, Path(tmp), realtime)))
    clock = "wall clock" if realtime else "virtual clock: the rule's own delays, no compute time"
    rows = []
    for mode, res in results.items():
        false = [r for c, r in res if c.kind != "real"]
        real = [r for c, r in res if c.kind == "real"]
        stops = tuple(r.stop_ms for r in real if r.stop_ms is not None)
        commits = tuple(r.commit_ms for r in real if r.commit_ms is not None)
        held = tuple(r.held_ms for r in real if r.held_ms is not None)
        gaps = tuple(r.gap_ms for r in false if r.gap_ms is not None)
        replies = tuple(r.reply_ms for r in real if r.reply_ms is not None)
        rows.append([mode,
                     f"{sum(r.stopped for r in false)}/{len(false)}",
                     f"{sum(r.paused for r in false)}/{len(false)}",
                     f"{sum(r.stopped for r in real)}/{len(real)}",
                     f"{ms(stops, 50)} / {ms(stops, 95)}",
                     f"{ms(commits, 50)} / {ms(commits, 95)}",
                     f"{ms(held, 50)} / {ms(held, 95)}",
                     f"{sum(bool(r.before_end) for r in real)}/{len(real)}",
                     f"{ms(replies, 50)} / {ms(replies, 95)}",
                     f"{ms(gaps, 50)} / {ms(gaps, 95)}",
                     f"{sum(r.consistent for _, r in res)}/{len(res)}"])
    report = Report()
    report.line(f"interruptions over a reply ({clock})")
    report.table(["mode", "false stops (backchannel, noise)", "paused", "real stopped",
                  "stop after detection p50/p95 ms", "cut final after speech start p50/p95",
                  "cut final after the pause p50/p95",
                  "cut final before the speech ended",
                  "its answer: voice-to-voice p50/p95", "resume gap p50/p95",
                  "sequence == history"], rows)
    report.line()
    report.table(["case (STOP: cut final this long after the sound began, answered: "
                  "its answer's voice-to-voice; resumed: the gap heard)", *results,
                  "heard (tentative)"], [
        [c.label] + [_case_cell(r) for r in (results[m][i][1] for m in results)]
        + [repr(r.heard)] for i, (c, r) in enumerate(results["tentative"])])
    return report


def _case_cell(r: CaseResult) -> str:
    if r.stopped:
        cell = "STOP" if r.commit_ms is None else f"STOP {r.commit_ms} ms"
        return cell if r.reply_ms is None else f"{cell}, answered {r.reply_ms} ms"
    if r.paused:
        return "paused, resumed" if r.gap_ms is None else f"resumed after {r.gap_ms} ms"
    return "-"
