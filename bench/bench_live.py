"""Benchmark the live path through a real audio server, beside ``--realtime`` replay.

Not a test: prints a table. One recorded conversation (``bench_loop``'s questions and
interrupted stories) is run twice with the same models:

- replay ``--realtime``: the WAV is the microphone, a WAV sink the speaker (no devices);
- live: the same pipeline as ``assistant talk`` on PortAudio -> ALSA -> a private
  PulseAudio server (``audio/virtual_server.py``); the WAV is played into the virtual
  microphone in real time and the bus (microphone and speaker on one clock) recorded.

Reported (ms, wall clock): voice-to-voice and barge-in detection -> playback stopped as
the pipeline measures them (replay and live), voice-to-voice and barge-in onset ->
silence as the bus shows them, and what the audio stack adds: the microphone's delivery
lag (ADC time -> frame in the loop) and the speaker's reported output latency.

``--leak`` lets the speaker leak into the microphone (0 dB, 30 ms; replay gets the same
echo) with ``--echo-mode`` (default: config.yaml's), and adds the echo path's delay: on
the bus (speaker -> mic) and as the canceller sees it (how long after its reference,
placed by the sink's timeline plus ``echo.aec_lead_ms``, the echo reaches the mic;
AEC3 only cancels a positive delay, and loses an echo whose delay shrinks), and its
spread over the run. The bus figures then read the user's speech
off the mic column less the speaker's (the virtual loopback is sample-exact).

    .venv/bin/python bench/bench_live.py [--questions N] [--keep DIR] [--leak [--echo-mode aec]]

Needs Debian's pulseaudio, pulseaudio-utils and libasound2-plugins (``make sysdeps``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bench_loop import QUESTIONS, ROOM_MS
from loop_interruptions import STORY
from results import Report, add_no_write, write_results
from results import percentile_ms as ms

from assistant.app.config import AppConfig, default_config_path, load_config
from assistant.loop import event_log as log
from assistant.loop.live import threaded_frames
from assistant.loop.metrics import Metrics, percentile
from assistant.loop.pipeline import PipelineOptions
from assistant.loop.setup import LoopModels, load_models, open_conversation, open_live_audio
from assistant.replay.run import ReplayOptions, replay_sync
from assistant.replay.scenario import Say, render_scenario
from audio.chunk import AudioChunk
from audio.echo import EchoReference
from audio.virtual_server import BUS_RATE, VirtualAudioServer, missing_packages
from audio.wav import write_wav

LEAK_LATENCY_MS = 30

WINDOW = BUS_RATE // 100  # 10 ms


def build_input(models: LoopModels, n_questions: int, barge_in_ms: int, path: Path) -> None:
    """``bench_loop``'s questions, then two stories cut off ``barge_in_ms`` after the
    request ends (late enough that the reply is playing on a slow, shared CPU)."""
    parts = [Say(q, gap_ms=0 if i == 0 else ROOM_MS) for i, q in enumerate(QUESTIONS[:n_questions])]
    for _ in range(2):
        parts.append(Say(STORY, gap_ms=ROOM_MS))
        parts.append(Say("Stop, please.", gap_ms=barge_in_ms))
    scenario = render_scenario(parts, models.synthesizer, tail_ms=3000)
    write_wav(path, scenario.pcm, scenario.sample_rate)


@dataclass
class LiveRun:
    metrics: Metrics
    bus: np.ndarray
    mic_lag_ms: list[float] = field(default_factory=list)
    """Per mic frame: loop clock when the frame reached the loop - its ADC end time."""
    output_latency_ms: float = 0.0
    """PortAudio's reported output latency of the speaker stream."""
    echo_seen_ms: list[float] = field(default_factory=list)
    """Per 2 s of playback: how long after its reference the echo reached the mic, as
    the canceller sees it (lead included); empty without echo handling or echo."""


def lag_ms(a: np.ndarray, b: np.ndarray, rate: int, max_ms: int = 300) -> tuple[float, float]:
    """(how long ``b`` trails ``a`` in ms, normalised correlation) by FFT cross-correlation,
    searched over +-``max_ms``."""
    n = a.size + b.size
    size = 1 << (n - 1).bit_length()
    corr = np.fft.irfft(np.conj(np.fft.rfft(a, size)) * np.fft.rfft(b, size), size)
    m = rate * max_ms // 1000
    lags = np.concatenate([np.arange(0, m + 1), np.arange(-m, 0)])
    values = np.concatenate([corr[: m + 1], corr[-m:]])
    k = int(np.argmax(values))
    norm = float(np.linalg.norm(a) * np.linalg.norm(b)) or 1.0
    return 1000.0 * int(lags[k]) / rate, float(values[k]) / norm


