"""``assistant transcribe``: speech to text for a WAV file (any PCM WAV, any rate)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from assistant.app.config import AppConfig

__all__ = ["register", "run", "transcript_json"]


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "transcribe",
        help="transcribe a WAV file with the ASR model",
        description="Transcribe FILE (PCM WAV: 8/16/24/32-bit integer or 32/64-bit float, "
        "any rate, any channel count; converted to 16 kHz mono) with the Whisper model "
        "from models.asr. Prints the text; --json adds segments and per-word times in ms. "
        "Silent audio gives an empty transcript without running the decoder.",
    )
    parser.add_argument("file", metavar="FILE.wav", help="the WAV file to transcribe")
    parser.add_argument("--json", action="store_true", help="print JSON with segments and word timestamps")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from assistant.app.models import resolve_asr
    from audio.asr import ASROptions, Transcriber
    from audio.wav import load_for_asr

    pcm = load_for_asr(args.file)  # validates the file before any model loads
    options = ASROptions(
        device=cfg.asr.device,
        compute_type=cfg.asr.compute_type,
        beam_size=cfg.asr.beam_size,
        language=cfg.asr.language,
    )
    transcriber = Transcriber(resolve_asr(cfg), options)
    result = transcriber.transcribe(pcm, word_timestamps=bool(args.json))
    if args.json:
        print(json.dumps(transcript_json(args.file, result), indent=2))
    else:
        if not result.speech_found:
            print(f"{args.file}: no speech found", file=sys.stderr)
        print(result.text)
    return 0


def transcript_json(path: str, result: Any) -> dict[str, Any]:
    """The JSON document ``--json`` prints."""
    return {
        "file": str(path),
        "text": result.text,
        "language": result.language,
        "duration_ms": result.duration_ms,
        "speech_found": result.speech_found,
        "segments": [
            {
                "text": s.text,
                "start_ms": s.start_ms,
                "end_ms": s.end_ms,
                "words": [
                    {"word": w.text, "start_ms": w.start_ms, "end_ms": w.end_ms, "probability": round(w.probability, 4)}
                    for w in s.words
                ],
            }
            for s in result.segments
        ],
    }
