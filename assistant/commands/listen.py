"""``assistant listen``: run VAD and streaming ASR on a WAV file or the mic, live.

Prints every VAD event and every partial/final transcript with its time on the audio
clock, so a user can tune the ``vad:`` settings (flags override them for one run).
A WAV file runs on a virtual clock (as fast as the CPU allows, deterministic) unless
``--realtime``; the mic runs on the device clock until Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from assistant.app.config import AppConfig
from assistant.app.errors import UserError

if TYPE_CHECKING:
    from audio.chunk import AudioChunk
    from audio.streaming_asr import StreamingTranscriber
    from audio.vad import SpeechStarted, Vad, VadEvent, VadOptions

__all__ = ["register", "run", "vad_options", "ListenReport"]

_VAD_FLAGS = (
    ("backend", "--vad-backend", str, "webrtc or silero"),
    ("aggressiveness", "--aggressiveness", int, "webrtc mode 0..3"),
    ("silero_threshold", "--silero-threshold", float, "silero speech probability 0..1"),
    ("min_speech_ms", "--min-speech-ms", int, "speech needed to start a turn"),
    ("prefix_padding_ms", "--prefix-padding-ms", int, "audio kept before the onset"),
    ("short_pause_ms", "--short-pause-ms", int, "pause inside a turn that is reported"),
    ("end_of_turn_ms", "--end-of-turn-ms", int, "silence that ends the turn"),
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "listen",
        help="print VAD events and live transcripts for a WAV file or the microphone",
        description="Run voice activity detection and streaming speech recognition on "
        "FILE.wav (virtual clock: fast and repeatable) or on the microphone (--mic), "
        "printing each event with its time, to tune the vad: settings. VAD flags below "
        "override config.yaml for this run.",
    )
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("file", nargs="?", metavar="FILE.wav", help="audio file (any rate, channels, PCM/float)")
    src.add_argument("--mic", action="store_true", help="listen to the microphone until Ctrl-C")
    parser.add_argument("--device", help="input device name or index (default: audio.input_device)")
    parser.add_argument("--realtime", action="store_true", help="play FILE at real-time pace")
    parser.add_argument("--no-asr", action="store_true", help="VAD events only (no transcripts)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    for _key, flag, kind, help_text in _VAD_FLAGS:
        parser.add_argument(flag, type=kind, help=help_text, choices=["webrtc", "silero"] if kind is str else None)
    parser.add_argument("--energy-floor-dbfs", type=float, help="frames quieter than this are never speech")
    parser.set_defaults(func=run, config_overrides=_overrides)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """VAD flags as config overrides, so the config's validation applies to them."""
    out: dict[str, Any] = {}
    for key, flag, _kind, _help in _VAD_FLAGS:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            out[f"vad.{key}"] = value
    return out


def vad_options(cfg: AppConfig, energy_floor_dbfs: float | None = None) -> VadOptions:
    """Map the ``vad:`` and ``audio:`` config sections onto :class:`audio.vad.VadOptions`."""
    from dataclasses import replace

    from audio.vad import VadOptions

    v = cfg.vad
    options = VadOptions(
        backend=v.backend,
        aggressiveness=v.aggressiveness,
        silero_threshold=v.silero_threshold,
        min_speech_ms=max(v.min_speech_ms, 1),
        prefix_padding_ms=v.prefix_padding_ms,
        short_pause_ms=v.short_pause_ms,
        pause_onset_ms=v.pause_onset_ms,
        end_of_turn_ms=v.end_of_turn_ms,
        sample_rate=cfg.audio.sample_rate,
        frame_ms=cfg.audio.frame_ms,
    )
    if energy_floor_dbfs is not None:
        options = replace(options, energy_floor_dbfs=energy_floor_dbfs)
    return options


@dataclass(frozen=True)
class ListenReport:
    """What a run found (returned for tests; printed as the summary)."""

    turns: int
    finals: tuple[str, ...]
    audio_ms: int


