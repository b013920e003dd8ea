"""The socket as the live loop's microphone and speaker.

- `NetworkSource`: client audio (24 kHz int16) -> 16 kHz frames stamped on the session's
  `VirtualClock`, which counts audio time: it moves forward with the audio the client
  sends, and, once the client has sent nothing for ``idle_ms`` (it is listening, or
  paused), with silence the source inserts up to ``jitter_ms`` behind real time -- turns
  still end and replies still "play" when a client goes quiet, while a client that
  streams (even late, under load) never gets silence spliced into its audio. With
  ``hold`` set (manual turns, ``turn_detection: null``) the pipeline hears silence and
  the client's audio is kept for ``input_audio_buffer.commit``.
- The speaker is :class:`~assistant.serve.backend.network_sink.NetworkSink` (replies
  sent at playback pace).
- `RecordingSynthesizer`: the shared TTS voice, keeping each turn's chunks and their word
  timings, which is what maps a client's ``audio_end_ms`` to the words heard. A turn
  marked text-only (``output_modalities: ["text"]``) is not synthesised: its clauses
  become silent chunks of no samples, so its text goes out as fast as it is generated
  and the reply is over ("played") as soon as its text is. A speculation's first clause
  synthesised ahead is kept only once a reply adopts it (`RecordingSynthesizer.adopt`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from assistant.serve.backend.contract import PROTOCOL_RATE
from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.sources import StreamConverter
from audio.word_timing import TTSChunk, estimate_words, split_words

__all__ = ["NetworkSource", "RecordingSynthesizer", "silent_span"]


class NetworkSource:
    """Client audio in, clock-stamped frames out (see the module docstring)."""

    def __init__(
        self,
        clock: VirtualClock,
        *,
        wall: Callable[[], float],
        queue_size: int = 256,
        frame_ms: int = 20,
        jitter_ms: int = 200,
        idle_ms: int = 500,
        poll_s: float = 0.02,
    ) -> None:
        self.clock = clock
        self.rate = clock.sample_rate
        self._wall = wall
        self._frame = self.rate * frame_ms // 1000
        self._jitter = self.rate * jitter_ms // 1000
        self._poll_s = poll_s
        self._idle_s = idle_ms / 1000
        self._last_audio_s = 0.0
        self._queue: asyncio.Queue[npt.NDArray[np.int16] | None] = asyncio.Queue(queue_size)
        self._conv = StreamConverter(PROTOCOL_RATE, self.rate, self._frame, clock.now_samples())
        self._t0: float | None = None
        self._held: list[npt.NDArray[np.float32]] = []
        self._pushback: npt.NDArray[np.int16] | None = None
        self._running = asyncio.Event()
        self._running.set()
        self.hold = False
        """Manual turns: keep client audio for `take_held`, feed the pipeline silence."""
        self.received_samples = 0
        """Client samples received (24 kHz)."""
        self.closed = False

    async def put(self, pcm: npt.NDArray[np.int16]) -> None:
        """Queue client audio; waits while the queue is full (backpressure)."""
        if not self.closed:
            await self._queue.put(pcm)
            self.received_samples += int(pcm.size)

    def close(self) -> None:
        self.closed = True
        self._running.set()
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    def pause(self) -> None:
        """Hold every frame back until `resume` (while a session's pipeline is rebuilt,
        audio sent after the change must reach the new pipeline only)."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def take_held(self) -> npt.NDArray[np.float32]:
        """The client audio held since the last take (16 kHz float)."""
        pcm = np.concatenate(self._held) if self._held else np.zeros(0, np.float32)
        self._held.clear()
        return pcm

    def clear_held(self) -> None:
        self._held.clear()

    @property
    def held_samples(self) -> int:
        return sum(int(p.size) for p in self._held)

    def _target(self) -> int:
        assert self._t0 is not None
        return int((self._wall() - self._t0) * self.rate) - self._jitter

    async def _next(self) -> tuple[bool, npt.NDArray[np.int16] | None]:
        """The next queued chunk, or (False, None) after ``poll_s``. A cancellation is
        never swallowed (``asyncio.wait_for`` can, on 3.10/3.11) and never loses a chunk:
        one taken just as the cancel came is kept for the next reader."""
        if self._pushback is not None:
            item, self._pushback = self._pushback, None
            return True, item
        if not self._queue.empty():
            return True, self._queue.get_nowait()
        getter = asyncio.ensure_future(self._queue.get())
        try:
            done, _ = await asyncio.wait({getter}, timeout=self._poll_s)
        except BaseException:
            if getter.done() and not getter.cancelled():
                self._pushback = getter.result()
            else:
                getter.cancel()
            raise
        if done or not getter.cancel():
            return True, getter.result()
        return False, None

    async def frames(self) -> AsyncIterator[AudioChunk]:
        """Frames for `Pipeline.run`; ends after `close`."""
        if self._t0 is None:
            self._t0 = self._wall()
        while not self.closed:
            await self._running.wait()
            got, pcm = await self._next()
            if not got:
                if self.closed:
                    return
                if self._wall() - self._last_audio_s < self._idle_s:
                    continue  # a streaming client: wait for its audio, never splice silence
                behind = self._target() - self.clock.now_samples()
                if behind < self._frame:
                    continue
                out = self._conv.push_silence(behind * PROTOCOL_RATE // self.rate)
            else:
                if pcm is None:
                    return
                self._last_audio_s = self._wall()
                out = self._conv.push(pcm)
                if self.hold:
                    self._held.extend(np.asarray(f.pcm, np.float32) for f in out)
                    out = [AudioChunk(np.zeros(f.num_samples, np.float32), f.sample_rate,
                                      f.start_sample) for f in out]
            for frame in out:
                self.clock.wait_until(frame.end_sample)
                yield frame


def silent_span(text: str, sample_rate: int, *, turn_id: int = 0, char_start: int = 0,
                start_sample: int = 0, word_index: int = 0, token_start: int | None = None,
                token_end: int | None = None) -> TTSChunk | None:
    """``text`` as a chunk of no audio (None if it has no words, as a voice would say):
    its words all end at sample 0, so it counts as heard in full the moment it is out."""
    words = split_words(text)
    if not words:
        return None
    return TTSChunk(turn_id=turn_id, pcm=np.zeros(0, np.int16), sample_rate=sample_rate,
                    text=text, char_start=char_start, char_end=char_start + len(text),
                    words=estimate_words(words, 0, char_offset=char_start),
                    start_sample=start_sample, token_start=token_start, token_end=token_end,
                    word_index=word_index)


class RecordingSynthesizer:
    """Wraps the shared `Synthesizer`; records each turn's chunks, speaks text-only turns
    silently (thread-safe: marks come from the event loop, synthesis runs on the TTS
    worker)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._chunks: dict[int, list[TTSChunk]] = {}
        self._text_only: set[int] = set()

    @property
    def sample_rate(self) -> int:
        return int(self.inner.sample_rate)

    def set_text_only(self, turn_id: int, text_only: bool) -> None:
        """Whether ``turn_id`` is text only (set before its first clause is spoken)."""
        with self._lock:
            if text_only:
                self._text_only.add(turn_id)
            else:
                self._text_only.discard(turn_id)

    def synthesize_span(self, text: str, **kwargs: Any) -> TTSChunk | None:
        """A turn's clause (recorded), or with turn 0 a speculation's first clause made
        ahead (recorded only if a reply adopts it: `adopt`)."""
        turn = int(kwargs.get("turn_id", 0))
        with self._lock:
            silent = turn in self._text_only
        chunk: TTSChunk | None = (silent_span(text, self.sample_rate, **kwargs) if silent
                                  else self.inner.synthesize_span(text, **kwargs))
        if chunk is not None and chunk.turn_id != 0:
            self._record(chunk)
        return chunk

    def adopt(self, chunk: TTSChunk) -> TTSChunk | None:
        """A clause made ahead, now turn ``chunk.turn_id``'s: recorded, and silent if the
        turn is text only (see `assistant.speech.voice.AdoptsPremade`)."""
        with self._lock:
            silent = chunk.turn_id in self._text_only
        if silent:
            made = silent_span(chunk.text, self.sample_rate, turn_id=chunk.turn_id,
                               char_start=chunk.char_start, start_sample=chunk.start_sample,
                               word_index=chunk.word_index, token_start=chunk.token_start,
                               token_end=chunk.token_end)
            if made is None:
                return None
            chunk = made
        self._record(chunk)
        return chunk

    def _record(self, chunk: TTSChunk) -> None:
        with self._lock:
            self._chunks.setdefault(chunk.turn_id, []).append(chunk)

    def chunks(self, turn_id: int) -> list[TTSChunk]:
        with self._lock:
            return list(self._chunks.get(turn_id, ()))

    def forget_before(self, turn_id: int) -> None:
        """Drop the chunks of turns older than ``turn_id`` (bounded memory)."""
        with self._lock:
            for old in [t for t in self._chunks if t < turn_id]:
                del self._chunks[old]
            self._text_only = {t for t in self._text_only if t >= turn_id}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
