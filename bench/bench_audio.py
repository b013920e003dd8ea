"""Audio benchmarks, ours next to the peer in one process.

- ASR: real-time factor of streaming transcription (partials every ``--partial-ms``,
  then the final decode) vs one faster-whisper ``transcribe`` of the whole utterance;
  and latency of the final transcript after the end of speech (VAD end-of-turn wait
  plus the final decode).
- TTS: time to first audio for a 12-word sentence: our clause-streaming ``StreamingTTS``
  fed word by word vs Piper's ``synthesize`` (which yields whole sentences).
- VAD: CPU time per second of audio: our ``Vad`` (webrtc, silero) vs the bare
  ``webrtcvad`` call and faster-whisper's offline silero ``get_speech_timestamps``.

Run: ``.venv/bin/python bench/bench_audio.py [--repeat 3]``. Numbers depend on the
machine and its load; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from results import add_no_write, markdown_table, write_results

RATE = 16000
SENTENCE_12 = "Sure, I will set a timer for ten minutes starting right now."
PASSAGE = [
    "Could you tell me what the weather will be like tomorrow morning?",
    "I am planning a long walk along the river with my dog.",
]


def timed(fn: Callable[[], Any], repeat: int, cpu: bool = False) -> tuple[float, Any]:
    """Median seconds over ``repeat`` runs (process CPU time if ``cpu``) and the last result."""
    clock = time.process_time if cpu else time.perf_counter
    runs: list[float] = []
    result: Any = None
    for _ in range(repeat):
        t0 = clock()
        result = fn()
        runs.append(clock() - t0)
    return statistics.median(runs), result


def load_models() -> tuple[Any, Any, Path]:
    from piper import PiperVoice

    from assistant.app.config import load_config
    from assistant.app.models import resolve_asr, resolve_voice
    from audio.asr import ASROptions, Transcriber

    cfg = load_config(Path(__file__).resolve().parents[1] / "config.yaml", env={})
    onnx, config = resolve_voice(cfg)
    voice = PiperVoice.load(onnx, config_path=config, include_alignments=True)
    asr_dir = resolve_asr(cfg)
    transcriber = Transcriber(asr_dir, ASROptions(speech_check="rms"))
    return voice, transcriber, asr_dir


def speech(voice: Any, text: str) -> np.ndarray:
    from audio.resample import resample

    audio = np.concatenate([np.asarray(c.audio_float_array, np.float32) for c in voice.synthesize(text)])
    return resample(audio, int(voice.config.sample_rate), RATE).astype(np.float32) * np.float32(0.7)


# ------------------------------------------------------------------------------ VAD


def bench_vad(audio: np.ndarray, repeat: int) -> list[tuple[str, str, str, str]]:
    import webrtcvad
    from faster_whisper.vad import VadOptions as FwVadOptions
    from faster_whisper.vad import get_speech_timestamps

    from audio.chunk import AudioChunk
    from audio.vad import Vad, VadOptions

    seconds = audio.size / RATE
    pcm16 = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    frames = [pcm16[i : i + 320].tobytes() for i in range(0, pcm16.size - 319, 320)]

    def peer_webrtc() -> int:
        v = webrtcvad.Vad(2)
        return sum(v.is_speech(f, RATE) for f in frames)

    def ours(backend: str) -> Callable[[], int]:
        def go() -> int:
            vad = Vad(VadOptions(backend=backend))  # type: ignore[arg-type]
            n = 0
            for i in range(0, audio.size, 320):
                n += len(vad.process(AudioChunk(audio[i : i + 320], RATE, i)))
            return n

        return go

    def peer_silero() -> int:
        return len(get_speech_timestamps(audio, FwVadOptions()))

    rows = []
    t_peer, _ = timed(peer_webrtc, repeat, cpu=True)
    t_ours, _ = timed(ours("webrtc"), repeat, cpu=True)
    rows.append(("VAD webrtc CPU ms per s of audio", f"{1000 * t_ours / seconds:.2f}",
                 f"{1000 * t_peer / seconds:.2f} (bare webrtcvad)", f"{t_ours / t_peer:.1f}x"))
    t_peer, _ = timed(peer_silero, repeat, cpu=True)
    t_ours, _ = timed(ours("silero"), repeat, cpu=True)
    rows.append(("VAD silero CPU ms per s of audio", f"{1000 * t_ours / seconds:.2f}",
                 f"{1000 * t_peer / seconds:.2f} (faster-whisper offline)", f"{t_ours / t_peer:.1f}x"))
    return rows


# ------------------------------------------------------------------------------ ASR


def bench_asr(transcriber: Any, asr_dir: Path, utterance: np.ndarray, partial_ms: int, repeat: int) -> list[tuple[str, str, str, str]]:
    from faster_whisper import WhisperModel

    from audio.streaming_asr import StreamingASROptions, StreamingTranscriber
    from audio.vad import VadOptions

    seconds = utterance.size / RATE
    model = WhisperModel(str(asr_dir), device="cpu", compute_type="int8")

    def peer() -> str:
        segments, _ = model.transcribe(utterance, language="en", beam_size=1, word_timestamps=True, vad_filter=False)
        return " ".join(s.text for s in segments)

    finals: list[float] = []

    def ours() -> str:
        stream = StreamingTranscriber.from_transcriber(transcriber, StreamingASROptions(partial_interval_ms=partial_ms))
        for i in range(0, utterance.size, 320):
            stream.feed(utterance[i : i + 320])
        t0 = time.perf_counter()
        text = stream.finalize().text
        finals.append(time.perf_counter() - t0)
        return text

    peer()  # warm-up
    ours()
    finals.clear()
    t_peer, peer_text = timed(peer, repeat)
    t_ours, ours_text = timed(ours, repeat)
    final_s = statistics.median(finals)
    eot_ms = VadOptions().end_of_turn_ms
    print(f"  peer transcript: {peer_text.strip()!r}\n  our final:       {ours_text!r}")
    return [
        (f"ASR real-time factor ({seconds:.1f} s utterance)", f"{t_ours / seconds:.3f} (partials every {partial_ms} ms + final)",
         f"{t_peer / seconds:.3f} (one transcribe)", f"{t_ours / t_peer:.1f}x"),
        ("ASR final latency after end of speech, ms", f"{eot_ms + 1000 * final_s:.0f} ({eot_ms} VAD + {1000 * final_s:.0f} decode)",
         f"{eot_ms + 1000 * t_peer:.0f} ({eot_ms} VAD + {1000 * t_peer:.0f} one-shot)", f"{(eot_ms + 1000 * final_s) / (eot_ms + 1000 * t_peer):.2f}x"),
    ]


# ------------------------------------------------------------------------------ TTS


def bench_tts(voice: Any, repeat: int) -> list[tuple[str, str, str, str]]:
    from audio.tts import StreamingTTS, Synthesizer

    synth = Synthesizer.from_voice(voice)
    words = SENTENCE_12.split(" ")
    assert len(words) == 12

    def peer_first() -> int:
        return int(next(iter(voice.synthesize(SENTENCE_12))).audio_int16_array.size)

    def ours_first() -> int:
        tts = StreamingTTS(synth)
        for i, w in enumerate(words):
            out = tts.feed(w if i == 0 else " " + w)
            if out:
                return int(out[0].pcm.size)
        return int(tts.finish()[0].pcm.size)

    peer_first()
    ours_first()
    t_peer, n_peer = timed(peer_first, repeat)
    t_ours, n_ours = timed(ours_first, repeat)
    rate = synth.sample_rate
    return [(
        "TTS time to first audio, 12 words, ms",
        f"{1000 * t_ours:.0f} (first clause, {n_ours / rate:.2f} s audio)",
        f"{1000 * t_peer:.0f} (whole sentence, {n_peer / rate:.2f} s audio)",
        f"{t_ours / t_peer:.2f}x",
    )]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partial-ms", type=int, default=500)
    add_no_write(parser)
    args = parser.parse_args()
    voice, transcriber, asr_dir = load_models()
    parts = [speech(voice, t) for t in PASSAGE]
    gap = np.zeros(RATE // 2, np.float32)
    utterance = np.concatenate([parts[0], gap[: RATE // 4], parts[1]])
    long_audio = np.concatenate([gap, parts[0], gap, gap, parts[1], gap] * 2)
    rows = [("metric", "ours", "peer", "ours/peer")]
    rows += bench_tts(voice, args.repeat)
    rows += bench_vad(long_audio, args.repeat)
    rows += bench_asr(transcriber, asr_dir, utterance, args.partial_ms, args.repeat)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for k, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    if not args.no_write:
        write_results("audio", markdown_table(rows[0], rows[1:]), command=sys.orig_argv)


if __name__ == "__main__":
    main()
