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

    Chunks go where they are stamped: a live sink stamps them on its stream's own
    timeline (:class:`audio.output_timeline.OutputTimeline`), so playback that is
    continuous on the device is continuous here, and a virtual clock's stamps are exact.
    """

    def __init__(self, sample_rate: int = 16000, keep_ms: int = 3000) -> None:
        self.sample_rate = int(sample_rate)
        self._keep = self.sample_rate * int(keep_ms) // 1000
        self._lock = threading.Lock()
        self._buf = np.zeros(0, np.float32)
        self._buf_start = 0  # mic-timeline sample of _buf[0]
        self._rs: StreamResampler | None = None
        self._rs_rate = 0  # the rate of the chunks the resampler takes; 0 before the first
        self._rs_next_in = 0  # next expected chunk start (at the chunk rate)
        self._rs_out = 0  # mic-timeline sample of the resampler's next output

    def push(self, chunk: AudioChunk) -> None:
        pcm = np.asarray(chunk.to_mono().to_float32().pcm, np.float32)
        if pcm.size == 0:
            return
        with self._lock:
            rate = chunk.sample_rate
            size = pcm.size
            start = chunk.start_sample
            gap = start - self._rs_next_in
            if rate != self._rs_rate or gap < 0 or gap > rate // 2:
                self._rs = None if rate == self.sample_rate else StreamResampler(
                    rate, self.sample_rate, 1, "float32", quality="QQ"
                )
                self._rs_rate = rate
                self._rs_out = start * self.sample_rate // rate
            elif gap > 0:
                pcm = np.concatenate([np.zeros(gap, np.float32), pcm])
            self._rs_next_in = start + size
            out = pcm if self._rs is None else np.asarray(self._rs.process(pcm), np.float32)
            self._store(self._rs_out, out)
            self._rs_out += out.size

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
