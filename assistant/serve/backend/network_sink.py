"""The socket as the live loop's speaker: replies sent to the client at playback pace.

A Realtime client plays the audio deltas it receives and keeps playing what it holds
until it is told to stop (``input_audio_buffer.speech_started``), so whatever was sent
is as good as heard. `NetworkSink` therefore sends a reply's audio a little ahead of
where the client's playback is (at most ``lead_ms``, modelled on the session's
`VirtualClock`), not as fast as it is synthesised: a pause of the reply (a tentative
interruption) stops the audio within ``lead_ms``, and a resume continues it without the
client having been sent anything twice that it did not play.

- Each written chunk is cut into wire pieces of at most ``delta_ms`` (24 kHz int16; the
  chunk's first piece carries the words it speaks) and queued in an outbox; a piece is
  sent when the client holds less than ``lead_ms`` of unplayed audio (text-only chunks,
  which have no audio, go out as soon as they reach the head of the outbox).
- Playback is modelled on what was *sent*: a `NullSink` on the session clock plays the
  pieces as they go out, so ``played_samples`` is what a client playing in real time has
  heard.
- ``stop()`` drops the outbox. What was sent is either kept playing, when the client will
  not be told to stop (``keeps_sent()``: a tentative pause, or a cut the client is about
  to report with ``conversation.item.truncate``) -- the position returned is then the end
  of the audio sent -- or dropped, when the client stops now (the position heard).
- After a resume the same reply samples can go out twice (the interrupted word again), so
  a client's wire position is mapped back onto the reply (:meth:`reply_samples`).

All calls come from the event loop (the clock advances there too).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from assistant.serve.backend.contract import PROTOCOL_RATE
from assistant.serve.backend.network_io import RecordingSynthesizer
from audio.chunk import AudioChunk, float_to_int16
from audio.clock import VirtualClock
from audio.resample import resample
from audio.sinks import NullSink

__all__ = ["NetworkSink"]


@dataclass(frozen=True)
class _Piece:
    """One wire piece, waiting in the outbox."""

    turn: int
    text: str
    """The words of its chunk (its first piece only)."""
    wire: bytes
    """24 kHz little-endian int16."""
    pcm: npt.NDArray[np.float32]
    """The same audio at the sink's rate (what the playback model plays)."""
    reply_start: int
    """Reply sample (sink rate) of its first sample."""
    rewind: tuple[int, int] | None
    """The turn's text state before its chunk's words, if it carries them (restored when
    it is dropped unsent: the chunk is written again on a resume)."""


@dataclass
class _WireMap:
    """Where a turn's wire audio comes from in the reply: breakpoints (wire sample at
    24 kHz, reply sample at the sink's rate) wherever the two stop running together."""

    points: list[tuple[int, int]]
    wire_end: int = 0
    reply_end: int = -1