class _Printer:
    def __init__(self, out: TextIO, as_json: bool, rate: int) -> None:
        self.out = out
        self.as_json = as_json
        self.rate = rate

    def line(self, at_sample: int, kind: str, message: str, **fields: Any) -> None:
        if self.as_json:
            record = {"t_ms": round(1000 * at_sample / self.rate, 1), "event": kind, **fields}
            self.out.write(json.dumps(record) + "\n")
        else:
            self.out.write(f"{at_sample / self.rate:8.3f} s  {kind:<15} {message}\n")
        self.out.flush()


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    try:
        listen(args, cfg, sys.stdout)
    except BrokenPipeError:  # `assistant listen x.wav | head`
        sys.stderr.close()
    return 0


def listen(args: argparse.Namespace, cfg: AppConfig, out: TextIO) -> ListenReport:
    from audio.clock import DeviceClock, VirtualClock
    from audio.sources import MicSource, WavFileSource
    from audio.vad import Vad

    try:
        options = vad_options(cfg, args.energy_floor_dbfs)
    except ValueError as exc:
        raise UserError(f"invalid VAD settings: {exc}") from None
    rate = options.sample_rate
    printer = _Printer(out, args.json, rate)
    vad = Vad(options)
    source: Any
    if args.mic:
        device = args.device if args.device is not None else cfg.audio.input_device
        source = MicSource(
            DeviceClock(rate), rate, options.frame_ms, device=device, queue_blocks=cfg.audio.mic_queue_frames
        )
        what = "the microphone (Ctrl-C to stop)"
    else:
        clock = DeviceClock(rate) if args.realtime else VirtualClock(rate)
        source = WavFileSource(args.file, clock, rate, options.frame_ms)
        what = f"{args.file} ({source.duration_ms / 1000:.2f} s, {source.file_rate} Hz, {source.file_channels} ch)"
    try:
        asr = None if args.no_asr else _load_asr(cfg)  # after the source: a bad file fails fast
    except BaseException:
        if args.mic:
            source.close()
        raise
    if not args.json:
        out.write(
            f"listening to {what}\nvad: {options.backend} aggressiveness={options.aggressiveness} "
            f"min_speech={options.min_speech_ms} ms short_pause={options.short_pause_ms} ms "
            f"end_of_turn={options.end_of_turn_ms} ms padding={options.prefix_padding_ms} ms\n"
        )
    session = _Session(vad, asr, printer, cfg.asr.partial_interval_ms)
    try:
        for chunk in source:
            session.process(chunk)
    except KeyboardInterrupt:
        pass
    finally:
        if args.mic:
            source.close()
    session.finish()
    stats = source.stats
    if not args.json:
        out.write(
            f"summary: {session.turns} turn(s) in {session.audio_end / rate:.2f} s of audio"
            + (f"; mic dropped {stats.dropped_samples} samples" if stats.dropped_samples else "")
            + (f"; {stats.invalid_samples} NaN/inf samples zeroed" if stats.invalid_samples else "")
            + (f"; {stats.clipped_samples} samples clipped" if stats.clipped_samples else "")
            + "\n"
        )
    return ListenReport(session.turns, tuple(session.finals), session.audio_end * 1000 // rate)


def _load_asr(cfg: AppConfig) -> Any:
    from assistant.app.models import resolve_asr
    from audio.asr import ASROptions, Transcriber

    options = ASROptions(
        device=cfg.asr.device,
        compute_type=cfg.asr.compute_type,
        beam_size=cfg.asr.beam_size,
        language=cfg.asr.language,
        window_s=cfg.asr.window_s,
        speech_check="rms",  # our VAD already decided this is speech
    )
    return Transcriber(resolve_asr(cfg), options)


class _Session:
    """Routes chunks through the VAD and, inside turns, the streaming transcriber."""

    def __init__(self, vad: Vad, transcriber: Any, printer: _Printer, partial_interval_ms: int) -> None:
        from audio import vad as vad_events

        self.ev = vad_events
        self.partial_interval_ms = partial_interval_ms
        self.vad = vad
        self.transcriber = transcriber
        self.printer = printer
        self.rate = vad.options.sample_rate
        self.utterance: StreamingTranscriber | None = None
        self.turns = 0
        self.finals: list[str] = []
        self.audio_end = 0

    def process(self, chunk: AudioChunk) -> None:
        self.audio_end = chunk.end_sample
        fed = False
        for event in self.vad.process(chunk):
            self._print_event(event)
            if isinstance(event, self.ev.SpeechStarted):
                self._start(event, chunk)
                fed = True
            elif isinstance(event, self.ev.SpeechStopped):
                if not fed:
                    self._feed(chunk.pcm, chunk.end_sample)
                self._final(event.detected_sample)
                fed = True
        if not fed and self.utterance is not None:
            self._feed(chunk.pcm, chunk.end_sample)

    def finish(self) -> None:
        for event in self.vad.flush():
            self._print_event(event)
            if isinstance(event, self.ev.SpeechStopped):
                self._final(event.detected_sample)

    def _start(self, event: SpeechStarted, chunk: AudioChunk) -> None:
        self.turns += 1
        if self.transcriber is None:
            return
        from audio.streaming_asr import StreamingASROptions, StreamingTranscriber

        options = StreamingASROptions(partial_interval_ms=self.partial_interval_ms)
        self.utterance = StreamingTranscriber.from_transcriber(self.transcriber, options)
        self._feed(event.pcm, event.detected_sample)
        rest = chunk.pcm[max(0, event.detected_sample - chunk.start_sample) :]
        if rest.size:
            self._feed(rest, chunk.end_sample)

    def _feed(self, pcm: Any, at: int) -> None:
        if self.utterance is None:
            return
        t0 = time.perf_counter()  # display only: how long the decode took
        partials = self.utterance.feed(pcm)
        asr_ms = 1000 * (time.perf_counter() - t0)
        for p in partials:
            self.printer.line(
                at, "partial", f'"{p.text}" (stable: "{p.stable_text}", asr {asr_ms:.0f} ms)',
                text=p.text, stable=p.stable_text, asr_ms=round(asr_ms, 1),
            )

    def _final(self, at: int) -> None:
        if self.utterance is None:
            return
        t0 = time.perf_counter()
        final = self.utterance.finalize()
        asr_ms = 1000 * (time.perf_counter() - t0)
        self.utterance = None
        self.finals.append(final.text)
        self.printer.line(at, "final", f'"{final.text}" (asr {asr_ms:.0f} ms)', text=final.text, asr_ms=round(asr_ms, 1))

    def _print_event(self, event: VadEvent) -> None:
        rate = self.rate
        at = event.detected_sample
        fields: dict[str, Any] = {"start_ms": round(event.start_ms, 1)}
        if isinstance(event, self.ev.SpeechStarted):
            kind = "speech started"
            text = f"onset {event.start_sample / rate:.3f} s (+{1000 * (at - event.start_sample) / rate:.0f} ms to decide)"
        elif isinstance(event, self.ev.PauseOnset):
            kind, text = "pause onset", f"silent since {event.start_sample / rate:.3f} s"
        elif isinstance(event, self.ev.ShortPause):
            kind, text = "short pause", f"silent since {event.start_sample / rate:.3f} s"
        elif isinstance(event, self.ev.SpeechResumed):
            kind, text = "speech resumed", f"onset {event.start_sample / rate:.3f} s"
        elif isinstance(event, self.ev.SpeechStopped):
            end = event.end_sample
            fields["end_ms"] = round(event.end_ms, 1)
            kind = "speech stopped"
            text = f"turn {event.start_sample / rate:.3f}-{end / rate:.3f} s (+{1000 * (at - end) / rate:.0f} ms to decide)"
        else:  # pragma: no cover - every event type is handled above
            kind, text = type(event).__name__, ""
        self.printer.line(at, kind, text, **fields)
