"""A scripted `SessionBackend` for protocol tests: no models, deterministic, fast.

- VAD: 20 ms frames of 24 kHz int16; a frame is voiced when its RMS exceeds
  ``threshold * 4000``. Speech starts at the first voiced frame and ends after
  ``silence_duration_ms`` of unvoiced frames, as server VAD does.
- Transcript: ``"speech of N ms"`` for N ms of committed audio.
- Response: the words of ``reply`` (default ``"one two three four five six"``), each
  ``word_ms`` of a 440 Hz tone, reported as text then audio, with ``word_delay_s``
  between words so tests can interrupt.
- Instructions ``"flood"`` make the reply 3000 words; ``"slow"`` make it 40 words with
  50 ms between words (so a test can pick a misbehaviour per session).
- Tools: with ``tool_call=(name, arguments)`` a reply to the user says its words, then
  calls ``name`` (call id ``call_<response key>``); ``response.create`` with tool outputs
  pending says ``result <output>``. ``tool_outputs`` records what the client gave.
- Truncate keeps the words whose audio ends within ``audio_end_ms``.
- ``context_text()`` renders the history as ``role: text`` lines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from assistant.serve.backend import contract as B

RATE = B.PROTOCOL_RATE
FRAME = RATE // 50  # 20 ms


def tone(ms: int, *, amplitude: int = 8000, freq: float = 440.0) -> npt.NDArray[np.int16]:
    n = RATE * ms // 1000
    t = np.arange(n) / RATE
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def silence(ms: int) -> npt.NDArray[np.int16]:
    return np.zeros(RATE * ms // 1000, dtype=np.int16)


@dataclass
class _Reply:
    key: int
    words: list[str]
    word_samples: int
    spoken: list[str] = field(default_factory=list)
    samples: int = 0
    text: str = ""
    call: tuple[str, str] | None = None


class FakeBackend:
    def __init__(
        self,
        settings: B.SessionSettings,
        *,
        reply: str = "one two three four five six",
        word_ms: int = 200,
        word_delay_s: float = 0.0,
        input_queue: int = 64,
        frame_delay_s: float = 0.0,
        tool_call: tuple[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.reply_words = reply.split()
        self.word_ms = word_ms
        self.word_delay_s = word_delay_s
        self.frame_delay_s = frame_delay_s
        self.tool_call = tool_call
        self.calls: list[str] = []
        """Call ids of the calls made."""
        self.tool_outputs: list[tuple[str, str]] = []
        """(call_id, output) as the client gave them."""
        self.answered: list[list[tuple[str, str]]] = []
        """The tool outputs each ``response.create`` answered on."""
        self._pending_outputs: list[tuple[str, str]] = []
        self.history: list[tuple[str, str]] = []
        self.truncations: list[tuple[int, int]] = []
        self.closed = False
        self._events: asyncio.Queue[B.BackendEvent | None] = asyncio.Queue()
        self._input: asyncio.Queue[npt.NDArray[np.int16]] = asyncio.Queue(maxsize=input_queue)
        self._pending = np.zeros(0, dtype=np.int16)
        self._t_samples = 0
        self._speaking = False
        self._onset_samples = 0
        self._silent_samples = 0
        self._buffer_samples = 0
        self.consumed_samples = 0
        """Samples of pushed audio the fake has taken in (framed or pending)."""
        self._consumed = asyncio.Event()
        self._next_key = 1
        self._replies: dict[int, _Reply] = {}
        self._task: asyncio.Task[None] | None = None
        self._cancel_reason = "client_cancelled"
        self._consumer = asyncio.get_running_loop().create_task(self._consume())

    # -------------------------------------------------------------- SessionBackend

    def configure(self, settings: B.SessionSettings) -> None:
        self.settings = settings

    async def push_audio(self, pcm: npt.NDArray[np.int16]) -> None:
        await self._input.put(pcm)

    def commit_audio(self) -> None:
        if self._buffer_samples == 0:
            raise B.BackendRejected("input_audio_buffer_commit_empty", "buffer is empty")
        self._commit()

    def clear_audio(self) -> None:
        self._buffer_samples = 0
        self._speaking = False

    def add_text(self, role: Literal["user", "assistant", "system"], text: str) -> None:
        self.history.append((role, text))

    def add_tool_output(self, call_id: str, output: str) -> None:
        if call_id not in self.calls:
            raise B.BackendRejected("unknown_call_id", f"no call {call_id}", param="item.call_id")
        self.tool_outputs.append((call_id, output))
        self._pending_outputs.append((call_id, output))
        self.history.append(("tool", output))

    def create_response(self, request: B.ResponseRequest) -> int:
        if self._task is not None and not self._task.done():
            raise B.BackendRejected("conversation_already_has_active_response", "busy")
        outputs, self._pending_outputs = self._pending_outputs, []
        if outputs:
            self.answered.append(outputs)
            return self._start(["result", *" ".join(o for _, o in outputs).split()],
                               call=False)
        return self._start()

    def cancel_response(self, reason: str = "client_cancelled", *,
                        reported: bool = False) -> bool:
        if self._task is None or self._task.done():
            return False
        self._cancel_reason = reason
        self._task.cancel()
        return True

    async def truncate_response(self, response_key: int, audio_end_ms: int) -> B.TruncateResult:
        reply = self._replies.get(response_key)
        if reply is None:
            raise B.BackendRejected("item_not_found", f"no response {response_key}")
        end = audio_end_ms * RATE // 1000
        heard = reply.spoken[: end // reply.word_samples]
        text = " ".join(heard)
        for i in range(len(self.history) - 1, -1, -1):
            if self.history[i][0] == "assistant" and self.history[i][1] == reply.text:
                self.history[i] = ("assistant", text)
                break
        reply.text = text
        self.truncations.append((response_key, audio_end_ms))
        return B.TruncateResult(audio_end_ms=audio_end_ms, text=text)

    async def context_text(self) -> str:
        lines = [f"system: {self.settings.instructions}"]
        lines += [f"{role}: {text}" for role, text in self.history]
        return "\n".join(lines)

    async def events(self) -> AsyncIterator[B.BackendEvent]:
        while True:
            event = await self._events.get()
            if event is None:
                return
            yield event

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.cancel_response("shutdown")
        self._consumer.cancel()
        for task in (self._consumer, self._task):
            if task is not None:
                with contextlib.suppress(BaseException):
                    await task
        self._events.put_nowait(None)

    # -------------------------------------------------------------- internals

    def _emit(self, event: B.BackendEvent) -> None:
        self._events.put_nowait(event)

    def _ms(self, samples: int) -> int:
        return samples * 1000 // RATE

    async def _consume(self) -> None:
        while True:
            pcm = await self._input.get()
            if self.frame_delay_s:
                await asyncio.sleep(self.frame_delay_s)
            self._pending = np.concatenate([self._pending, pcm])
            while len(self._pending) >= FRAME:
                frame, self._pending = self._pending[:FRAME], self._pending[FRAME:]
                self._frame(frame)
            self.consumed_samples += len(pcm)
            self._consumed.set()

    async def wait_consumed(self, samples: int, timeout: float = 5.0) -> None:
        """Return once `samples` of pushed audio went through (events for them emitted)."""
        async def until() -> None:
            while self.consumed_samples < samples:
                self._consumed.clear()
                await self._consumed.wait()

        await asyncio.wait_for(until(), timeout)

    def _frame(self, frame: npt.NDArray[np.int16]) -> None:
        self._t_samples += FRAME
        self._buffer_samples += FRAME
        td = self.settings.turn_detection
        if td is None:
            return
        rms = float(np.sqrt(np.mean(frame.astype(np.float64) ** 2)))
        voiced = rms > td.threshold * 4000
        if not self._speaking:
            if voiced:
                self._speaking = True
                self._silent_samples = 0
                onset = self._t_samples - FRAME
                start = max(0, onset - td.prefix_padding_ms * RATE // 1000)
                self._buffer_samples = self._t_samples - start
                self._emit(B.SpeechStarted(audio_start_ms=self._ms(start)))
                if td.interrupt_response:
                    self.cancel_response("turn_detected")
            return
        self._silent_samples = 0 if voiced else self._silent_samples + FRAME
        if self._silent_samples * 1000 >= td.silence_duration_ms * RATE:
            self._speaking = False
            self._emit(B.SpeechStopped(audio_end_ms=self._ms(self._t_samples)))
            self._commit()
            if td.create_response and (self._task is None or self._task.done()):
                self._start()

    def _commit(self) -> None:
        ms = self._ms(self._buffer_samples)
        self._buffer_samples = 0
        self._emit(B.InputCommitted(audio_ms=ms))
        text = f"speech of {ms} ms"
        self.history.append(("user", text))
        self._emit(B.UserTranscript(text=text, audio_ms=ms))

    def _start(self, words: list[str] | None = None, *, call: bool = True) -> int:
        key = self._next_key
        self._next_key += 1
        if words is None:
            words = list(self.reply_words)
            if self.settings.instructions == "flood":
                words = ["word"] * 3000
            elif self.settings.instructions == "slow":
                words = ["a"] * 40
        reply = _Reply(key=key, words=words, word_samples=RATE * self.word_ms // 1000,
                       call=self.tool_call if call else None)
        self._replies[key] = reply
        self._cancel_reason = "client_cancelled"
        self._emit(B.ResponseStarted(response_key=key))
        self._task = asyncio.get_running_loop().create_task(self._speak(reply))
        return key

    async def _speak(self, reply: _Reply) -> None:
        status: Literal["completed", "cancelled"] = "completed"
        reason: str | None = None
        try:
            for i, word in enumerate(reply.words):
                delay = 0.05 if self.settings.instructions == "slow" else self.word_delay_s
                if delay:
                    await asyncio.sleep(delay)
                else:
                    await asyncio.sleep(0)
                delta = word if i == 0 else f" {word}"
                self._emit(B.ResponseText(response_key=reply.key, delta=delta))
                pcm = tone(self.word_ms)
                reply.spoken.append(word)
                reply.samples += len(pcm)
                self._emit(B.ResponseAudio(response_key=reply.key, pcm=pcm.tobytes()))
            if reply.call is not None:
                call_id = f"call_{reply.key}"
                self.calls.append(call_id)
                name, arguments = reply.call
                self._emit(B.ResponseFunctionCall(response_key=reply.key, call_id=call_id,
                                                  name=name, arguments=arguments))
        except asyncio.CancelledError:
            status, reason = "cancelled", self._cancel_reason
        reply.text = " ".join(reply.spoken)
        self.history.append(("assistant", reply.text))
        self._emit(
            B.ResponseFinished(
                response_key=reply.key,
                status=status,
                reason=reason,
                text=reply.text,
                usage=B.TokenUsage(input_tokens=10, cached_tokens=4, output_tokens=len(reply.spoken)),
            )
        )
