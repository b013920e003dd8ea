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

``--gate``: the half-duplex gate, fixed (the peer's: WebRTC-style half duplex, as
``gate_stands_down: false``) vs standing down when the speaker is not heard
(:mod:`audio.echo_presence`), for an echo from none (headphones) to as loud as played,
in quiet and noisy rooms. The reply plays with the echo 30 ms late; 3 s in, a user says
"Stop, wait a moment please." 10 dB under the reply's level (peaks at -25 dBFS). For each:
whether the reply interrupted itself before the user spoke (also with no echo handling
at all, which shows the echoes that matter), whether the gate stood down,
and how long after the user began the VAD heard them.

Run: ``.venv/bin/python bench/bench_echo.py [--errors -100,-60,-30,0,120,250,400,600]``
or ``... --gate``. Virtual clock: the same figures on every machine. Nothing here is
asserted.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np
import numpy.typing as npt
from results import Report, add_no_write, write_results

RATE = 16000
FRAME = 320
PLAY_AT = RATE // 2
REPLY = ("Sure, I can help with that. The weather tomorrow looks sunny and warm, with a "
         "light breeze in the afternoon and clear skies in the evening.")


def _reply() -> tuple[npt.NDArray[np.float32], int]:
    pcm, rate = _reply_text(REPLY)
    pcm *= np.float32(10 ** (-20 / 20) / np.sqrt(np.mean(np.square(pcm))))  # -20 dBFS
    return pcm.astype(np.float32), rate


def _reply_text(text: str) -> tuple[npt.NDArray[np.float32], int]:
    from piper import SynthesisConfig

    from assistant.app.config import AppConfig
    from assistant.app.models import resolve_voice
    from audio.tts import load_piper_voice

    voice = load_piper_voice(*resolve_voice(AppConfig()))
    parts = [np.asarray(c.audio_float_array, np.float32) for c in voice.synthesize(
        text, syn_config=SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0))]
    return np.concatenate(parts).astype(np.float32), int(voice.config.sample_rate)


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


USER_AT = PLAY_AT + 3 * RATE


def _user() -> npt.NDArray[np.float32]:
    from assistant.replay.scenario import espeak_available, espeak_speech

    if espeak_available():
        pcm = espeak_speech("Stop, wait a moment please.")
    else:  # the assistant's voice, for want of another
        from audio.resample import resample

        said, rate = _reply_text("Stop, wait a moment please.")
        pcm = resample(said, rate, RATE)
    pcm = np.asarray(pcm, np.float32)
    return (pcm * np.float32(10 ** (-25 / 20) / np.max(np.abs(pcm)))).astype(np.float32)


def run_gate(reply: npt.NDArray[np.float32], rate: int, user: npt.NDArray[np.float32],
             echo_db: float | None, noise_dbfs: float,
             stands_down: bool | None) -> dict[str, object]:
    """One reply through the gate (see the module docstring's ``--gate``; ``stands_down``
    None: no echo handling)."""
    from audio.chunk import AudioChunk
    from audio.clock import VirtualClock
    from audio.echo import EchoOptions, EchoProcessor
    from audio.resample import resample
    from audio.sinks import NullSink
    from audio.vad import SpeechStarted, Vad

    processor = EchoProcessor(EchoOptions(mode="off" if stands_down is None else "gate",
                                          gate_stands_down=bool(stands_down)))
    clock = VirtualClock(RATE)
    sink = NullSink(clock, rate, tap=processor.push_reference)
    heard = resample(reply, rate, RATE).astype(np.float32)
    n = PLAY_AT + heard.size + RATE
    rng = np.random.default_rng(7)
    mic = (rng.standard_normal(n) * 10 ** (noise_dbfs / 20)).astype(np.float32)
    if echo_db is not None:
        lo = PLAY_AT + 30 * RATE // 1000
        mic[lo: lo + heard.size] += heard[: n - lo] * np.float32(10 ** (echo_db / 20))
    mic[USER_AT: USER_AT + user.size] += user[: n - USER_AT]
    vad = Vad()
    starts: list[int] = []
    for t in range(0, n - FRAME + 1, FRAME):
        if t == PLAY_AT:
            sink.write(AudioChunk(reply, rate))
        clock.advance(FRAME)
        chunk = processor.process(AudioChunk(mic[t: t + FRAME], RATE, t))
        starts += [e.detected_sample for e in vad.process(chunk) if isinstance(e, SpeechStarted)]
    user_heard = [s for s in starts if USER_AT <= s < USER_AT + user.size]
    return {
        "self_interrupt": any(s < USER_AT for s in starts),
        "stood_down": processor.echo_heard is False,
        "user_ms": None if not user_heard else (user_heard[0] - USER_AT) * 1000 // RATE,
    }


