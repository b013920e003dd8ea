"""``assistant replay IN.wav``: the full stack with real models on recorded user audio."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from assistant.app.config import AppConfig
from assistant.app.errors import UserError

__all__ = ["register", "run"]

DESCRIPTION = """\
Replay a recorded WAV of the user's side of a conversation through the whole loop:
VAD, streaming ASR, turn-taking with barge-in, speculative pre-generation, the engine
and TTS. By default time is virtual: computation takes zero time, so the same input
always gives the same events, and the assistant's audio lands on the input's timeline
(a barge-in at a known time in the input interrupts the reply at a known point). With
--realtime the input is paced by the wall clock and latencies are true.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="run the full stack on recorded user audio",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", type=Path, metavar="IN.wav", help="the user's audio (any PCM WAV)")
    p.add_argument("--realtime", action="store_true",
                   help="pace the input by the wall clock (true latencies)")
    p.add_argument("--out", type=Path, metavar="heard.wav",
                   help="write what the assistant's speaker played, on the input's timeline")
    p.add_argument("--events", type=Path, metavar="events.jsonl",
                   help="write the event log (one JSON object per line, with t_ms and type)")
    p.add_argument("--transcript", type=Path, metavar="conversation.json",
                   help="write the turns and the metrics as JSON")
    p.add_argument("--echo-loopback", type=float, metavar="DB", default=None,
                   help="feed the speaker's output back into the input at this gain in dB "
                        "(simulates a room; exercises echo handling)")
    p.add_argument("--output-gain", type=float, metavar="DB", default=-20.0,
                   help="speaker level relative to the TTS output (default -20 dB)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from assistant.app.heap import freeze_loaded
    from assistant.loop.setup import load_models
    from assistant.replay.report import format_conversation, format_metrics
    from assistant.replay.run import ReplayOptions, replay_sync, write_outputs
    from audio.wav import read_wav_info

    wav: Path = args.input
    if not wav.is_file():
        raise UserError(f"{wav}: no such file")
    read_wav_info(wav)  # a bad file fails here, with its name, before models load
    for out in (args.out, args.events, args.transcript):
        if out is not None and not out.parent.exists():
            raise UserError(f"{out}: directory {out.parent} does not exist")

    def say(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr)

    models = load_models(cfg, progress=say, deterministic_tts=not args.realtime)
    freeze_loaded()
    say(f"replaying {wav} ({'real time' if args.realtime else 'virtual time'})")
    try:
        outcome = replay_sync(models, cfg, wav, ReplayOptions(
            realtime=args.realtime, heard_path=args.out, echo_loopback_db=args.echo_loopback,
            output_gain_db=args.output_gain))
    finally:
        models.close()
    write_outputs(outcome, events=args.events, transcript=args.transcript)
    if not args.quiet:
        print(format_conversation(outcome.result.conversation))
        print()
        print(format_metrics(outcome.result.metrics, virtual=not args.realtime))
    return 0 if outcome.result.metrics.sequence_matches_history else 1
