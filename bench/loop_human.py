"""The voice loop on real human speech, in real time: ``bench_loop.py --human``.

Each recording of a set of :mod:`human_speech` (issue #47's 11: five LibriVox readings,
five spoken card names, one command; or the held-out voices) is replayed as a
conversation of its own (room noise, the recording, then silence until the reply has
played), on the wall clock, once per configuration; the configurations alternate
recording by recording so that drift on a shared machine falls on all of them alike.
With ``--human-gap-ms N`` the set is one conversation instead, N ms from the end of one
to the start of the next (the history grows; a reply still playing
when the next recording starts is talked over); ``--human-noise-dbfs -35`` adds white room
noise under them. Per configuration: voice-to-voice p50 / p90 / max (the end of the
user's speech as the VAD dated it -> the reply's first audio), turns over 800 ms,
speculation hits, and utterances answered in parts (a reply started inside the utterance:
a false cut-off, whatever the user's going on repaired). Per recording: what Whisper
heard and each configuration's voice-to-voice; and the waterfall of the slowest three.
"""

from __future__ import annotations

import bisect
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from human_speech import Recording
from results import Report
from results import percentile_ms as ms

from assistant.app.config import AppConfig
from assistant.loop import event_log as log
from assistant.loop.metrics import TurnMetrics
from assistant.loop.setup import LoopModels
from assistant.loop.waterfall import STAGES, Waterfall, waterfalls
from assistant.replay.run import ReplayOptions, replay_sync
from assistant.replay.scenario import Placed, Recorded, render_scenario
from audio.wav import write_wav

__all__ = ["UtteranceRun", "run_recordings", "run_all", "human_report", "stage_rows", "SLOW_MS",
           "ROOM_DBFS"]

SLOW_MS = 800
"""Issue #47's bar: no turn over 800 ms."""

ROOM_DBFS = -65.0
"""The scenarios' quiet room (the recordings' own floors are -43 to -60 dBFS)."""


@dataclass(frozen=True)
class UtteranceRun:
    """One recording replayed under one configuration."""

    name: str
    config: str
    heard: str
    """The answered turns' transcripts, `` | `` between turns."""
    replies: int
    """Replies started: more than one means the utterance was answered in parts."""
    v2v_ms: int | None
    """The last reply's voice-to-voice (None: nothing played)."""
    endpoint_to_audio_ms: int | None
    speculation: str
    fall: Waterfall | None
    over_reply: bool = False
    """The recording began while the previous reply was still playing (a barge-in)."""


def _runs(entries: Sequence[log.Entry], turns: Sequence[TurnMetrics], placed: Sequence[Placed],
          names: Sequence[str], config: str) -> list[UtteranceRun]:
    """Each placed recording's replies: a reply belongs to the last recording that began
    before it started."""
    starts = [p.start_ms for p in placed]
    owner: dict[int, int] = {}
    barged: set[int] = set()
    for e in entries:
        i = max(bisect.bisect_right(starts, e.t_ms) - 1, 0)
        if isinstance(e, log.ResponseStartedEntry):
            owner[e.turn_id] = i
        elif isinstance(e, log.BargeInEntry):
            barged.add(i)
    falls = {w.turn_id: w for w in waterfalls(entries) if w.first_audio is not None}
    out = []
    for i, name in enumerate(names):
        mine = [t for t in turns if owner.get(t.turn_id) == i]
        played = [t for t in mine if t.voice_to_voice_ms is not None]
        last = played[-1] if played else None
        out.append(UtteranceRun(
            name=name, config=config, heard=" | ".join(t.user_text for t in mine),
            replies=len(mine), v2v_ms=last.voice_to_voice_ms if last else None,
            endpoint_to_audio_ms=last.endpoint_to_audio_ms if last else None,
            speculation=last.speculation if last else "none",
            fall=falls.get(last.turn_id) if last else None, over_reply=i in barged))
    return out


