"""``python -m assistant.commands.demo`` (``make demo``): replay a short recorded conversation
with a barge-in. A program of its own, not an ``assistant`` subcommand.

The user's side (three utterances, the third cutting the assistant off mid-story) is
``tests/data/demo_conversation.wav``; if it is missing it is synthesised with the
packaged Piper voice (deterministically) and written there. The replay runs on a
virtual clock, prints the conversation and the metrics, and writes ``heard.wav``,
``events.jsonl`` and ``conversation.json`` to the output directory.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from assistant.replay.scenario import Say, Scenario, render_scenario
from audio.tts import SpanSynthesizer

__all__ = ["DEMO_WAV", "demo_parts", "build_demo_wav", "main"]

DEMO_WAV = Path(__file__).resolve().parents[2] / "tests" / "data" / "demo_conversation.wav"
"""The bundled recording of the user's side of the demo conversation."""


def demo_parts(end_of_turn_ms: int = 550) -> list[Say]:
    """Q1, then a request for a story that the user interrupts 2.5 s into the reply."""
    reply_starts = end_of_turn_ms + 20  # after the user's speech ends (virtual clock)
    return [
        Say("Hello! What is the capital of France?"),
        Say("Tell me a story about a brave little dragon.", gap_ms=reply_starts + 4000),
        Say("Stop, please. That is enough.", gap_ms=reply_starts + 2500),
    ]


def build_demo_wav(synthesizer: SpanSynthesizer, path: Path = DEMO_WAV) -> Scenario:
    """Synthesise the demo input and write it to ``path`` (16 kHz mono int16)."""
    from audio.wav import write_wav

    scenario = render_scenario(demo_parts(), synthesizer, tail_ms=800)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_wav(path, scenario.pcm, scenario.sample_rate)
    return scenario


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assistant.commands.demo",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=Path("demo_out"),
                        help="where heard.wav, events.jsonl and conversation.json go "
                             "(default: ./demo_out)")
    parser.add_argument("--input", type=Path, default=DEMO_WAV,
                        help="the user's recording (default: the bundled one; built if absent)")
    parser.add_argument("--rebuild", action="store_true",
                        help="synthesise the input again even if it exists")
    parser.add_argument("--realtime", action="store_true", help="wall clock instead of virtual")
    parser.add_argument("--config", type=Path, default=None, help="config file")
    args = parser.parse_args(argv)

    from assistant.app.config import default_config_path, load_config
    from assistant.app.errors import UserError
    from assistant.app.heap import freeze_loaded
    from assistant.app.logging_setup import hide_library_bars_off_terminal
    from assistant.loop.setup import load_models
    from assistant.replay.report import format_conversation, format_metrics
    from assistant.replay.run import ReplayOptions, replay_sync, write_outputs
    from audio.errors import AudioError
    from engine.errors import EngineError

    def say(msg: str) -> None:
        print(msg, file=sys.stderr)

    hide_library_bars_off_terminal()
    models = None
    try:
        cfg = load_config(args.config or default_config_path(), env={})
        models = load_models(cfg, progress=say, deterministic_tts=not args.realtime)
        freeze_loaded()
        if args.rebuild or not args.input.is_file():
            say(f"building the demo recording at {args.input}")
            build_demo_wav(models.synthesizer, args.input)
        args.out_dir.mkdir(parents=True, exist_ok=True)
        heard = args.out_dir / "heard.wav"
        say(f"replaying {args.input}")
        outcome = replay_sync(models, cfg, args.input, ReplayOptions(
            realtime=args.realtime, heard_path=heard))
        write_outputs(outcome, events=args.out_dir / "events.jsonl",
                      transcript=args.out_dir / "conversation.json")
    except (UserError, AudioError, EngineError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if models is not None:
            models.close()
    print(format_conversation(outcome.result.conversation))
    print()
    print(format_metrics(outcome.result.metrics, virtual=not args.realtime))
    print()
    print(f"wrote {heard} (what the assistant's speaker played, on the input's timeline),")
    print(f"      {args.out_dir / 'events.jsonl'} and {args.out_dir / 'conversation.json'}")
    return 0 if outcome.result.metrics.sequence_matches_history else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
