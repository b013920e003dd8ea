"""Echo cancellation when the devices' reported times are wrong: AEC3 alone (the peer,
as LiveKit and WebRTC run it) vs AEC3 with our alignment (``echo.aec_align``).

A reply in the packaged Piper voice plays through a virtual sink; the microphone hears
it as loud as it is played (a laptop speaker next to its microphone), ``error`` ms after
the time the sink reports (negative: before it, as when a host API reports a latency it
does not have; large: a Bluetooth speaker's unreported latency), with 3 ms of jitter on
the reports. For each error, with the reference as the live settings place it (the
speaker sink's :class:`OutputTimeline` over the reports, ``aec_lead_ms`` 20):

- whether the VAD heard speech on the cleaned microphone (the reply would interrupt
  itself; ``immediate`` barge-in);
- the echo removed over 0.5-3.5 s of the reply (dB: mic in vs mic out);
- where the alignment put the reference (the lead, ms) and what it measured.

Run: ``.venv/bin/python bench/bench_echo.py [--errors -100,-60,-30,0,120,250,400,600]``.
Virtual clock: the same figures on every machine. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import numpy.typing as npt

RATE = 16000
FRAME = 320
PLAY_AT = RATE // 2
REPLY = ("Sure, I can help with that. The weather tomorrow looks sunny and warm, with a "
         "light breeze in the afternoon and clear skies in the evening.")


def _reply() -> tuple[npt.NDArray[np.float32], int]:
    from piper import SynthesisConfig

    from assistant.app.config import AppConfig
    from assistant.app.models import resolve_voice
    from audio.tts import load_piper_voice

    voice = load_piper_voice(*resolve_voice(AppConfig()))
    parts = [np.asarray(c.audio_float_array, np.float32) for c in voice.synthesize(
        REPLY, syn_config=SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0))]
    pcm = np.concatenate(parts)
    pcm *= np.float32(10 ** (-20 / 20) / np.sqrt(np.mean(np.square(pcm))))  # -20 dBFS
    return pcm.astype(np.float32), int(voice.config.sample_rate)


def run(reply: npt.NDArray[np.float32], rate: int, error_ms: int, align: bool) -> dict[str, object]:
    from audio.chunk import AudioChunk
    from audio.clock import VirtualClock
    from audio.echo import EchoOptions, EchoProcessor, level_dbfs
    from audio.output_timeline import OutputTimeline
    from audio.resample import resample
    from audio.sinks import NullSink
    from audio.vad import SpeechStarted, Vad

    options = replace(EchoOptions(mode="aec"), aec_lead_ms=20, aec_align=align)
    processor = EchoProcessor(options)
    rng = np.random.default_rng(7)
    timeline = OutputTimeline()

    def tap(chunk: AudioChunk) -> None:  # a live sink's report comes up to 3 ms late
        late = int(rng.uniform(0.0, 3.0) * chunk.sample_rate / 1000)
        start = timeline.place(chunk.start_sample, chunk.start_sample + late)
        processor.push_reference(AudioChunk(chunk.pcm, chunk.sample_rate, start))

    clock = VirtualClock(RATE)
    sink = NullSink(clock, rate, tap=tap)
    heard = resample(reply, rate, RATE).astype(np.float32)
    n = PLAY_AT + heard.size + RATE
    mic = np.zeros(n, np.float32)
    lo = PLAY_AT + error_ms * RATE // 1000
    mic[lo: lo + heard.size] += heard[: n - lo]
    vad = Vad()
    out: list[npt.NDArray[np.float32]] = []
    started = 0
    for t in range(0, n - FRAME + 1, FRAME):
        if t == PLAY_AT:
            sink.write(AudioChunk(reply, rate))
        clock.advance(FRAME)
        chunk = processor.process(AudioChunk(mic[t: t + FRAME], RATE, t))
        out.append(np.asarray(chunk.pcm, np.float32))
        started += sum(isinstance(e, SpeechStarted) for e in vad.process(chunk))
    cleaned = np.concatenate(out)
    span = slice(PLAY_AT + RATE // 2, PLAY_AT + 7 * RATE // 2)
    found = processor.echo_delay
    return {
        "self_interrupt": started > 0,
        "removed_db": level_dbfs(mic[span]) - level_dbfs(cleaned[span]),
        "lead_ms": processor.lead_ms,
        "measured_ms": None if found is None else found.lag_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--errors", default="-100,-60,-30,0,120,250,400,600",
                        help="ms the echo comes after the reported time (comma-separated)")
    args = parser.parse_args()
    errors = [int(e) for e in args.errors.split(",")]
    reply, rate = _reply()
    print(f"reply {reply.size / rate:.1f} s at -20 dBFS; echo at 0 dB; lead 20 ms, reports up to 3 ms late")
    head = ("| echo after its reported time | AEC3 alone: interrupts itself | echo removed "
            "| with alignment: interrupts itself | echo removed | measured | lead |")
    print(head)
    print("|---|---|---|---|---|---|---|")
    for error in errors:
        peer = run(reply, rate, error, align=False)
        ours = run(reply, rate, error, align=True)
        measured = ours["measured_ms"]
        print(f"| {error:+d} ms | {'yes' if peer['self_interrupt'] else 'no'} "
              f"| {peer['removed_db']:.1f} dB | {'yes' if ours['self_interrupt'] else 'no'} "
              f"| {ours['removed_db']:.1f} dB "
              f"| {'-' if measured is None else f'{measured:+.0f} ms'} | {ours['lead_ms']:+.0f} ms |")


if __name__ == "__main__":
    main()
