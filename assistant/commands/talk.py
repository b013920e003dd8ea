"""``assistant talk``: talk to the assistant through the microphone and the speaker."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from typing import IO, Any

from assistant.app.config import AppConfig
from assistant.loop import output as O

__all__ = ["register", "run", "TerminalView"]

DESCRIPTION = """\
Live conversation: the microphone feeds VAD and streaming ASR, replies are spoken
through the speaker, and you can interrupt the assistant at any time (it keeps only
the words you heard). The terminal shows the current state and the transcripts.
Use headphones, or keep echo handling on (echo.mode: gate or aec). Ctrl-C exits.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("talk", help="talk to the assistant (microphone and speaker)",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input-device", metavar="NAME|INDEX",
                   help="microphone (default: audio.input_device, else the system default)")
    p.add_argument("--output-device", metavar="NAME|INDEX",
                   help="speaker (default: audio.output_device, else the system default)")
    p.add_argument("--output-gain", type=float, default=-20.0, metavar="DB",
                   help="playback level relative to the TTS output (default -20 dB)")
    p.set_defaults(func=run, config_overrides=_overrides)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.input_device is not None:
        out["audio.input_device"] = args.input_device
    if args.output_device is not None:
        out["audio.output_device"] = args.output_device
    return out


class TerminalView:
    """Prints the state and transcripts as the conversation goes: a subscriber of the
    conversation's public output (`assistant.loop.output`)."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.state = "listening"
        self._partial = False

    def __call__(self, event: O.ConversationEvent) -> None:
        if isinstance(event, O.StateChanged):
            self.state = event.state
            self._status(f"[{event.state}]")
        elif isinstance(event, O.TranscriptDelta):
            self._status(f"[{self.state}] you: {event.text} ...")
        elif isinstance(event, O.TranscriptFinal) and event.text:
            self._line(f"you: {event.text}")
        elif isinstance(event, O.ResponseStarted) and event.speculated:
            self._status(f"[{self.state}] (reply was ready: speculation hit)")
        elif isinstance(event, O.ResponseDone):
            cut = "  [interrupted]" if event.interrupted else ""
            self._line(f"assistant: {event.text}{cut}")
        elif isinstance(event, O.Failure):
            self._line(f"error: {event.error}")

    def _status(self, text: str) -> None:
        self.out.write("\r\x1b[2K" + text[:160])
        self.out.flush()
        self._partial = True

    def _line(self, text: str) -> None:
        prefix = "\r\x1b[2K" if self._partial else ""
        self.out.write(prefix + text + "\n")
        self.out.flush()
        self._partial = False


def stop_on_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> Callable[[], None]:
    """SIGINT and SIGTERM set ``stop`` (a clean end, not an exception); returns the undo."""
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)

    def undo() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return undo


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from assistant.app.heap import freeze_loaded
    from assistant.loop.live import converse, threaded_frames
    from assistant.loop.pipeline import PipelineOptions
    from assistant.loop.setup import load_models, open_conversation, open_live_audio
    from audio.devices import resolve_device

    # Fail on a missing device before spending seconds on the models.
    resolve_device(cfg.audio.input_device, "input")
    resolve_device(cfg.audio.output_device, "output")
    models = load_models(cfg, progress=lambda m: print(m, file=sys.stderr))
    freeze_loaded()  # no 200 ms full garbage collections over the models mid-conversation
    view = TerminalView()

    async def main() -> None:
        live = open_live_audio(cfg, models)
        clock, echo, sink, mic = live.clock, live.echo, live.sink, live.mic
        stop = asyncio.Event()
        undo_signals = stop_on_signals(asyncio.get_running_loop(), stop)
        try:
            conversation = open_conversation(models, cfg, clock=clock, sink=sink, echo=echo,
                                             on_output=view, pipeline_options=PipelineOptions(
                                                 output_gain_db=args.output_gain))
            print("listening -- speak; Ctrl-C to quit", file=sys.stderr, flush=True)
            await converse(conversation, threaded_frames(mic), stop, mic.close)
        finally:
            mic.close()  # idempotent; the speaker goes only after the pipeline stopped
            sink.close()
            undo_signals()

    try:
        asyncio.run(main())
    finally:
        models.close()
    print("\nbye", file=sys.stderr)
    return 0
