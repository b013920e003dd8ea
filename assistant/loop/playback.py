"""Replies on the sink: which samples are whose, how much was heard, when one is over.

Sink positions count every sample ever queued (see :mod:`audio.sinks`); a reply's
audio is the span from the position before its first write. :class:`ReplyPlayback`
turns positions into reply-relative samples at the TTS rate (what word timings use),
detects the start and the end of playback, and does the barge-in arithmetic: how much
had been heard when the interruption was detected and how much leaked after it. A
reply can also *pause* (the same stop, its audio kept) and *resume* from the start of
the word it stopped in: the rest of its chunks are written again from there, so the
sink's positions map onto the reply's samples piecewise (``_base_pos`` ->
``_base_reply``).
:class:`PlaybackController` holds the one reply that may play at a time and drops the
audio of any other turn (stale audio of an interrupted or withdrawn reply is never
played).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from audio.chunk import AudioChunk
from audio.sinks import Sink
from audio.word_timing import TTSChunk, resume_sample, words_between

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
    paused: StopReport | None = None
    """What the pause in progress did (the reply's audio is kept); None when playing."""
    paused_at_ms: int = 0
    """When the latest pause's last sample was heard (clock ms)."""
    _base_pos: int = 0
    """Sink position at which reply sample ``_base_reply`` (sink rate) plays."""
    _base_reply: int = 0
    _heard_before: int = 0
    """Reply samples (sink rate) heard before the latest resume."""

    # ---------------------------------------------------------------- writing

    def write(self, sink: Sink, chunk: TTSChunk, now_ms: int) -> bool:
        """Queue a chunk; returns True if it is the reply's first audio."""
        if self.stopped:
            return False
        first = self.start_pos is None
        if first:
            self.start_pos = self._base_pos = sink.end_position
            self.audio_started_ms = now_ms
        self.chunks.append(chunk)
        # While paused it is kept for the resume; a chunk of no audio (a text-only
        # reply's) has nothing to hold back, and a resume never sends it again.
        if self.paused is None or not chunk.num_samples:
            self._send(sink, chunk, 0)
        return first

    def _send(self, sink: Sink, chunk: TTSChunk, skip: int) -> None:
        """Queue ``chunk`` without its first ``skip`` samples."""
        pcm = np.asarray(chunk.pcm[skip:], np.float32) / np.float32(32768.0)
        if self.gain != 1.0:
            pcm = pcm * np.float32(self.gain)
        if pcm.size or not skip:  # an empty chunk still carries text (a text-only reply)
            sink.write(AudioChunk(pcm, chunk.sample_rate, chunk.start_sample + skip))
        self.end_pos = sink.end_position

    # ---------------------------------------------------------------- positions

    def _to_tts(self, sink_samples: int, sink_rate: int) -> int:
        return sink_samples * self.tts_rate // sink_rate

    def total_ms(self, sink: Sink) -> int:
        """Length of the reply's audio (not counting words heard twice after a resume)."""
        if self.start_pos is None:
            return 0
        return (self._base_reply + self.end_pos - self._base_pos) * 1000 // sink.sample_rate

    def heard_sink_samples(self, sink: Sink) -> int:
        """Furthest reply position heard (sink rate)."""
        if self.start_pos is None:
            return 0
        now = max(0, min(sink.played_samples, self.end_pos) - self._base_pos)
        return max(self._heard_before, self._base_reply + now) if now else self._heard_before

    def words_heard_lately(self, sink: Sink, window_ms: int) -> list[str]:
        """The reply's words heard (or being heard) in the last ``window_ms`` of its audio
        up to the furthest point heard, in order."""
        heard = self._to_tts(self.heard_sink_samples(sink), sink.sample_rate)
        return words_between(self.chunks, heard - self.tts_rate * window_ms // 1000, heard)

    def finished(self, sink: Sink) -> bool:
        """All audio produced and heard (or none will come); never while paused."""
        if not self.tts_done or self.paused is not None:
            return False
        if self.start_pos is None:
            return True
        return sink.played_samples >= self.end_pos

    # ---------------------------------------------------------------- barge-in

    def stop(self, sink: Sink, *, detected_ms: int, now_ms: int) -> StopReport:
        """Stop the sink now for a barge-in detected at ``detected_ms`` (a paused reply:
        what its pause did, less any audio in flight at the pause that the sink can
        still hold back now -- a network client that kept playing its buffer)."""
        self.stopped = True
        if self.paused is not None:
            return self._settle(sink, self.paused, now_ms)
        return self._halt(sink, detected_ms=detected_ms, now_ms=now_ms)

    def _settle(self, sink: Sink, report: StopReport, now_ms: int) -> StopReport:
        pos = sink.stop()  # a device or clock sink: the position its pause returned
        if self.start_pos is None:
            return report
        rate = sink.sample_rate
        heard = max(self._heard_before, self._base_reply - self._base_pos + min(pos, self.end_pos))
        if self._to_tts(heard, rate) >= report.heard_samples:
            return report
        heard_ms = heard * 1000 // rate
        return replace(report, heard_samples=self._to_tts(heard, rate), heard_ms=heard_ms,
                       leaked_ms=max(0, heard_ms - report.played_at_detection_ms),
                       stopped_at_ms=min(report.stopped_at_ms, now_ms))

    def pause(self, sink: Sink, *, detected_ms: int, now_ms: int) -> StopReport:
        """Stop the sink as :meth:`stop` does, keeping the reply (see :meth:`resume`)."""
        if self.paused is None:
            self.paused = self._halt(sink, detected_ms=detected_ms, now_ms=now_ms)
            self.paused_at_ms = self.paused.stopped_at_ms
        return self.paused

    def resume(self, sink: Sink) -> int:
        """Play on from the start of the word the pause cut (or from where it stopped,
        between words); returns that reply sample (TTS rate)."""
        report, self.paused = self.paused, None
        if report is None or self.start_pos is None:
            return 0
        at = resume_sample(self.chunks, report.heard_samples)
        self._heard_before = report.heard_samples * sink.sample_rate // self.tts_rate
        self._base_pos = sink.end_position
        self._base_reply = at * sink.sample_rate // self.tts_rate
        for chunk in self.chunks:
            if chunk.end_sample > at:
                self._send(sink, chunk, max(0, at - chunk.start_sample))
        self.end_pos = sink.end_position
        return at

    def _halt(self, sink: Sink, *, detected_ms: int, now_ms: int) -> StopReport:
        rate = sink.sample_rate
        played_now = sink.played_samples
        pos = sink.stop()  # everything that will still be heard ends here
        if self.start_pos is None:
            pos_reply = heard = at_detection = 0
        else:
            pos_reply = self._base_reply - self._base_pos  # sink position -> reply sample
            end = self.end_pos
            heard = max(self._heard_before, pos_reply + min(pos, end))
            # Playback runs at 1x, so what was heard at detection is now's position minus
            # the audio played since (never before the reply's start).
            lag = max(0, now_ms - detected_ms) * rate // 1000
            at_detection = max(0, pos_reply + min(max(played_now - lag, self._base_pos), end))
            at_detection = max(at_detection, min(self._heard_before, heard))
        self.end_pos = min(self.end_pos, pos)
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

    def words_heard_lately(self, window_ms: int) -> list[str]:
        """The words of the reply that owns the sink heard in its last ``window_ms``
        (none when no reply does)."""
        cur = self._current
        return cur.words_heard_lately(self.sink, window_ms) if cur is not None else []

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

    def pause(self, turn_id: int, *, detected_ms: int, now_ms: int) -> StopReport | None:
        """Stop the sink for speech over ``turn_id`` but keep the reply (tentative)."""
        cur = self._current
        if cur is None or cur.turn_id != turn_id or cur.stopped:
            return None
        return cur.pause(self.sink, detected_ms=detected_ms, now_ms=now_ms)

    def resume(self, turn_id: int) -> int | None:
        """Play paused ``turn_id`` on; the reply sample (TTS rate) it resumes from."""
        cur = self._current
        if cur is None or cur.turn_id != turn_id or cur.paused is None:
            return None
        return cur.resume(self.sink)
