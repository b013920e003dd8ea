"""The speaker: a :class:`~audio.sinks.Sink` that plays through a PortAudio output stream.

It counts heard samples from the DAC time of each buffer (``outputBufferDacTime`` in the
callback's time info) against the stream clock, not from bytes handed over, and stamps
its tap's chunks on the stream's :class:`~audio.output_timeline.OutputTimeline`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

import numpy as np
import numpy.typing as npt

from audio.chunk import AudioChunk
from audio.clock import Clock
from audio.devices import DeviceSpec, StreamFactory, open_output_stream, resolve_device
from audio.errors import AudioError, DeviceError
from audio.output_timeline import OutputTimeline
from audio.resample import StreamResampler
from audio.sinks import Tap, mono_float

__all__ = ["SpeakerSink"]

_log = logging.getLogger(__name__)


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
        pcm = mono_float(chunk, self.sample_rate)
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
