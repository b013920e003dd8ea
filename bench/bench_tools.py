"""Benchmark tool calls in the live loop: ``--realtime`` replays of spoken requests.

Not a test: prints tables. Each request ("What time is it?", "What is twelve times
seven?", "Set a timer for five seconds.") is synthesised once (Piper; ``--voices
piper,espeak`` adds espeak-ng) and replayed in real time, on one set of models, as a
conversation of its own under three configurations, alternating request by request:

- ``required``: ``tools.enabled`` = get_time, calculator, set_timer and
  ``tools.choice: required`` (the reply to the user is decoded under the call schema);
- ``auto``: the same tools, the model decides (how often does it call one?);
- ``off``: no tools, the plain reply: the peer.

Per request, from the event log, every time after the end of the user's speech
(``speech_stopped.speech_end_ms``, the input's timeline): the tool started
(``tool_started``), finished (``tool_finished``; ``ok`` is "valid"), and the answer's
first audio (``audio_started`` of the turn answering the tool results; with no call, the
reply's own); with tools off, the plain reply's first audio; their ratio. Beside them:
whether the reply to the user's words adopted a speculative draft (a call decoded under
``required`` never does) and the call's tokens and decode time. p50 per column per
configuration. A run whose call never ran or whose answer never came is listed
with its log entries.

    .venv/bin/python bench/bench_tools.py [--voices piper,espeak] [--no-auto] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from results import Report, add_no_write, write_results

from assistant.app.config import AppConfig, default_config_path, load_config
from assistant.loop import event_log as log
from assistant.loop.log_codec import entry_to_json, write_jsonl
from assistant.loop.metrics import percentile
from assistant.loop.setup import LoopModels, load_models
from assistant.replay.run import ReplayOptions, replay_sync
from assistant.replay.scenario import Say, espeak_available, render_scenario
from audio.wav import write_wav

REQUESTS = ("What time is it?", "What is twelve times seven?", "Set a timer for five seconds.")
WARMUP = "What is two plus two?"
TOOLS = ("builtin:get_time", "builtin:calculator", "builtin:set_timer")
TAIL_MS = 9000
"""Silence after the request: the call, the tool and the answer's start fall inside the
input (the replay's own tail then waits for the answer to play out)."""
MAX_NEW_TOKENS = 64
"""Per reply, every configuration: room for a call, and replies that end sooner."""
TOOL_RESULTS = "[tool results"
"""How the loop labels the turn that answers tool results (its ``user_text``)."""


@dataclass(frozen=True)
class Config:
    name: str
    overrides: dict[str, object]


def configs(auto: bool) -> list[Config]:
    shown = {"tools.enabled": list(TOOLS)}
    out = [Config("required", {**shown, "tools.choice": "required"})]
    if auto:
        out.append(Config("auto", {**shown, "tools.choice": "auto"}))
    out.append(Config("off", {"tools.enabled": []}))
    return out


@dataclass(frozen=True)
class Measured:
    """One replay, read from its event log; every ``*_ms`` is after the end of speech."""

    call: str = ""
    """``name(arguments)`` of the first call ("" if none; ``!error`` if unreadable)."""
    calls: int = 0
    """``tool_call`` entries in the run (a reply to results may call again)."""
    tool_started_ms: int | None = None
    tool_finished_ms: int | None = None
    ok: bool | None = None
    """The first call's ``tool_finished.ok`` (None: it never finished)."""
    output: str = ""
    """The tool's output (the model reads it)."""
    first_audio_ms: int | None = None
    """The answer's first audio: the turn on the tool results, else the reply's own."""
    text: str = ""
    """What that reply said (``response_done.text``)."""
    speculation: str = ""
    """The reply to the user's words: was a draft adopted (hit | miss | none)."""
    call_decode: str = ""
    """The calling reply: ``tokens / ms`` from its start to its close (the call decoded)."""
    problems: tuple[str, ...] = ()
    """What went wrong (a call that never ran, no answer, an engine failure...)."""


def measure(entries: list[log.Entry], want_call: bool) -> Measured:
    stops = [e for e in entries if isinstance(e, log.SpeechStoppedEntry) and not e.discarded]
    problems: list[str] = []
    if not stops:
        return Measured(problems=("no speech_stopped: the request never ended a turn",))
    if len(stops) > 1:
        problems.append(f"{len(stops)} user turns (the request was split)")
    end = stops[0].speech_end_ms
    problems += [f"engine_failed: {e.error}" for e in entries
                 if isinstance(e, log.EngineFailedEntry)]
    calls = [e for e in entries if isinstance(e, log.ToolCallEntry)]
    started = [e for e in entries if isinstance(e, log.ToolStartedEntry)]
    finished = [e for e in entries if isinstance(e, log.ToolFinishedEntry)]
    turns = {e.turn_id: e for e in entries if isinstance(e, log.ResponseStartedEntry)}
    audio = {e.turn_id: e for e in entries if isinstance(e, log.AudioStartedEntry)}
    done = {e.turn_id: e for e in entries if isinstance(e, log.ResponseDoneEntry)}
    reply = next((t for t in turns.values() if t.t_ms >= stops[0].t_ms), None)
    call, decode = "", ""
    if calls:
        first = calls[0]
        closed = done.get(first.turn_id)
        if first.turn_id in turns and closed is not None:
            decode = (f"{closed.generated_tokens} / "
                      f"{first.t_ms - turns[first.turn_id].t_ms}")
        call = f"!{first.error}" if first.error else f"{first.name}({first.arguments})"
        if first.error:
            problems.append(f"tool_call could not be read: {first.error}")
    elif want_call:
        problems.append("no tool_call under tools.choice=required")
    t_start = started[0].t_ms - end if started else None
    fin = next((f for f in finished if started and f.call_id == started[0].call_id), None)
    if calls and not calls[0].error and not started:
        problems.append("tool_call logged, no tool_started")
    if started and fin is None:
        problems.append("tool_started, no tool_finished")
    if fin is not None and not fin.ok:
        problems.append(f"tool_finished not ok: {fin.output[:80]}")
    # The answer: the turn on the tool results (after the tool finished), else the first
    # reply to the user's words (it calls nothing, so it speaks).
    if calls:
        after = fin.t_ms if fin is not None else calls[0].t_ms
        answer = next((t for t in turns.values()
                       if t.t_ms >= after and t.user_text.startswith(TOOL_RESULTS)), None)
    else:
        answer = reply
    first_audio = text = None
    if answer is None:
        problems.append("no answer turn started")
    else:
        heard = audio.get(answer.turn_id)
        first_audio = None if heard is None else heard.t_ms - end
        text = done[answer.turn_id].text if answer.turn_id in done else None
        again = [c for c in calls if c.turn_id == answer.turn_id]
        if again:
            problems.append(f"the reply to the tool results (turn {answer.turn_id}) is "
                            f"another call ({again[0].name or again[0].error}), not spoken")
        elif heard is None:
            problems.append(f"answer turn {answer.turn_id} never played "
                            f"(response_done text {text!r})")
    open_turns = [t for t in turns if t not in done]
    if open_turns:
        problems.append(f"the replay ended with turn {open_turns[-1]} still open "
                        "(response_started, no response_done)")
    last = calls[-1] if calls else None
    if last is not None and not any(t.t_ms >= last.t_ms and t.turn_id > last.turn_id
                                    for t in turns.values()):
        ran = any(e.call_id == last.call_id for e in started)
        problems.append(
            f"no reply followed turn {last.turn_id}'s call: " + (
                "its tool ran, the replay ended before the reply to its result" if ran
                else "unreadable, the replay ended before the reply" if last.error
                else "not run (past the loop's tool rounds), so none is due"))
    return Measured(call=call, calls=len(calls), call_decode=decode,
                    speculation="" if reply is None else reply.speculation, tool_started_ms=t_start,
                    tool_finished_ms=None if fin is None else fin.t_ms - end,
                    ok=None if fin is None else fin.ok, output="" if fin is None else fin.output,
                    first_audio_ms=first_audio, text=text or "", problems=tuple(problems))


@dataclass(frozen=True)
class Row:
    request: str
    config: str
    measured: Measured
    entries: tuple[log.Entry, ...]


def render(models: LoopModels, text: str, voice: str, path: Path) -> None:
    say = Say(text, voice="espeak") if voice == "espeak" else Say(text)
    scenario = render_scenario([say], models.synthesizer, tail_ms=TAIL_MS)
    write_wav(path, scenario.pcm, scenario.sample_rate)


def replay_one(models: LoopModels, cfg: AppConfig, wav: Path) -> list[log.Entry]:
    t0 = time.perf_counter()
    outcome = replay_sync(models, cfg, wav, ReplayOptions(realtime=True))
    print(f"  {time.perf_counter() - t0:.1f} s wall", file=sys.stderr)
    return outcome.result.entries


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or not b else a / b


def p50(values: list[float | None]) -> float | None:
    return percentile([v for v in values if v is not None], 50)


def short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def tables(rows: list[Row], names: list[str]) -> Report:
    plain = {r.request: r.measured.first_audio_ms for r in rows if r.config == "off"}
    report = Report()
    report.line("Tool calls in the loop, real time (ms after the end of the user's speech)")
    table = []
    for r in rows:
        m = r.measured
        valid = "-" if m.ok is None else ("yes" if m.ok else "no")
        table.append([r.request, r.config, m.speculation or "-", short(m.call, 48) or "-",
                      m.call_decode or "-", m.calls, valid,
                      ms(m.tool_started_ms), ms(m.tool_finished_ms), ms(m.first_audio_ms),
                      ms(plain.get(r.request)),
                      "-" if r.config == "off" else
                      _x(ratio(m.first_audio_ms, plain.get(r.request))),
                      repr(short(m.text))])
    report.table(["request (voice)", "tools.choice", "speculation", "first call",
                  "call decoded (tokens / ms)", "calls", "valid",
                  "tool started",
                  "tool finished", "first audio of the answer", "tools off: first audio",
                  "ratio", "answer (first 60 chars)"], table)
    report.line()
    summary = []
    for name in names:
        own = [r for r in rows if r.config == name]
        if not own:
            continue
        called = [r for r in own if r.measured.call]
        spoken = sum(r.measured.first_audio_ms is not None for r in own)
        summary.append([
            name, len(own), "-" if name == "off" else f"{len(called)}/{len(own)}",
            "-" if name == "off" else f"{sum(bool(r.measured.ok) for r in own)}/{len(own)}",
            ms(p50([r.measured.tool_started_ms for r in own])),
            ms(p50([r.measured.tool_finished_ms for r in own])),
            f"{spoken}/{len(own)}", ms(p50([r.measured.first_audio_ms for r in own])),
            ms(p50([plain.get(r.request) for r in own])),
            "-" if name == "off" else _x(p50([ratio(r.measured.first_audio_ms,
                                                     plain.get(r.request)) for r in own])),
            sum(bool(r.measured.problems) for r in own)])
    report.table(["tools.choice", "requests", "called a tool", "valid calls (ok)",
                  "p50 tool started", "p50 tool finished", "answers spoken",
                  "p50 first audio of the answer",
                  "p50 tools off: first audio", "p50 ratio (per request)", "runs with problems"],
                 summary)
    return report


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def timeline(entries: tuple[log.Entry, ...]) -> str:
    """The log entries worth reading when a run went wrong, one per line."""
    skip = (log.TranscriptPartialEntry, log.EndOfTurnScoreEntry,
            log.AudioEndScoreEntry, log.PauseEntry, log.PromptWarmedEntry)
    lines = []
    for e in entries:
        if isinstance(e, skip):
            continue
        fields = {k: v for k, v in entry_to_json(e).items() if k not in ("type", "t_ms")}
        lines.append(f"{e.t_ms:>7} {e.type} {short(str(fields), 160)}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--voices", type=lambda v: [x for x in v.split(",") if x],
                        default=["piper"], metavar="VOICES",
                        help="comma-separated: piper, espeak (espeak-ng, if installed)")
    parser.add_argument("--no-auto", action="store_true",
                        help="skip tools.choice=auto (only required and the tools-off peer)")
    parser.add_argument("--warmup", type=int, default=1, metavar="N",
                        help="replay a request N times per configuration first, untimed")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the input WAVs and each run's events.jsonl here")
    add_no_write(parser)
    args = parser.parse_args()
    voices = [v for v in args.voices if v != "espeak" or espeak_available()]
    base = load_config(default_config_path(), env={})
    load_before = os.getloadavg()
    with contextlib.ExitStack() as opened:
        print("loading models ...", file=sys.stderr)
        models = load_models(base, deterministic_tts=True)
        opened.callback(models.close)
        tmp = Path(opened.enter_context(tempfile.TemporaryDirectory()))
        where = args.keep or tmp
        where.mkdir(parents=True, exist_ok=True)
        cfgs = configs(auto=not args.no_auto)
        loaded = {c.name: load_config(default_config_path(), env={}, overrides={
            **c.overrides, "llm.max_new_tokens": MAX_NEW_TOKENS}) for c in cfgs}
        if args.warmup > 0:
            warm = where / "warmup.wav"
            render(models, WARMUP, "piper", warm)
            for _ in range(args.warmup):
                for c in cfgs:
                    print(f"warming up (untimed): {c.name} ...", file=sys.stderr)
                    replay_one(models, loaded[c.name], warm)
        rows: list[Row] = []
        for voice in voices:
            for i, text in enumerate(REQUESTS):
                wav = where / f"request{i}-{voice}.wav"
                render(models, text, voice, wav)
                label = f"{text} ({voice})"
                for c in cfgs:  # configurations alternate: the host's drift hits them alike
                    print(f"replaying in real time: {label}, {c.name} ...", file=sys.stderr)
                    entries = replay_one(models, loaded[c.name], wav)
                    if args.keep:
                        write_jsonl(entries, where / f"request{i}-{voice}-{c.name}.jsonl")
                    rows.append(Row(label, c.name,
                                    measure(entries, want_call=c.name == "required"),
                                    tuple(entries)))
    load_after = os.getloadavg()
    report = tables(rows, [c.name for c in cfgs])
    for r in rows:
        if r.measured.problems:
            report.line(f"\n{r.request}, {r.config}: " + "; ".join(r.measured.problems))
            report.pre(timeline(r.entries))
    outputs = [(r.request, r.measured.call, r.measured.output) for r in rows if r.measured.output]
    if outputs:
        report.line()
        report.table(["request (voice)", "call", "tool output"],
                     [[q, short(c, 60), short(o, 100)] for q, c, o in outputs])
    cores = len(os.sched_getaffinity(0))
    shared = ("other work shared the machine (load average at or above 1 before the models "
              "loaded)" if load_before[0] >= 1.0 else "the machine looked idle before the run")
    notes = (f"Load average {load_before[0]:.2f} before, {load_after[0]:.2f} after, on "
             f"{cores} cores: {shared}; real-time figures move with it. "
             f"llm.max_new_tokens={MAX_NEW_TOKENS} in every configuration; each request is a "
             "conversation of its own; configurations alternate request by request.")
    print(f"\n{notes}")
    if not args.no_write:
        write_results("tools", report.blocks, command=sys.orig_argv, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
