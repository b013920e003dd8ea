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
- :class:`~audio.speaker_sink.SpeakerSink` plays through PortAudio (its own module).

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
from audio.errors import AudioError, AudioFileError, AudioValueError

__all__ = ["Sink", "Tap", "NullSink", "WavSink", "mono_float"]

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


def mono_float(chunk: AudioChunk, rate: int) -> npt.NDArray[np.float32]:
    """`chunk` as one channel of float32 samples at `rate` (resampled if need be)."""
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
        pcm = mono_float(chunk, self.sample_rate)
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
