"""Audio sources: a WAV file (paced by the injected clock) and the microphone.

Every source yields :class:`AudioChunk` frames of ``frame_ms`` at the internal rate
(16 kHz mono float32 by default), stamped with ``start_sample`` on the injected clock.
Whatever comes in is converted, never trusted: any rate is resampled with the streaming
resampler, channels are averaged, integer samples are scaled, out-of-range samples are
clipped and NaN/inf samples are replaced by silence, each counted in
:class:`SourceStats`. A live stream never dies of bad samples; a file that cannot be
read faithfully is an :class:`AudioFileError` naming it, raised before the first chunk.
"""

from __future__ import annotations

import math
import os
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from audio.chunk import AudioChunk
from audio.clock import Clock
from audio.devices import DeviceSpec, StreamFactory, open_input_stream, resolve_device
from audio.errors import AudioValueError, DeviceError
from audio.resample import StreamResampler

__all__ = ["SourceStats", "StreamConverter", "WavFileSource", "MicSource"]

_SILENCE_GAP_LIMIT_S = 10.0
_POLL_S = 0.05
"""How often an idle microphone iterator checks that its stream is alive."""
"""Longest gap (dropped mic blocks) filled with silence; longer gaps re-anchor the stream."""


@dataclass(frozen=True)
class SourceStats:
    """Counters of what a source had to fix or drop (samples at the input rate)."""

    frames_out: int = 0
    """Chunks yielded."""
    clipped_samples: int = 0
    """Samples outside [-1, 1], clipped."""
    invalid_samples: int = 0
    """NaN/inf samples, replaced by 0."""
    dropped_blocks: int = 0
    """Mic callback blocks dropped because the bounded queue was full."""
    dropped_samples: int = 0
    """Samples in those blocks (replaced by silence so the timeline stays true)."""
    device_overflows: int = 0
    """Blocks PortAudio itself flagged ``input_overflow``."""