class NetworkSink:
    """A `Sink` that streams to the client at playback pace (see the module docstring)."""

    def __init__(
        self,
        clock: VirtualClock,
        sample_rate: int,
        *,
        recorder: RecordingSynthesizer,
        current_turn: Callable[[], int | None],
        emit: Callable[[int, str, bytes], None],
        delta_ms: int = 100,
        lead_ms: int = 300,
        keeps_sent: Callable[[], bool] | None = None,
    ) -> None:
        """``emit(turn_id, text, pcm)`` gets each piece as sent: the words its chunk
        speaks (with the chunk's first piece; empty for the others and for a chunk the
        recorder does not know) and at most ``delta_ms`` of 24 kHz int16 audio (no audio
        for a text-only chunk). ``lead_ms``: the most unplayed audio a client holds (at
        least one piece). ``keeps_sent()``: whether a ``stop()`` now leaves the client
        playing what it was sent."""
        if delta_ms <= 0:
            raise ValueError(f"delta_ms must be positive, got {delta_ms}")
        if lead_ms < 0:
            raise ValueError(f"lead_ms must not be negative, got {lead_ms}")
        self.sample_rate = int(sample_rate)
        self.clock = clock
        self._played = NullSink(clock, self.sample_rate)
        """The client's playback of what was sent."""
        self._recorder = recorder
        self._current_turn = current_turn
        self._emit = emit
        self._keeps_sent = keeps_sent or (lambda: False)
        self._piece = PROTOCOL_RATE * delta_ms // 1000
        self._lead = self.sample_rate * lead_ms // 1000
        self._outbox: deque[_Piece] = deque()
        self._outbox_samples = 0
        self._matched: dict[int, tuple[int, int]] = {}
        """turn -> (recorded chunks matched so far, char end of the last one's text)."""
        self._wire: dict[int, _WireMap] = {}
        self._unsubscribe = clock.subscribe(self._on_clock)

    # ------------------------------------------------------------------ Sink

    def write(self, chunk: AudioChunk) -> None:
        turn = self._current_turn()
        if turn is None:
            return
        pcm = np.asarray(chunk.to_mono().to_float32().pcm, np.float32)
        reply_start = chunk.start_sample * self.sample_rate // chunk.sample_rate
        if chunk.sample_rate != self.sample_rate:
            pcm = np.asarray(resample(pcm, chunk.sample_rate, self.sample_rate), np.float32)
        text, rewind = self._words_of(turn, chunk)
        if pcm.size == 0:  # a text-only chunk
            self._queue(_Piece(turn, text, b"", pcm, reply_start, rewind))
        else:
            wire = float_to_int16(resample(pcm, self.sample_rate, PROTOCOL_RATE)).astype("<i2")
            for start in range(0, wire.size, self._piece):
                end = min(start + self._piece, wire.size)
                a = start * self.sample_rate // PROTOCOL_RATE
                b = pcm.size if end == wire.size else end * self.sample_rate // PROTOCOL_RATE
                first = start == 0
                self._queue(_Piece(turn, text if first else "", wire[start:end].tobytes(),
                                   pcm[a:b], reply_start + a, rewind if first else None))
        self._pump()

    @property
    def played_samples(self) -> int:
        return self._played.played_samples

    @property
    def queued_samples(self) -> int:
        return self._played.queued_samples + self._outbox_samples

    @property
    def end_position(self) -> int:
        return self.played_samples + self.queued_samples

    def stop(self) -> int:
        """Drop what was not sent; returns the position the client's playback ends at:
        the end of what was sent when it keeps playing it (``keeps_sent()``), else the
        position heard (it stops now)."""
        rewinds = {}
        for piece in self._outbox:
            if piece.rewind is not None and piece.turn not in rewinds:
                rewinds[piece.turn] = piece.rewind
        self._matched.update(rewinds)
        self._outbox.clear()
        self._outbox_samples = 0
        if self._keeps_sent():
            return self._played.end_position
        return self._played.stop()

    def flush(self) -> None:
        """Wait (on the clock) until everything written has been sent and heard."""
        while True:
            self._played.flush()  # the pieces sent meanwhile are then still to play
            if not self._outbox and not self._played.queued_samples:
                return
            self._pump()

    def close(self) -> None:
        self._unsubscribe()
        self._outbox.clear()
        self._outbox_samples = 0
        self._played.close()

    # ------------------------------------------------------------------ wire positions

    def reply_samples(self, turn: int, wire_samples: int) -> int:
        """The reply sample (sink rate) that a client which played ``wire_samples`` of
        ``turn``'s audio (24 kHz, as received) has reached."""
        wire = self._wire.get(turn)
        if wire is None or not wire.points:
            return wire_samples * self.sample_rate // PROTOCOL_RATE
        w0, r0 = wire.points[0]
        for w, r in wire.points:
            if w > wire_samples:
                break
            w0, r0 = w, r
        return r0 + (wire_samples - w0) * self.sample_rate // PROTOCOL_RATE

    def forget_before(self, turn_id: int) -> None:
        """Drop what is kept of turns older than ``turn_id`` (bounded memory)."""
        for table in (self._matched, self._wire):
            for old in [t for t in table if t < turn_id]:
                del table[old]

    # ------------------------------------------------------------------ internals

    def _words_of(self, turn: int, chunk: AudioChunk) -> tuple[str, tuple[int, int] | None]:
        """The words ``chunk`` speaks if it is the turn's next recorded chunk (a chunk
        written again on a resume, or a part of one, has none: its words went out)."""
        index, last_end = self._matched.get(turn, (0, -1))
        recorded = self._recorder.chunks(turn)
        if index >= len(recorded):
            return "", None
        tts = recorded[index]
        # The chunk as written may end earlier than as synthesised (a clause cut
        # mid-phrase loses the voice's trailing silence: `close_seam`), never later.
        if tts.start_sample != chunk.start_sample or chunk.num_samples > tts.num_samples:
            return "", None
        text = tts.text if last_end < 0 or tts.char_start <= last_end else f" {tts.text}"
        self._matched[turn] = (index + 1, tts.char_end)
        return text, (index, last_end)

    def _queue(self, piece: _Piece) -> None:
        self._outbox.append(piece)
        self._outbox_samples += piece.pcm.size

    def _on_clock(self, _now: int) -> None:
        self._pump()

    def _pump(self) -> None:
        """Send from the outbox while the client holds less than the lead (always at
        least one piece when it holds nothing)."""
        while self._outbox:
            piece = self._outbox[0]
            held = self._played.queued_samples
            if held and held + piece.pcm.size > self._lead:
                return
            self._outbox.popleft()
            self._outbox_samples -= piece.pcm.size
            self._send(piece)

    def _send(self, piece: _Piece) -> None:
        if piece.pcm.size:
            self._played.write(AudioChunk(piece.pcm, self.sample_rate, piece.reply_start))
            wire = self._wire.setdefault(piece.turn, _WireMap([]))
            if piece.reply_start != wire.reply_end:
                wire.points.append((wire.wire_end, piece.reply_start))
            wire.wire_end += len(piece.wire) // 2
            wire.reply_end = piece.reply_start + piece.pcm.size
        self._emit(piece.turn, piece.text, piece.wire)