def alignment_table(errors: list[int]) -> Report:
    report = Report()
    reply, rate = _reply()
    report.line(f"reply {reply.size / rate:.1f} s at -20 dBFS; echo at 0 dB; lead 20 ms, "
                "reports up to 3 ms late")
    head = ("| echo after its reported time | AEC3 alone: interrupts itself | echo removed "
            "| with alignment: interrupts itself | echo removed | measured | lead |")
    report.line(head)
    report.line("|---|---|---|---|---|---|---|")
    for error in errors:
        peer = run(reply, rate, error, align=False)
        ours = run(reply, rate, error, align=True)
        measured = ours["measured_ms"]
        report.line(f"| {error:+d} ms | {'yes' if peer['self_interrupt'] else 'no'} "
                    f"| {peer['removed_db']:.1f} dB | {'yes' if ours['self_interrupt'] else 'no'} "
                    f"| {ours['removed_db']:.1f} dB "
                    f"| {'-' if measured is None else f'{measured:+.0f} ms'} "
                    f"| {ours['lead_ms']:+.0f} ms |")
    return report


def gate_table() -> Report:
    report = Report()
    reply, rate = _reply()
    user = _user()
    report.line(f"reply {reply.size / rate:.1f} s at -20 dBFS; echo 30 ms late; the user 3 s "
                "in, peaks at -25 dBFS")
    report.line("| echo | room noise | no gate: interrupts itself | fixed gate: interrupts itself "
                "| hears the user after | standing down: stood down | interrupts itself "
                "| hears the user after |")
    report.line("|---|---|---|---|---|---|---|---|")
    for echo_db in (None, -40.0, -30.0, -20.0, -12.0, -6.0, 0.0):
        for noise in (-70.0, -55.0, -45.0):
            bare = run_gate(reply, rate, user, echo_db, noise, stands_down=None)
            fixed = run_gate(reply, rate, user, echo_db, noise, stands_down=False)
            ours = run_gate(reply, rate, user, echo_db, noise, stands_down=True)
            echo = "none" if echo_db is None else f"{echo_db:+.0f} dB"
            cells = []
            for r in (fixed, ours):
                ms = r["user_ms"]
                cells.append(f"{'yes' if r['self_interrupt'] else 'no'} | "
                             f"{'not heard' if ms is None else f'{ms} ms'}")
            report.line(f"| {echo} | {noise:.0f} dBFS | "
                        f"{'yes' if bare['self_interrupt'] else 'no'} | {cells[0]} | "
                        f"{'yes' if ours['stood_down'] else 'no'} | {cells[1]} |")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--errors", default="-100,-60,-30,0,120,250,400,600",
                        help="ms the echo comes after the reported time (comma-separated)")
    parser.add_argument("--gate", action="store_true",
                        help="the half-duplex gate, fixed vs standing down without an echo")
    add_no_write(parser)
    args = parser.parse_args()
    report = gate_table() if args.gate else alignment_table([int(e) for e in args.errors.split(",")])
    if not args.no_write:
        write_results("echo-gate" if args.gate else "echo", report.blocks, command=sys.orig_argv)


if __name__ == "__main__":
    main()