class StreamConverter:
    """Turns blocks of arbitrary PCM into fixed-size, time-stamped frames.

    ``push`` accepts int16/int32/uint8/float arrays, 1-D or ``(frames, channels)``.
    Output chunks are float32 mono at ``out_rate``, ``frame_samples`` long (the last
    one, from :meth:`finish`, may be shorter), the first starting at ``start_sample``.
    """

    def __init__(self, in_rate: int, out_rate: int, frame_samples: int, start_sample: int = 0) -> None:
        if frame_samples <= 0:
            raise AudioValueError(f"frame size must be positive, got {frame_samples}")
        self.in_rate = int(in_rate)
        self.out_rate = int(out_rate)
        self.frame_samples = int(frame_samples)
        self._resampler = StreamResampler(self.in_rate, self.out_rate, 1, "float32")
        self._pending = np.zeros(0, np.float32)
        self._next_start = int(start_sample)
        self.clipped_samples = 0
        self.invalid_samples = 0
        self.frames_out = 0

    @property
    def next_start(self) -> int:
        """``start_sample`` of the next chunk to come out."""
        return self._next_start

    def push(self, pcm: npt.ArrayLike) -> list[AudioChunk]:
        """Convert one block; returns the whole frames it completed."""
        mono = self._sanitize(np.asarray(pcm))
        if mono.size == 0:
            return []
        return self._emit(self._resampler.process(mono), final=False)

    def push_silence(self, in_samples: int) -> list[AudioChunk]:
        """Stand in for ``in_samples`` of missing input with silence."""
        if in_samples <= 0:
            return []
        return self._emit(self._resampler.process(np.zeros(int(in_samples), np.float32)), final=False)

    def finish(self) -> list[AudioChunk]:
        """Drain the resampler and emit the last (possibly short) frame."""
        return self._emit(self._resampler.flush(), final=True)

    def _sanitize(self, arr: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
        if arr.ndim not in (1, 2):
            raise AudioValueError(f"audio block must be 1-D or (frames, channels), got shape {arr.shape}")
        if arr.dtype == np.int16:
            f = arr.astype(np.float32) / np.float32(32768.0)
        elif arr.dtype == np.int32:
            f = (arr.astype(np.float64) / 2147483648.0).astype(np.float32)
        elif arr.dtype == np.uint8:
            f = (arr.astype(np.float32) - np.float32(128.0)) / np.float32(128.0)
        elif arr.dtype.kind == "f":
            f = arr.astype(np.float32)
        else:
            raise AudioValueError(f"unsupported sample type {arr.dtype} (use int16, int32, uint8 or float)")
        if f.ndim == 2:
            if f.shape[1] == 0:
                raise AudioValueError("audio block has zero channels")
            f = f.mean(axis=1, dtype=np.float64).astype(np.float32) if f.shape[1] > 1 else f[:, 0]
        if f.size:
            bad = ~np.isfinite(f)
            if bad.any():
                self.invalid_samples += int(bad.sum())
                f = np.where(bad, np.float32(0.0), f)
            over = np.abs(f) > 1.0
            if over.any():
                self.clipped_samples += int(over.sum())
                f = np.clip(f, -1.0, 1.0)
        return np.ascontiguousarray(f, dtype=np.float32)

    def _emit(self, out: npt.NDArray[Any], final: bool) -> list[AudioChunk]:
        self._pending = np.concatenate([self._pending, np.asarray(out, np.float32).reshape(-1)])
        chunks: list[AudioChunk] = []
        n = self.frame_samples
        while self._pending.size >= n or (final and self._pending.size):
            take = min(n, self._pending.size)
            chunks.append(AudioChunk(self._pending[:take].copy(), self.out_rate, self._next_start))
            self._pending = self._pending[take:]
            self._next_start += take
        self.frames_out += len(chunks)
        return chunks


def _clock_samples(samples: int, rate: int, clock: Clock, round_up: bool) -> int:
    num = int(samples) * clock.sample_rate
    return -(-num // rate) if round_up else num // rate


class WavFileSource:
    """Plays a WAV file as a stream of frames, paced by the injected clock.

    With a :class:`VirtualClock` it runs as fast as the consumer pulls (each frame jumps
    the clock to the frame's end); with a :class:`DeviceClock` it waits, so frames come
    out in real time. The file is read and validated on construction, so a bad file is
    an :class:`AudioFileError` before anything streams. Each iteration starts at the
    clock's current time.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock,
        sample_rate: int = 16000,
        frame_ms: int = 20,
    ) -> None:
        from audio.wav import read_wav

        self.path = os.fspath(path)
        self.clock = clock
        self.sample_rate = int(sample_rate)
        self.frame_samples = self.sample_rate * int(frame_ms) // 1000
        if self.frame_samples <= 0:
            raise AudioValueError(f"frame_ms must be positive, got {frame_ms}")
        pcm, rate = read_wav(self.path)
        self.file_rate = int(rate)
        self.file_channels = 1 if pcm.ndim == 1 else int(pcm.shape[1])
        self._pcm = pcm
        self._stats = SourceStats()

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self._pcm.shape[0] / self.file_rate

    @property
    def stats(self) -> SourceStats:
        return self._stats

    def __iter__(self) -> Iterator[AudioChunk]:
        start = self.clock.now_samples() * self.sample_rate // self.clock.sample_rate
        conv = StreamConverter(self.file_rate, self.sample_rate, self.frame_samples, start)
        block = max(1, math.ceil(self.frame_samples * self.file_rate / self.sample_rate))
        total = self._pcm.shape[0]
        for lo in range(0, total, block):
            yield from self._paced(conv, conv.push(self._pcm[lo : lo + block]))
        yield from self._paced(conv, conv.finish())

    def _paced(self, conv: StreamConverter, chunks: list[AudioChunk]) -> Iterator[AudioChunk]:
        for chunk in chunks:
            self.clock.wait_until(_clock_samples(chunk.end_sample, self.sample_rate, self.clock, True))
            self._stats = SourceStats(
                frames_out=conv.frames_out,
                clipped_samples=conv.clipped_samples,
                invalid_samples=conv.invalid_samples,
            )
            yield chunk


class MicSource:
    """The microphone through PortAudio; the callback never blocks.

    The callback copies each block into a bounded queue (``queue_blocks``); when the
    queue is full the block is dropped and counted, and the consumer later fills the
    gap with silence so that time stamps stay true. The first block's ADC time
    (``inputBufferAdcTime``, or the callback time when the host API reports 0) anchors
    the stream on the injected clock; after that, time advances by samples.

    Iterate to get frames; :meth:`close` (from any thread) ends the iteration.
    """

    def __init__(
        self,
        clock: Clock,
        sample_rate: int = 16000,
        frame_ms: int = 20,
        device: DeviceSpec = None,
        queue_blocks: int = 500,
        channels: int = 1,
        stream_factory: StreamFactory | None = None,
        device_rate: int | None = None,
        stall_timeout_s: float = 5.0,
    ) -> None:
        self.clock = clock
        self.sample_rate = int(sample_rate)
        self.stall_timeout_s = stall_timeout_s
        """No block for this long from a running stream is a dead microphone."""
        self.frame_samples = self.sample_rate * int(frame_ms) // 1000
        if self.frame_samples <= 0 or queue_blocks <= 0:
            raise AudioValueError("mic frame_ms and queue size must be positive")
        self._queue: queue.Queue[tuple[int, npt.NDArray[Any]]] = queue.Queue(maxsize=int(queue_blocks))
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._device_index = 0  # device samples seen by the callback, dropped ones included
        self._anchor: int | None = None  # clock sample of device sample 0
        self._dropped_blocks = 0
        self._dropped_samples = 0
        self._device_overflows = 0
        self._conv: StreamConverter | None = None
        if stream_factory is None:
            info = resolve_device(device, "input")
            rate = device_rate or int(info.default_samplerate)
            factory: StreamFactory = open_input_stream
            dev: int | None = info.index
        else:
            rate = device_rate or self.sample_rate
            factory, dev = stream_factory, device if isinstance(device, int) else None
        self.device_rate = int(rate)
        block = max(1, self.device_rate * int(frame_ms) // 1000)
        self._stream = factory(
            device=dev, samplerate=self.device_rate, channels=int(channels), blocksize=block,
            callback=self._callback,
        )
        self._started = False

    # -- PortAudio thread ------------------------------------------------------------
    def _callback(self, indata: npt.NDArray[Any], frames: int, time_info: Any, status: Any) -> None:
        # Runs on the audio thread: no blocking, no allocation beyond one copy.
        with self._lock:
            if status is not None and getattr(status, "input_overflow", False):
                self._device_overflows += 1
            if self._anchor is None:
                now = self.clock.now_samples()
                adc = float(getattr(time_info, "inputBufferAdcTime", 0.0) or 0.0)
                cur = float(getattr(time_info, "currentTime", 0.0) or 0.0)
                lag_s = cur - adc if adc > 0.0 and cur >= adc else frames / self.device_rate
                # Clamped: a stream opened right at the clock's origin would be negative.
                self._anchor = max(0, now - int(round(lag_s * self.clock.sample_rate)))
            index = self._device_index
            self._device_index += int(frames)
        if frames <= 0 or self._closed.is_set():
            return
        try:
            self._queue.put_nowait((index, np.array(indata, copy=True)))
        except queue.Full:
            with self._lock:
                self._dropped_blocks += 1
                self._dropped_samples += int(frames)

    # -- consumer side ---------------------------------------------------------------
    @property
    def stats(self) -> SourceStats:
        conv = self._conv
        with self._lock:
            return SourceStats(
                frames_out=conv.frames_out if conv else 0,
                clipped_samples=conv.clipped_samples if conv else 0,
                invalid_samples=conv.invalid_samples if conv else 0,
                dropped_blocks=self._dropped_blocks,
                dropped_samples=self._dropped_samples,
                device_overflows=self._device_overflows,
            )

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._stream.start()

    def _check_alive(self, waited_s: float) -> None:
        """A dead stream never calls back: say so instead of waiting forever."""
        if getattr(self._stream, "active", True) is False:
            raise DeviceError("the microphone stream stopped (device unplugged or the "
                              "audio server went away)")
        if waited_s >= self.stall_timeout_s:
            raise DeviceError(f"the microphone delivered no audio for {waited_s:.0f} s "
                              "(device unplugged or muted by the system?)")

    def close(self) -> None:
        """Stop capturing; iteration ends after the queued blocks. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._stream.stop()
        finally:
            self._stream.close()

    def __iter__(self) -> Iterator[AudioChunk]:
        self.start()
        expected = 0  # next device sample index the converter has not seen
        waited = 0.0  # seconds without a block
        while True:
            try:
                index, block = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if self._closed.is_set():
                    break
                waited += _POLL_S
                self._check_alive(waited)
                continue
            waited = 0.0
            if self._conv is None:
                with self._lock:
                    anchor = self._anchor or 0
                start = anchor * self.sample_rate // self.clock.sample_rate
                self._conv = StreamConverter(self.device_rate, self.sample_rate, self.frame_samples, start)
                expected = index
            gap = index - expected
            if 0 < gap <= _SILENCE_GAP_LIMIT_S * self.device_rate:
                yield from self._conv.push_silence(gap)
            elif gap > 0:  # a very long gap: restart the timeline at the right place
                yield from self._conv.finish()
                old = self._conv
                start = old.next_start + gap * self.sample_rate // self.device_rate
                self._conv = StreamConverter(self.device_rate, self.sample_rate, self.frame_samples, start)
                self._conv.frames_out = old.frames_out
                self._conv.clipped_samples = old.clipped_samples
                self._conv.invalid_samples = old.invalid_samples
            expected = index + int(block.shape[0])
            yield from self._conv.push(block)
        if self._conv is not None:
            with self._lock:
                tail = self._device_index - expected  # blocks dropped after the last one kept
            if 0 < tail <= _SILENCE_GAP_LIMIT_S * self.device_rate:
                yield from self._conv.push_silence(tail)
            yield from self._conv.finish()
