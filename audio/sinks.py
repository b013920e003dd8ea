"""Audio sinks that know exactly which samples were heard.

All sinks share one interface (:class:`Sink`). Positions are indices into the stream of
*kept* samples at the sink's rate: ``played_samples`` have been heard,
``queued_samples`` wait, and the next written sample gets index ``end_position``
(= played + queued). ``stop()`` drops everything not yet irrevocably on its way to the
listener and returns the position reached, so a caller that noted ``end_position``
before writing a turn's audio knows how much of that turn was heard.

- :class:`NullSink` and :class:`WavSink` model playback on the injected clock: audio
  written at clock time *w* plays from ``max(w, end of queue)`` and is heard as the
  clock passes it. On a :class:`VirtualClock` this is exact: ``stop()`` at time *t*
  reports exactly the samples scheduled before *t*. :class:`WavSink` records what was
  heard on the input's timeline (sample *i* of the file is clock time *i*, silence where
  nothing played).
- :class:`SpeakerSink` plays through PortAudio. It counts heard samples from the DAC
  time of each buffer (``outputBufferDacTime`` in the callback's time info) against the
  stream clock, not from bytes handed over.

Every sink may be given a ``tap`` called with each span of audio as it is heard (an
:class:`AudioChunk` whose ``start_sample`` is clock time at the sink's rate), which is
what echo handling needs as its far-end reference.
"""

from __future__ import annotations

import logging
import os
import threading
import wave
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from audio.chunk import AudioChunk
from audio.clock import Clock
from audio.devices import DeviceSpec, StreamFactory, open_output_stream, resolve_device
from audio.errors import AudioError, AudioFileError, AudioValueError, DeviceError
from audio.output_timeline import OutputTimeline
from audio.resample import StreamResampler

__all__ = ["Sink", "Tap", "NullSink", "WavSink", "SpeakerSink"]

_log = logging.getLogger(__name__)

Tap = Callable[[AudioChunk], None]


class Sink(Protocol):
    sample_rate: int

    def write(self, chunk: AudioChunk) -> None:
        """Queue audio for playback (never blocks on the device)."""
        ...

    @property
    def played_samples(self) -> int: ...

    @property
    def queued_samples(self) -> int: ...

    @property
    def end_position(self) -> int: ...

    def stop(self) -> int:
        """Drop queued audio; returns the position heard (see module docstring)."""
        ...

    def flush(self) -> None:
        """Wait (on the clock) until everything queued has been heard."""
        ...

    def close(self) -> None: ...


def _mono_float(chunk: AudioChunk, rate: int) -> npt.NDArray[np.float32]:
    c = chunk.to_mono().to_float32()
    if c.sample_rate != rate:
        c = c.to_rate(rate)
    return np.asarray(c.pcm, dtype=np.float32)