def echo_alignment(taps: list[AudioChunk], mic: list[AudioChunk], rate: int,
                   lead_ms: int, window_s: float = 2.0) -> list[float]:
    """The echo's delay behind its reference per window of playback (ms, lead included),
    the reference placed as the echo processor places it."""
    if not taps or not mic:
        return []
    reference = EchoReference(rate, keep_ms=10**8)
    for chunk in taps:
        reference.push(chunk)
    start = mic[0].start_sample
    heard = np.concatenate([np.asarray(c.to_float32().pcm, np.float32) for c in mic])
    far = reference.get(start, heard.size)
    w = int(window_s * rate)
    out = []
    for lo in range(0, heard.size - w + 1, w):
        if float(np.sqrt(np.mean(np.square(far[lo:lo + w])))) < 1e-3:
            continue  # nothing playing
        lag, corr = lag_ms(far[lo:lo + w], heard[lo:lo + w], rate)
        if corr > 0.3:
            out.append(lag + lead_ms)
    return out


def _spans(channel: np.ndarray, merge_ms: int, threshold: float = 3e-3) -> list[tuple[float, float]]:
    n = channel.size // WINDOW * WINDOW
    rms = np.sqrt(np.mean(np.square(channel[:n].reshape(-1, WINDOW), dtype=np.float64), axis=1))
    out: list[list[int]] = []
    for i in np.flatnonzero(rms > threshold):
        if out and (i - out[-1][1]) * 10 < merge_ms:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return [(a / 100, b / 100) for a, b in out if (b - a) >= 10]


def bus_figures(bus: np.ndarray) -> tuple[list[float], list[float]]:
    """(voice-to-voice, barge-in onset -> silence) in ms, read off the bus recording."""
    users = _spans(bus[:, 0], merge_ms=700)
    speech = _spans(bus[:, 1], merge_ms=400)
    v2v, cut = [], []
    for k, (start, end) in enumerate(users):
        inside = [s for s in speech if s[0] < start < s[1]]
        if inside:
            cut.append(1000 * (inside[0][1] - start))
        next_user = users[k + 1][0] if k + 1 < len(users) else float("inf")
        after = [s for s in speech if end <= s[0] < next_user]
        if after:
            v2v.append(1000 * (after[0][0] - end))
    return v2v, cut


