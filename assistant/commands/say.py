"""``assistant say``: speak text with the Piper voice, sentence by sentence.

Synthesis streams: each sentence is played (or appended to the output file) as soon as
it is ready. Without ``-o`` the audio goes to the default output device.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assistant.app.config import AppConfig

if TYPE_CHECKING:
    from audio.word_timing import TTSChunk

__all__ = ["register", "run", "read_text"]


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "say",
        help="speak text with the TTS voice (to the speaker or a WAV file)",
        description="Synthesize TEXT with the Piper voice, streaming sentence by sentence. "
        "Plays on the default output device (audio.output_device), or writes a 16-bit WAV "
        "with -o. Use TEXT '-' to read standard input.",
    )
    parser.add_argument("text", nargs="+", metavar="TEXT", help="what to say ('-' reads stdin)")
    parser.add_argument("-o", "--output", metavar="FILE.wav", help="write a WAV file instead of playing")
    parser.add_argument(
        "--voice",
        metavar="NAME|PATH",
        help="a voice name in voices/, 'default', or a .onnx path (default: models.tts_voice)",
    )
    parser.add_argument("--words", action="store_true", help="print each word's start/end time")
    parser.set_defaults(func=run)


def read_text(args: argparse.Namespace) -> str:
    parts: list[str] = list(args.text)
    text = sys.stdin.read() if parts == ["-"] else " ".join(parts)
    return text.strip()


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from assistant.app.errors import UserError
    from assistant.app.models import resolve_voice
    from audio.tts import Synthesizer, TTSOptions
    from audio.word_timing import split_words

    text = read_text(args)
    if not split_words(text):
        raise UserError("say: nothing to say (the text has no words)")
    output = Path(args.output) if args.output else None
    if output is not None and output.parent and not output.parent.is_dir():
        raise UserError(f"{output}: directory {output.parent} does not exist")
    speaker = None if output is not None else _Speaker(cfg.audio.output_device)
    onnx, config = resolve_voice(cfg, args.voice)
    synth = Synthesizer(onnx, config, TTSOptions(length_scale=cfg.tts.length_scale))
    chunks: list[TTSChunk] = []
    try:
        for chunk in synth.synthesize(text):
            chunks.append(chunk)
            if speaker is not None:
                speaker.play(chunk.pcm, chunk.sample_rate)
        if speaker is not None:
            speaker.drain()
    finally:
        if speaker is not None:
            speaker.close()
    if not chunks:
        raise UserError("say: the voice produced no audio for this text")
    if args.words:
        for c in chunks:
            for w in c.words:
                start = (c.start_sample + w.start_sample) / c.sample_rate
                end = (c.start_sample + w.end_sample) / c.sample_rate
                print(f"{start:8.3f} {end:8.3f}  {w.word}")
    if output is not None:
        import numpy as np

        from audio.wav import write_wav

        pcm = np.concatenate([c.pcm for c in chunks])
        write_wav(output, pcm, chunks[0].sample_rate, "int16")
        seconds = pcm.shape[0] / chunks[0].sample_rate
        print(f"wrote {output} ({seconds:.2f} s, {chunks[0].sample_rate} Hz)", file=sys.stderr)
    return 0


class _Speaker:
    """Blocking playback on a PortAudio output stream (opened before any synthesis)."""

    def __init__(self, device: str | int | None) -> None:
        from audio.devices import load_sounddevice
        from audio.errors import DeviceError

        try:
            sd = load_sounddevice()
        except DeviceError as exc:
            raise DeviceError(f"cannot play audio: {exc}; write a file with -o out.wav "
                              "instead") from None
        self._sd: Any = sd
        self._device = device
        self._stream: Any = None
        self._rate = 0
        self._capacity = 0  # frames the stream buffers (write_available when empty)
        self._drained = True
        try:
            sd.query_devices(device, kind="output")
        except Exception as exc:  # PortAudioError or ValueError: no such device
            name = "default output device" if device is None else f"output device {device!r}"
            raise DeviceError(f"{name}: not available ({exc}); write a file with -o out.wav instead") from None

    def play(self, pcm: Any, sample_rate: int) -> None:
        from audio.errors import DeviceError

        try:
            if self._stream is None or self._rate != sample_rate:
                self.drain()
                self.close()
                self._stream = self._sd.OutputStream(
                    samplerate=sample_rate, channels=1, dtype="int16", device=self._device
                )
                self._stream.start()
                self._rate = sample_rate
                self._capacity = int(self._stream.write_available)
            # Short blocking writes: Python gets control (and Ctrl-C) every 50 ms.
            data, step = pcm.reshape(-1, 1), max(1, sample_rate // 20)
            for lo in range(0, data.shape[0], step):
                self._stream.write(data[lo : lo + step])
            self._drained = False
        except self._sd.PortAudioError as exc:
            raise DeviceError(f"audio output failed: {exc}") from None

    def drain(self) -> None:
        """Wait until everything written has played (polling, so Ctrl-C is prompt)."""
        stream = self._stream
        if stream is None or self._drained:
            return
        deadline = time.monotonic() + self._capacity / max(1, self._rate) + 2.0
        while stream.write_available < self._capacity and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(float(stream.latency))  # the last buffer on its way to the speaker
        self._drained = True

    def close(self) -> None:
        """Release the device: after :meth:`drain` a clean stop, otherwise (Ctrl-C, an
        error) an abort that drops what is still queued at once."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            try:
                if self._drained:
                    stream.stop()
                else:
                    stream.abort()
            finally:
                stream.close()