class _ClockSink:
    """Playback modelled on the injected clock (shared by NullSink and WavSink)."""

    def __init__(self, clock: Clock, sample_rate: int, tap: Tap | None = None) -> None:
        if sample_rate <= 0:
            raise AudioValueError(f"sink sample_rate must be positive, got {sample_rate}")
        self.clock = clock
        self.sample_rate = int(sample_rate)
        self.tap = tap
        self.tap_error: Exception | None = None
        """Set when the tap raised in the audio callback (it is then disabled)."""
        self._lock = threading.RLock()
        self._segments: deque[tuple[int, npt.NDArray[np.float32]]] = deque()  # (start time, pcm)
        self._queue_end = 0
        self._played = 0
        self._queued = 0
        self._closed = False
        self._unsubscribe = clock.subscribe(self._on_clock)

    def _on_clock(self, _now: int) -> None:
        self._advance()

    def _now(self) -> int:
        """Clock time at the sink's rate (rounded down)."""
        return self.clock.now_samples() * self.sample_rate // self.clock.sample_rate

    def _advance(self) -> int:
        spans: list[AudioChunk] = []
        with self._lock:
            now = self._now()
            while self._segments and self._segments[0][0] < now:
                start, pcm = self._segments.popleft()
                heard = min(pcm.size, now - start)
                if heard < pcm.size:
                    self._segments.appendleft((start + heard, pcm[heard:]))
                part = pcm[:heard]
                self._played += heard
                self._queued -= heard
                self._on_heard(start, part)
                spans.append(AudioChunk(part, self.sample_rate, start))
        if self.tap is not None:
            for span in spans:
                self.tap(span)
        return now

    def _on_heard(self, start: int, pcm: npt.NDArray[np.float32]) -> None:
        """Hook for subclasses; called under the lock, in time order."""

    def write(self, chunk: AudioChunk) -> None:
        if self._closed:
            raise AudioError("cannot write to a closed audio sink")
        pcm = _mono_float(chunk, self.sample_rate)
        if pcm.size == 0:
            return
        now = self._advance()
        with self._lock:
            start = max(now, self._queue_end)
            self._segments.append((start, pcm))
            self._queue_end = start + pcm.size
            self._queued += pcm.size

    @property
    def played_samples(self) -> int:
        self._advance()
        with self._lock:
            return self._played

    @property
    def queued_samples(self) -> int:
        self._advance()
        with self._lock:
            return self._queued

    @property
    def end_position(self) -> int:
        self._advance()
        with self._lock:
            return self._played + self._queued

    def stop(self) -> int:
        now = self._advance()
        with self._lock:
            self._segments.clear()
            self._queued = 0
            self._queue_end = now
            return self._played

    def flush(self) -> None:
        with self._lock:
            end = self._queue_end
        self.clock.wait_until(-(-end * self.clock.sample_rate // self.sample_rate))
        self._advance()

    def close(self) -> None:
        """Stop (queued audio is dropped; call flush() first to play it) and release."""
        if self._closed:
            return
        self.stop()
        self._closed = True
        self._unsubscribe()
        self._finish(self._now())

    def _finish(self, now: int) -> None:
        """Hook for subclasses: the sink is closing at sink time ``now``."""


class NullSink(_ClockSink):
    """Plays into nothing, but keeps exact time on the clock."""


class WavSink(_ClockSink):
    """Records what was heard to a 16-bit mono WAV on the clock's timeline.

    File sample *i* is clock time *i* (at ``sample_rate``), so the recording lines up
    with the input; silence where nothing played, up to the time of :meth:`close`.
    """

    def __init__(
        self, path: str | os.PathLike[str], clock: Clock, sample_rate: int, tap: Tap | None = None
    ) -> None:
        self.path = os.fspath(path)
        try:
            self._file = open(self.path, "wb")  # noqa: SIM115 (closed in close())
        except OSError as exc:
            raise AudioFileError(f"{self.path}: cannot write WAV ({exc.strerror or exc})") from None
        self._wave: Any = wave.open(self._file, "wb")  # noqa: SIM115 (closed in _finish)
        self._wave.setnchannels(1)
        self._wave.setsampwidth(2)
        self._wave.setframerate(int(sample_rate))
        self._file_pos = 0
        super().__init__(clock, sample_rate, tap)

    def _write_silence(self, n: int) -> None:
        block = 1 << 16
        while n > 0:
            step = min(n, block)
            self._wave.writeframes(bytes(2 * step))
            self._file_pos += step
            n -= step

    def _on_heard(self, start: int, pcm: npt.NDArray[np.float32]) -> None:
        if start > self._file_pos:
            self._write_silence(start - self._file_pos)
        skip = max(0, self._file_pos - start)
        data = np.clip(np.round(pcm[skip:].astype(np.float64) * 32768.0), -32768, 32767)
        self._wave.writeframes(data.astype("<i2").tobytes())
        self._file_pos += pcm.size - skip

    def _finish(self, now: int) -> None:
        with self._lock:
            if now > self._file_pos:
                self._write_silence(now - self._file_pos)
            try:
                self._wave.close()  # patches the header sizes
            finally:
                self._file.close()


class SpeakerSink:
    """Plays through a PortAudio output stream; knows which samples were heard.

    The callback copies queued audio into the device buffer and records, per buffer,
    its DAC time (``outputBufferDacTime``; ``currentTime + latency`` when the host API
    reports 0). ``played_samples`` compares those with the stream time. ``stop()``
    empties the queue under the callback's lock, so the next callback (within one
    device buffer) plays silence; it returns the end of what was handed to PortAudio,
    which will all be heard (it cannot be recalled without aborting the stream).

    The tap's chunks are stamped on the stream's :class:`OutputTimeline` (its frame
    count from one anchor), not each with its own reported time: the echo reference
    must not move while the stream plays (see :mod:`audio.output_timeline`).

    If the device rejects ``sample_rate``, the stream opens at ``fallback_rate`` (by
    default the device's default rate) and audio is resampled on ``write``; positions
    stay at ``sample_rate`` (converted by the rate ratio, so exact to within the
    resampler's few-sample delay).
    """

    def __init__(
        self,
        clock: Clock,
        sample_rate: int,
        device: DeviceSpec = None,
        buffer_ms: int = 20,
        tap: Tap | None = None,
        stream_factory: StreamFactory | None = None,
        fallback_rate: int | None = None,
    ) -> None:
        self.clock = clock
        self.sample_rate = int(sample_rate)
        self.tap = tap
        self.tap_error: Exception | None = None
        """Set when the tap raised in the audio callback (it is then disabled)."""
        self._lock = threading.Lock()
        self._queue: deque[npt.NDArray[np.float32]] = deque()
        self._queued_dev = 0
        self._handed = 0  # device samples handed to PortAudio
        self._heard_done = 0  # device samples of buffers entirely past their DAC time
        self._buffers: deque[tuple[float, int, int]] = deque()  # (dac time s, first, count)
        self._frames = 0  # device frames of every callback, silent ones included
        self.timeline = OutputTimeline()
        """Where each device frame is heard on the clock: the tap's stamps."""
        self.underflows = 0
        self._closed = False
        if stream_factory is None:
            info = resolve_device(device, "output")
            factory: StreamFactory = open_output_stream
            dev: int | None = info.index
            fallback_rate = fallback_rate or int(info.default_samplerate)
        else:
            factory, dev = stream_factory, device if isinstance(device, int) else None
        self.device_rate = self.sample_rate
        try:
            self._stream = self._open(factory, dev, buffer_ms)
        except DeviceError:
            if not fallback_rate or fallback_rate == self.sample_rate:
                raise
            self.device_rate = fallback_rate
            self._stream = self._open(factory, dev, buffer_ms)
        self._resampler: StreamResampler | None = self._new_resampler()
        self._stream.start()

    def _open(self, factory: StreamFactory, dev: int | None, buffer_ms: int) -> Any:
        return factory(
            device=dev, samplerate=self.device_rate, channels=1,
            blocksize=max(1, self.device_rate * int(buffer_ms) // 1000), callback=self._callback,
        )

    def _new_resampler(self) -> StreamResampler | None:
        if self.device_rate == self.sample_rate:
            return None
        return StreamResampler(self.sample_rate, self.device_rate, 1, "float32")

    @property
    def latency_s(self) -> float:
        """The output latency PortAudio reports for the stream (seconds)."""
        return float(getattr(self._stream, "latency", 0.0) or 0.0)

    def _to_sink(self, device_samples: int) -> int:
        return device_samples * self.sample_rate // self.device_rate

    # -- PortAudio thread ------------------------------------------------------------
    def _callback(self, outdata: npt.NDArray[Any], frames: int, time_info: Any, status: Any) -> None:
        with self._lock:
            filled = 0
            while filled < frames and self._queue:
                head = self._queue[0]
                take = min(frames - filled, head.size)
                outdata[filled : filled + take, 0] = head[:take]
                if take == head.size:
                    self._queue.popleft()
                else:
                    self._queue[0] = head[take:]
                filled += take
            outdata[filled:] = 0
            self._queued_dev -= filled
            cur = float(getattr(time_info, "currentTime", 0.0) or 0.0)
            dac = float(getattr(time_info, "outputBufferDacTime", 0.0) or 0.0)
            if dac <= 0.0:
                dac = cur + float(getattr(self._stream, "latency", 0.0) or 0.0)
            first = self._handed
            if filled:
                self._buffers.append((dac, first, filled))
                self._handed += filled
            underflow = status is not None and bool(getattr(status, "output_underflow", False))
            self.underflows += underflow
            # When this buffer is heard, as reported: late by the wait for the GIL
            # before this line, and with the host's latency wobble; the timeline
            # keeps one anchor for the stream (see audio/output_timeline.py).
            rate = self.clock.sample_rate
            heard_at = ((self.clock.now_samples() + int(round((dac - cur) * rate)))
                        * self.device_rate // rate)
            frame, self._frames = self._frames, self._frames + int(frames)
            start = self.timeline.place(frame, heard_at, underflow, audible=filled > 0)
        if filled and self.tap is not None:
            chunk = AudioChunk(np.array(outdata[:filled, 0], np.float32), self.device_rate, start)
            try:
                self.tap(chunk)
            except Exception as exc:  # a raise here would abort the PortAudio stream
                # Playback and its position must go on (barge-in depends on them); the
                # echo reference is what is lost, so say so once and stop calling it.
                self.tap_error = exc
                self.tap = None
                _log.error("speaker tap failed; echo handling now runs without a "
                           "reference: %s", exc, exc_info=exc)

    # -- control thread --------------------------------------------------------------
    def write(self, chunk: AudioChunk) -> None:
        if self._closed:
            raise AudioError("cannot write to a closed audio sink")
        pcm = _mono_float(chunk, self.sample_rate)
        if self._resampler is not None:
            pcm = np.asarray(self._resampler.process(pcm), np.float32)
        if pcm.size == 0:
            return
        with self._lock:
            self._queue.append(pcm)
            self._queued_dev += pcm.size

    def _played_dev(self) -> int:
        now = float(self._stream.time)
        with self._lock:
            while self._buffers:
                dac, first, count = self._buffers[0]
                if dac + count / self.device_rate > now:
                    break
                self._buffers.popleft()
                self._heard_done = first + count
            heard = self._heard_done
            if self._buffers:
                dac, first, count = self._buffers[0]
                if now > dac:
                    heard = first + min(count, int((now - dac) * self.device_rate))
            return heard

    @property
    def played_samples(self) -> int:
        return self._to_sink(self._played_dev())

    @property
    def queued_samples(self) -> int:
        return self.end_position - self.played_samples

    @property
    def end_position(self) -> int:
        with self._lock:
            return self._to_sink(self._handed + self._queued_dev)

    def stop(self) -> int:
        with self._lock:
            self._queue.clear()
            self._queued_dev = 0
            handed = self._handed
        self._resampler = self._new_resampler()
        return self._to_sink(handed)

    def flush(self) -> None:
        """Wait until the queue has drained and its last buffer reached the DAC."""
        with self._lock:
            target = self._handed + self._queued_dev
        budget = target - self._played_dev()
        limit = self.clock.now_samples() + (budget * self.clock.sample_rate) // self.device_rate
        limit += self.clock.sample_rate  # at most one second more than the audio left
        step = max(1, self.clock.sample_rate // 100)
        while self._played_dev() < target and self.clock.now_samples() < limit:
            self.clock.wait_until(self.clock.now_samples() + step)

    def close(self) -> None:
        """Stop playback (queued audio is dropped) and release the device. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.stop()
        try:
            self._stream.stop()
        finally:
            self._stream.close()