async def live_run(models: LoopModels, cfg: AppConfig, wav: Path,
                   server: VirtualAudioServer, tail_s: float = 8.0) -> LiveRun:
    live = open_live_audio(cfg, models)
    entries: list[log.Entry] = []
    pipeline = open_conversation(models, cfg, clock=live.clock, sink=live.sink, echo=live.echo,
                                 on_entry=entries.append,
                                 pipeline_options=PipelineOptions(output_gain_db=-20.0))  # as talk
    lags: list[float] = []
    rate = cfg.audio.sample_rate
    taps: list[AudioChunk] = []
    heard: list[AudioChunk] = []
    if live.echo is not None:  # what the echo processor gets, kept for echo_alignment
        echo_tap = live.echo.push_reference

        def tap(chunk: AudioChunk) -> None:
            taps.append(chunk)
            echo_tap(chunk)

        live.sink.tap = tap

    def timed(frames: Iterator[AudioChunk]) -> Iterator[AudioChunk]:
        for frame in frames:
            now = live.clock.now_samples()
            lags.append(1000 * (now - frame.end_sample * live.clock.sample_rate // rate)
                        / live.clock.sample_rate)
            heard.append(frame)
            yield frame

    recorder = server.record()
    source = threaded_frames(timed(iter(live.mic)))
    feeder = asyncio.create_task(pipeline.run(source))
    try:
        await asyncio.sleep(1.0)  # the streams are up
        await asyncio.to_thread(server.feed, wav)
        waited = 0.0
        while waited < tail_s and not pipeline.is_idle():
            await asyncio.sleep(0.1)
            waited += 0.1
        await asyncio.sleep(1.0)
        result = await pipeline.finish()
    finally:
        live.mic.close()
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)
        await pipeline.aclose()
        await source.aclose()
        latency = live.sink.latency_s
        live.sink.close()
        bus = recorder.stop()
    lead = cfg.echo.aec_lead_ms if cfg.echo.mode == "aec" else 0
    seen = echo_alignment(taps, heard, rate, lead)
    return LiveRun(result.metrics, bus, lags, 1000 * latency, seen)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="keep the input WAV here")
    parser.add_argument("--barge-in-ms", type=int, default=6000,
                        help="from the end of a story request to the 'Stop, please.'")
    parser.add_argument("--leak", action="store_true",
                        help=f"the speaker leaks into the mic (0 dB, {LEAK_LATENCY_MS} ms)")
    parser.add_argument("--echo-mode", choices=("off", "gate", "aec"), default=None,
                        help="echo.mode for both runs (default: config.yaml's)")
    add_no_write(parser)
    args = parser.parse_args()
    missing = missing_packages()
    if missing:
        print("needs the Debian packages " + " ".join(missing), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp, VirtualAudioServer(Path(tmp) / "pulse") as server:
        # PortAudio reads this when it starts (sounddevice is imported on first use).
        os.environ["PULSE_SERVER"] = server.env["PULSE_SERVER"]
        overrides = {"echo.mode": args.echo_mode} if args.echo_mode else None
        cfg = load_config(default_config_path(), env={}, overrides=overrides)
        print("loading models ...", file=sys.stderr)
        models = load_models(cfg)
        try:
            wav = (args.keep or Path(tmp)) / "bench_live_input.wav"
            wav.parent.mkdir(parents=True, exist_ok=True)
            build_input(models, args.questions, args.barge_in_ms, wav)
            print("replaying in real time ...", file=sys.stderr)
            replayed = replay_sync(models, cfg, wav, ReplayOptions(
                realtime=True, echo_loopback_db=0.0 if args.leak else None,
                echo_delay_ms=LEAK_LATENCY_MS)).result.metrics
            print("live through the audio server ...", file=sys.stderr)
            if args.leak:
                with server.leak_speaker(gain=1.0, latency_ms=LEAK_LATENCY_MS):
                    run = asyncio.run(live_run(models, cfg, wav, server))
            else:
                run = asyncio.run(live_run(models, cfg, wav, server))
        finally:
            models.close()
    bus = run.bus
    if args.leak:  # the mic column carries the echo too: take the speaker back out of it
        path_ms, _ = lag_ms(bus[::3, 1], bus[::3, 0], BUS_RATE // 3)
        k = int(round(path_ms * BUS_RATE / 1000))
        mic = bus[:, 0].copy()
        mic[k:] -= bus[: bus.shape[0] - k, 1]
        bus = np.stack([mic, bus[:, 1]], axis=1)
    bus_v2v, bus_cut = bus_figures(bus)
    live = run.metrics
    rows = [
        ["voice-to-voice, replay --realtime (pipeline)", ms(replayed.voice_to_voice_ms, 50),
         ms(replayed.voice_to_voice_ms, 95), len(replayed.voice_to_voice_ms)],
        ["voice-to-voice, live (pipeline's clock)", ms(live.voice_to_voice_ms, 50),
         ms(live.voice_to_voice_ms, 95), len(live.voice_to_voice_ms)],
        ["voice-to-voice, live (on the bus)", ms(bus_v2v, 50), ms(bus_v2v, 95), len(bus_v2v)],
        ["barge-in detection -> stopped, replay", ms(replayed.barge_in_stop_ms, 50),
         ms(replayed.barge_in_stop_ms, 95), len(replayed.barge_in_stop_ms)],
        ["barge-in detection -> stopped, live", ms(live.barge_in_stop_ms, 50),
         ms(live.barge_in_stop_ms, 95), len(live.barge_in_stop_ms)],
        ["barge-in onset -> silence, live (on the bus)", ms(bus_cut, 50), ms(bus_cut, 95),
         len(bus_cut)],
        ["audio leaked after detection, live", ms(live.leaked_audio_ms, 50),
         ms(live.leaked_audio_ms, 95), len(live.leaked_audio_ms)],
        ["mic: ADC -> frame in the loop", ms(run.mic_lag_ms, 50), ms(run.mic_lag_ms, 95),
         len(run.mic_lag_ms)],
        ["speaker: reported output latency", f"{run.output_latency_ms:.0f}", "-", 1],
    ]
    if args.leak:
        rows += [
            ["echo path on the bus (speaker -> mic)", f"{path_ms:.0f}", "-", 1],
            [f"echo after its reference, as the canceller sees it ({cfg.echo.mode})",
             ms(run.echo_seen_ms, 50), ms(run.echo_seen_ms, 95), len(run.echo_seen_ms)],
            # AEC3 locks onto one delay: how far the reference moved under it.
            ["  its spread over the run (max - min)",
             f"{max(run.echo_seen_ms) - min(run.echo_seen_ms):.0f}" if run.echo_seen_ms else "-",
             "-", len(run.echo_seen_ms)],
        ]
    report = Report()
    report.table(["measure (ms)", "p50", "p95", "n"], rows)
    p_replay = percentile(replayed.voice_to_voice_ms, 50)
    p_bus = percentile(tuple(bus_v2v), 50)
    if p_replay is not None and p_bus is not None:
        report.line(f"\nlive on the bus - replay, voice-to-voice p50: {p_bus - p_replay:+.0f} ms")
    if not args.no_write:
        write_results("live" + ("-leak" if args.leak else ""), report.blocks,
                      command=sys.orig_argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
