"""Run the full stack on a recorded WAV: what ``assistant replay`` (and the demo, the
acceptance tests and the loop benchmark) do.

- Virtual clock (default): the input is consumed as fast as the models allow, but the
  clock only moves by input frames and every worker settles before it does, so the
  same input gives the same events, and the reply is placed on the input's timeline.
- ``realtime``: the device clock; frames arrive at their real pace, models run
  concurrently, latencies are true.

``heard.wav`` is the sink's recording: sample *i* is clock time *i* at the TTS rate.
Optionally the speaker's output is fed back into the input (``echo_loopback_db``, a
delay and a gain), which is how echo handling is exercised without a room.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from assistant.app.config import AppConfig
from assistant.loop.event_log import Entry
from assistant.loop.live import threaded_frames
from assistant.loop.log_codec import write_jsonl
from assistant.loop.pipeline import PipelineOptions, PipelineResult
from assistant.loop.setup import LoopModels, echo_options, open_conversation
from audio.chunk import AudioChunk
from audio.errors import AudioFileError

__all__ = ["ReplayOptions", "ReplayOutcome", "replay", "replay_sync", "write_outputs"]


@dataclass(frozen=True)
class ReplayOptions:
    realtime: bool = False
    heard_path: Path | None = None
    """Where to record what the speaker played (a temporary file when None)."""
    echo_loopback_db: float | None = None
    """Feed the speaker's output back into the input at this gain (None: no echo)."""
    echo_delay_ms: int = 30
    output_gain_db: float = -20.0
    """Speaker level relative to the TTS output (the far end the echo gate compares)."""
    max_tail_ms: int = 30_000


@dataclass
class ReplayOutcome:
    result: PipelineResult
    heard: np.ndarray
    """What the speaker played, float32 mono at ``heard_rate`` on the input's timeline."""
    heard_rate: int
    input_ms: int


class _StartGate:
    """A monotonic time base that stands at 0 until :meth:`start` (real-time replay):
    the input's first sample is then clock time 0, so ``heard.wav`` lines up with it
    however long the set-up took."""

    def __init__(self) -> None:
        self._t0: float | None = None

    def start(self) -> None:
        if self._t0 is None:
            self._t0 = time.monotonic()

    def __call__(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0


class _Room:
    """The speaker-to-microphone path: delayed, attenuated playback added to the input."""

    def __init__(self, gain_db: float, delay_ms: int, rate: int) -> None:
        from audio.echo import EchoReference

        self.reference = EchoReference(rate)
        self.gain = np.float32(10 ** (gain_db / 20))
        self.delay = rate * delay_ms // 1000

    def mix(self, frame: AudioChunk) -> AudioChunk:
        pcm = np.asarray(frame.to_float32().pcm, np.float32)
        echo = self.reference.get(frame.start_sample - self.delay, pcm.size)
        return AudioChunk(np.clip(pcm + self.gain * echo, -1.0, 1.0), frame.sample_rate,
                          frame.start_sample)


async def replay(models: LoopModels, cfg: AppConfig, wav: Path, options: ReplayOptions,
                 on_entry: Callable[[Entry], None] | None = None) -> ReplayOutcome:
    """Replay ``wav`` through the whole loop; returns the result and the heard audio."""
    from audio.clock import DeviceClock, VirtualClock
    from audio.echo import EchoProcessor
    from audio.sinks import WavSink
    from audio.sources import WavFileSource
    from audio.wav import read_wav

    rate = cfg.audio.sample_rate
    gate = _StartGate()
    clock: Any = DeviceClock(rate, time_fn=gate) if options.realtime else VirtualClock(rate)
    source = WavFileSource(wav, clock, rate, cfg.audio.frame_ms)
    echo = EchoProcessor(echo_options(cfg)) if cfg.echo.mode != "off" else None
    room = (_Room(options.echo_loopback_db, options.echo_delay_ms, rate)
            if options.echo_loopback_db is not None else None)
    tts_rate = models.synthesizer.sample_rate
    with tempfile.TemporaryDirectory() as tmp:
        heard_path = options.heard_path or Path(tmp) / "heard.wav"

        def tap(chunk: AudioChunk) -> None:
            if echo is not None:
                echo.push_reference(chunk)
            if room is not None:
                room.reference.push(chunk)

        sink = WavSink(heard_path, clock, tts_rate, tap=tap)
        pipeline = open_conversation(
            models, cfg, clock=clock, sink=sink, echo=echo,
            on_entry=on_entry, pipeline_options=PipelineOptions(
                virtual=not options.realtime, max_tail_ms=options.max_tail_ms,
                output_gain_db=options.output_gain_db))
        try:
            frames: Iterator[AudioChunk] = iter(source)
            if room is not None:
                frames = (room.mix(f) for f in frames)
            if options.realtime:
                gate.start()
                async with threaded_frames(frames) as paced:  # the clock waits off the loop
                    await pipeline.run(paced)
            else:
                await pipeline.run(frames)
            await pipeline.run_tail(cfg.audio.frame_ms)
            result = await pipeline.finish()
        finally:
            await pipeline.aclose()
            sink.close()
        try:
            heard, heard_rate = read_wav(heard_path)
        except AudioFileError:  # nothing was recorded (an empty run)
            heard, heard_rate = np.zeros(0, np.float32), tts_rate
    pcm = np.asarray(heard, np.float32)
    return ReplayOutcome(result, pcm, int(heard_rate), int(source.duration_ms))


def replay_sync(models: LoopModels, cfg: AppConfig, wav: Path, options: ReplayOptions,
                on_entry: Callable[[Entry], None] | None = None) -> ReplayOutcome:
    return asyncio.run(replay(models, cfg, wav, options, on_entry))


def write_outputs(outcome: ReplayOutcome, *, events: Path | None,
                  transcript: Path | None) -> None:
    if events is not None:
        write_jsonl(outcome.result.entries, events)
    if transcript is not None:
        doc = {"turns": outcome.result.conversation,
               "metrics": outcome.result.metrics.to_json(),
               "input_ms": outcome.input_ms}
        transcript.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n",
                              encoding="utf-8")