def run_recordings(models: LoopModels, cfg: AppConfig, config: str,
                   recordings: Sequence[Recording], tmp: Path, gap_ms: int = 0,
                   noise_floor_dbfs: float = ROOM_DBFS) -> list[UtteranceRun]:
    """``recordings`` replayed in real time as one conversation, ``gap_ms`` apart, over
    white room noise at ``noise_floor_dbfs`` (besides the recordings' own)."""
    parts = []
    for i, rec in enumerate(recordings):
        assert rec.path is not None
        parts.append(Recorded(rec.path, rec.text, gap_ms=gap_ms if i else 0))
    scenario = render_scenario(parts, models.synthesizer, tail_ms=1500,
                               noise_floor_dbfs=noise_floor_dbfs)
    wav = tmp / "human.wav"
    write_wav(wav, scenario.pcm, scenario.sample_rate)
    outcome = replay_sync(models, cfg, wav, ReplayOptions(realtime=True))
    return _runs(outcome.result.entries, outcome.result.metrics.turns, scenario.placed,
                 [r.name for r in recordings], config)


def run_all(models: LoopModels, configs: Sequence[tuple[str, AppConfig]],
            recordings: Sequence[Recording], gap_ms: int = 0,
            noise_floor_dbfs: float = ROOM_DBFS) -> list[UtteranceRun]:
    """Each recording its own conversation (``gap_ms`` 0), the configurations alternating
    recording by recording; or all in one conversation ``gap_ms`` apart, per configuration."""
    out: list[UtteranceRun] = []
    groups = [list(recordings)] if gap_ms else [[r] for r in recordings]
    with tempfile.TemporaryDirectory() as tmp:
        for group in groups:
            for name, cfg in configs:
                for run in run_recordings(models, cfg, name, group, Path(tmp), gap_ms,
                                          noise_floor_dbfs):
                    print(f"  {run.name:14s} {name:24s} {run.v2v_ms} ms  {run.heard!r}",
                          file=sys.stderr)
                    out.append(run)
    return out


def human_report(runs: Sequence[UtteranceRun], recordings: Sequence[Recording]) -> Report:
    configs = list(dict.fromkeys(r.config for r in runs))
    report = Report()
    rows = []
    for name in configs:
        mine = [r for r in runs if r.config == name]
        v2v = [r.v2v_ms for r in mine if r.v2v_ms is not None]
        e2a = [r.endpoint_to_audio_ms for r in mine if r.endpoint_to_audio_ms is not None]
        hits = sum(r.speculation == "hit" for r in mine)
        rows.append([name, ms(v2v, 50), ms(v2v, 90), max(v2v, default="-"),
                     f"{sum(v > SLOW_MS for v in v2v)}/{len(v2v)}", ms(e2a, 50),
                     f"{hits}/{len(mine)}", sum(r.replies > 1 for r in mine),
                     sum(r.over_reply for r in mine)])
    report.table(["configuration", "v2v p50 ms", "v2v p90 ms", "v2v max ms",
                  f"over {SLOW_MS} ms", "endpoint-to-audio p50 ms", "speculation hits",
                  "answered in parts", "spoken over the reply"], rows)
    report.line()
    said = {r.name: r.text for r in recordings}
    per: list[list[object]] = []
    for rec in recordings:
        by_config = {r.config: r for r in runs if r.name == rec.name}
        first = by_config.get(configs[0])
        per.append([rec.name, said[rec.name], first.heard if first else "",
                    *[_run_cell(by_config.get(c)) for c in configs]])
    report.table(["recording", "said", f"heard ({configs[0]})",
                  *[f"v2v ms, {c}" for c in configs]], per)
    falls = sorted((r for r in runs if r.config == configs[0] and r.fall is not None),
                   key=lambda r: -(r.v2v_ms or 0))[:3]
    if falls:
        report.line()
        report.table(["slowest, ms after end of speech"]
                     + [f"{r.name}: {r.heard!r} ({r.speculation})" for r in falls],
                     stage_rows([r.fall for r in falls if r.fall is not None]))
    return report


def _run_cell(run: UtteranceRun | None) -> str:
    if run is None or run.v2v_ms is None:
        return "-"
    parts = f", {run.replies} replies" if run.replies > 1 else ""
    over = ", over the reply" if run.over_reply else ""
    return f"{run.v2v_ms} ({run.speculation}{parts}{over})"


def stage_rows(falls: Sequence[Waterfall]) -> list[list[str]]:
    """A waterfall table's rows: one per stage, one column per turn (``-``: not reached)."""
    return [[stage] + ["-" if (v := getattr(w, stage)) is None else str(v) for w in falls]
            for stage in STAGES]
