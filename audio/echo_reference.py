"""The far-end audio as heard, placed on the microphone's timeline.

The echo processor (:mod:`audio.echo`) compares each mic frame with what the speaker
played when the echo in it left the speaker; this is that record, fed by the sink's tap.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from audio.chunk import AudioChunk
from audio.resample import StreamResampler

__all__ = ["EchoReference"]


class EchoReference:
    """Far-end audio as heard, on the mic's timeline (thread-safe).

    :meth:`push` takes the sink's tap chunks (any rate; ``start_sample`` is clock time at
    the chunk's rate) and resamples them continuously to ``sample_rate``. soxr's "QQ"
    (cubic) recipe is used because it has no look-ahead: a reference that lagged the
    mic by the resampler's delay would be useless to the canceller. Gaps become zeros.

    A live sink stamps each chunk with the clock read in its audio callback, which
    comes late when the callback waits for the GIL (and wobbles with the audio server's
    latency reports). Placed as stamped, playback that is continuous on the device
    becomes a reference full of small gaps and overlaps, and every such jump, even of one
    millisecond, lets residual echo through while AEC3 re-adapts. So with
    ``jitter_ms`` > 0 the chunks are taken for what a device callback hands over, whole
    buffers of a fixed size (the largest chunk seen; a partly filled buffer is shorter
    and the rest of it played silence): a chunk stamped up to ``jitter_ms`` late goes
    right after the previous chunk, or after the previous chunk's buffer, and after
    silent buffers only as many as its stamp shows beyond ``jitter_ms``. A placement may
    so come out early (the canceller copes: the echo comes later) but not late: a stamp
    more than ``jitter_ms / 4`` earlier than the placement moves it there. A stamp more
    than half a second on, or further than ``jitter_ms`` after a full buffer, is a new
    start. ``jitter_ms=0`` places every chunk exactly as stamped (a virtual clock).
    """

    def __init__(self, sample_rate: int = 16000, keep_ms: int = 3000, jitter_ms: int = 0) -> None:
        self.sample_rate = int(sample_rate)
        self._keep = self.sample_rate * int(keep_ms) // 1000
        self._jitter_ms = int(jitter_ms)
        self._lock = threading.Lock()
        self._buf = np.zeros(0, np.float32)
        self._buf_start = 0  # mic-timeline sample of _buf[0]
        self._rs: StreamResampler | None = None
        self._rs_rate = 0
        self._rs_next_in = 0  # next expected chunk start (at the chunk rate)
        self._rs_out = 0  # mic-timeline sample of the resampler's next output
        self._prev_start: int | None = None  # where the previous chunk went (chunk rate)
        self._block = 0  # the largest chunk since the resampler (re)started: a device buffer
        self.snapped = 0
        """Chunks placed by the sample count rather than as stamped."""

    def push(self, chunk: AudioChunk) -> None:
        pcm = np.asarray(chunk.to_mono().to_float32().pcm, np.float32)
        if pcm.size == 0:
            return
        with self._lock:
            rate = chunk.sample_rate
            size = pcm.size
            start = self._place(chunk.start_sample, rate)
            gap = start - self._rs_next_in
            if self._prev_start is None or rate != self._rs_rate or gap < 0 or gap > rate // 2:
                self._rs = None if rate == self.sample_rate else StreamResampler(
                    rate, self.sample_rate, 1, "float32", quality="QQ"
                )
                self._rs_rate = rate
                self._rs_out = start * self.sample_rate // rate
                self._block = 0
            elif gap > 0:
                pcm = np.concatenate([np.zeros(gap, np.float32), pcm])
            self._rs_next_in = start + size
            self._prev_start, self._block = start, max(self._block, size)
            out = pcm if self._rs is None else np.asarray(self._rs.process(pcm), np.float32)
            self._store(self._rs_out, out)
            self._rs_out += out.size

    def _place(self, stamp: int, rate: int) -> int:
        """Where a chunk stamped ``stamp`` goes, at its rate (see the class docstring)."""
        late = rate * self._jitter_ms // 1000
        if late == 0 or self._prev_start is None or rate != self._rs_rate:
            return stamp
        partial = self._rs_next_in - self._prev_start < self._block
        # A partly filled buffer played silence to its end; so may whole buffers after it.
        base = self._prev_start + self._block if partial else self._rs_next_in
        error = stamp - base
        if error < -(late // 4) or error > rate // 2:
            return stamp  # placed too late so far (move it earlier), or a new start
        if error <= late:
            at = base
        elif partial:  # silent buffers in between: as few as the stamp allows
            at = base + -(-(error - late) // self._block) * self._block
        else:
            return stamp  # playback stopped and resumed on a full buffer
        self.snapped += at != stamp
        return at

    def _store(self, start: int, pcm: npt.NDArray[np.float32]) -> None:
        end = start + pcm.size
        if self._buf.size == 0 or start < self._buf_start:
            if self._buf.size == 0:
                self._buf_start = start
            else:  # writing before the kept history: drop what is older than we keep
                pcm = pcm[max(0, self._buf_start - start) :]
                start = self._buf_start
        buf_end = self._buf_start + self._buf.size
        if end > buf_end:
            self._buf = np.concatenate([self._buf, np.zeros(end - buf_end, np.float32)])
        lo = start - self._buf_start
        self._buf[lo : lo + pcm.size] = pcm
        if self._buf.size > self._keep:
            drop = self._buf.size - self._keep
            self._buf = self._buf[drop:]
            self._buf_start += drop

    @property
    def end_sample(self) -> int:
        """Mic-timeline end of the stored reference (0 before anything was pushed)."""
        with self._lock:
            return self._buf_start + self._buf.size

    def get(self, start: int, n: int) -> npt.NDArray[np.float32]:
        """Reference samples ``[start, start + n)``; zeros where nothing was heard."""
        out = np.zeros(max(0, n), np.float32)
        with self._lock:
            lo = max(start, self._buf_start)
            hi = min(start + n, self._buf_start + self._buf.size)
            if hi > lo:
                out[lo - start : hi - start] = self._buf[lo - self._buf_start : hi - self._buf_start]
        return out
