"""Replies on the sink: which samples are whose, how much was heard, when one is over.

Sink positions count every sample ever queued (see :mod:`audio.sinks`); a reply's
audio is the span from the position before its first write. :class:`ReplyPlayback`
turns positions into reply-relative samples at the TTS rate (what word timings use),
detects the start and the end of playback, and does the barge-in arithmetic: how much
had been heard when the interruption was detected and how much leaked after it.
:class:`PlaybackController` holds the one reply that may play at a time and drops the
audio of any other turn (stale audio of an interrupted or withdrawn reply is never
played).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from audio.chunk import AudioChunk
from audio.sinks import Sink
from audio.word_timing import TTSChunk

__all__ = ["ReplyPlayback", "StopReport", "PlaybackController", "Stopped"]


@dataclass(frozen=True)
class StopReport:
    """What a barge-in stop did."""

    heard_samples: int
    """Reply samples (TTS rate) heard in total, the in-flight ones included."""
    heard_ms: int
    played_at_detection_ms: int
    """Reply audio heard when the barge-in was detected."""
    leaked_ms: int
    """Reply audio heard after the detection (processing lag plus device buffer)."""
    stopped_at_ms: int
    """Clock time at which the last reply sample is heard."""


@dataclass
class ReplyPlayback:
    """Bookkeeping for one reply on one sink."""

    turn_id: int
    tts_rate: int
    """Hz of the TTS chunks."""
    speech_end_ms: int
    """End of the user speech this reply answers."""
    endpoint_ms: int
    """When the end of that turn was detected."""
    gain: float = 1.0
    """Linear gain applied on the way to the sink."""
    chunks: list[TTSChunk] = field(default_factory=list)
    start_pos: int | None = None
    """Sink position of the reply's first sample (None until the first write)."""
    end_pos: int = 0
    tts_done: bool = False
    stopped: bool = False
    audio_started_ms: int | None = None

    # ---------------------------------------------------------------- writing

    def write(self, sink: Sink, chunk: TTSChunk, now_ms: int) -> bool:
        """Queue a chunk; returns True if it is the reply's first audio."""
        if self.stopped:
            return False
        first = self.start_pos is None
        if first:
            self.start_pos = sink.end_position
            self.audio_started_ms = now_ms
        pcm = np.asarray(chunk.pcm, np.float32) / np.float32(32768.0)
        if self.gain != 1.0:
            pcm = pcm * np.float32(self.gain)
        sink.write(AudioChunk(pcm, chunk.sample_rate, chunk.start_sample))
        self.chunks.append(chunk)
        self.end_pos = sink.end_position
        return first

    # ---------------------------------------------------------------- positions

    def _to_tts(self, sink_samples: int, sink_rate: int) -> int:
        return sink_samples * self.tts_rate // sink_rate

    def total_ms(self, sink: Sink) -> int:
        if self.start_pos is None:
            return 0
        return (self.end_pos - self.start_pos) * 1000 // sink.sample_rate

    def heard_sink_samples(self, sink: Sink) -> int:
        if self.start_pos is None:
            return 0
        return max(0, min(sink.played_samples, self.end_pos) - self.start_pos)

    def finished(self, sink: Sink) -> bool:
        """All audio produced and heard (or none will come)."""
        if not self.tts_done:
            return False
        if self.start_pos is None:
            return True
        return sink.played_samples >= self.end_pos

    # ---------------------------------------------------------------- barge-in

    def stop(self, sink: Sink, *, detected_ms: int, now_ms: int) -> StopReport:
        """Stop the sink now for a barge-in detected at ``detected_ms``."""
        self.stopped = True
        rate = sink.sample_rate
        played_now = sink.played_samples
        pos = sink.stop()  # everything that will still be heard ends here
        start = self.start_pos if self.start_pos is not None else pos
        end = self.end_pos if self.start_pos is not None else pos
        heard = max(0, min(pos, end) - start)
        # Playback runs at 1x, so what was heard at detection is now's position minus the
        # audio played since (never before the reply's start).
        lag = max(0, now_ms - detected_ms) * rate // 1000
        at_detection = max(0, min(played_now - lag, end) - start)
        in_flight_ms = max(0, pos - played_now) * 1000 // rate
        return StopReport(
            heard_samples=self._to_tts(heard, rate),
            heard_ms=heard * 1000 // rate,
            played_at_detection_ms=at_detection * 1000 // rate,
            leaked_ms=max(0, heard - at_detection) * 1000 // rate,
            stopped_at_ms=now_ms + in_flight_ms,
        )


@dataclass(frozen=True)
class Stopped:
    """A reply stopped before its end: its bookkeeping and what the stop did."""

    playback: ReplyPlayback
    report: StopReport


class PlaybackController:
    """The reply that owns the sink, from its start (before any audio) to its end."""

    def __init__(self, sink: Sink, tts_rate: int, *, gain_db: float = 0.0) -> None:
        self.sink = sink
        self.tts_rate = tts_rate
        self._gain = 10 ** (gain_db / 20)
        self._current: ReplyPlayback | None = None

    @property
    def current(self) -> ReplyPlayback | None:
        return self._current

    @property
    def playing_turn_id(self) -> int | None:
        """The reply that owns the sink (playing, or started and not yet audible)."""
        return self._current.turn_id if self._current is not None else None

    def start(self, turn_id: int, *, speech_end_ms: int, endpoint_ms: int) -> None:
        self._current = ReplyPlayback(turn_id=turn_id, tts_rate=self.tts_rate,
                                      speech_end_ms=speech_end_ms, endpoint_ms=endpoint_ms,
                                      gain=self._gain)

    def write(self, turn_id: int, chunk: TTSChunk, now_ms: int) -> bool:
        """Queue a chunk of ``turn_id`` (dropped unless it owns the sink); True if it is
        the reply's first audio."""
        cur = self._current
        if cur is None or cur.turn_id != turn_id or cur.stopped:
            return False
        return cur.write(self.sink, chunk, now_ms)

    def tts_done(self, turn_id: int) -> None:
        if self._current is not None and self._current.turn_id == turn_id:
            self._current.tts_done = True

    def poll(self) -> ReplyPlayback | None:
        """The reply, once all of it was produced and heard (it no longer owns the sink)."""
        cur = self._current
        if cur is None or cur.stopped or not cur.finished(self.sink):
            return None
        self._current = None
        return cur

    def stop(self, turn_id: int, *, detected_ms: int, now_ms: int) -> Stopped | None:
        """Stop ``turn_id`` now (barge-in or interrupt); None if it does not own the sink."""
        cur = self._current
        if cur is None or cur.turn_id != turn_id:
            return None
        self._current = None
        return Stopped(cur, cur.stop(self.sink, detected_ms=detected_ms, now_ms=now_ms))

    def withdraw(self, turn_id: int) -> None:
        """Drop ``turn_id`` before it was heard (nothing of it is kept)."""
        cur = self._current
        if cur is not None and cur.turn_id == turn_id:
            self._current = None
            cur.stopped = True
            self.sink.stop()
