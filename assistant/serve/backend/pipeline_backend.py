"""The real `SessionBackend`: the live loop's `Pipeline` with the socket as mic and speaker.

A daemon session is the same turn manager and pipeline as ``assistant talk``: a
`NetworkSource` feeds it the client's audio on the session's audio clock, a
`NetworkSink` plays (and sends) its replies, and its `Dialogue` runs on the engine
every session shares (`GatedDialogue`). The pipeline's event log is what this backend
listens to: speech started / stopped, final transcripts, response started / done,
barge-in, each translated into `BackendEvent`\\ s.

Things the Realtime protocol has and the local loop does not, done here on top of it:

- ``response.cancel`` and truncating a reply that is still playing: the pipeline's own
  barge-in path (stop the sink, cut at the words heard) is run without user speech.
- ``conversation.item.truncate`` after a reply was closed: `recut_last_reply` shortens
  the closed turn in the history and the engine's sequence (suffix truncation).
- Manual turns (``turn_detection: null``): the client's audio is held, transcribed on
  ``commit``; ``response.create`` feeds the turn manager the end of a turn with that text.

The pipeline calls marked ``HOOK`` reach into `Pipeline` internals; the public hooks
that would replace them are listed in ``assistant/serve/README.md`` (maintainers' notes).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from assistant.loop import event_log as L
from assistant.serve.backend import contract as B
from assistant.serve.backend.network_io import NetworkSink, NetworkSource, RecordingSynthesizer
from assistant.serve.backend.shared_engine import GatedDialogue, recut_last_reply
from assistant.turns.events import BargeIn, EndOfTurn, FinalTranscript, PlaybackDone, SpeechStarted
from assistant.turns.turn_manager import join_text
from audio.clock import VirtualClock

if TYPE_CHECKING:
    from assistant.loop.pipeline import Pipeline
    from assistant.serve.runtime import ServeRuntime

__all__ = ["PipelineBackend"]

log = logging.getLogger("assistant.serve")


def _vad_options(base: Any, td: B.TurnDetectionSettings) -> Any:
    """Realtime server-VAD knobs on top of the configured VAD."""
    short = min(base.short_pause_ms, max(20, td.silence_duration_ms - 20))
    return dataclasses.replace(
        base,
        aggressiveness=min(3, max(0, round(td.threshold * 4))),
        silero_threshold=min(0.99, max(0.01, td.threshold)),
        prefix_padding_ms=td.prefix_padding_ms,
        end_of_turn_ms=max(td.silence_duration_ms, short),
        short_pause_ms=short,
    )


class PipelineBackend:
    """One conversation on the shared engine (see the module docstring)."""

    def __init__(self, runtime: ServeRuntime, settings: B.SessionSettings) -> None:
        self._rt = runtime
        self._settings = settings
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[B.BackendEvent | None] = asyncio.Queue()
        self._clock = VirtualClock(runtime.vad_options.sample_rate)
        self._source = NetworkSource(self._clock, wall=self._loop.time,
                                     queue_size=runtime.session_queue)
        self._source.hold = settings.turn_detection is None
        self._recorder = RecordingSynthesizer(runtime.models.synthesizer)
        self._sink = NetworkSink(self._clock, self._recorder.sample_rate, recorder=self._recorder,
                                 current_turn=self._playing_turn, emit=self._on_chunk)
        self._pipeline: Pipeline | None = None
        self._ready = asyncio.Event()
        self._closed = False
        self._synthetic = False
        self._turns_started = 0
        # response bookkeeping (keys are ours; the pipeline's turn ids map onto them)
        self._next_key = 1
        self._key_of_turn: dict[int, int] = {}
        self._turn_of_key: dict[int, int] = {}
        self._open_turn: int | None = None
        self._requested: int | None = None
        self._reasons: dict[int, str] = {}
        self._usage: dict[int, B.TokenUsage] = {}
        self._texts: dict[int, str] = {}
        # user input bookkeeping
        self._speech_start_ms = 0
        self._awaiting_transcripts = 0
        self._pending_text: list[str] = []
        self._transcribing: set[asyncio.Task[None]] = set()
        self._pending_vad: B.TurnDetectionSettings | None = None
        self._rebuilding = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self._task = self._loop.create_task(self._run(), name="pipeline-backend")

    # ------------------------------------------------------------------ lifecycle

    async def _run(self) -> None:
        try:
            self._pipeline = await self._build(self._settings)
            self._ready.set()
            await self._pipeline.run(self._source.frames())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("session pipeline failed")
            self._emit(B.BackendFailure(code="pipeline_failed", message=f"session failed: {exc}"))
            self._events.put_nowait(None)

    async def _build(self, settings: B.SessionSettings) -> Pipeline:
        from assistant.dialogue.dialogue import Dialogue
        from assistant.loop.pipeline import Pipeline, PipelineOptions
        from assistant.speech.listener import Listener
        from assistant.turns.turn_manager import TurnManager

        rt = self._rt
        options = dataclasses.replace(
            rt.dialogue_options,
            system_prompt=settings.instructions,
            max_new_tokens=settings.max_output_tokens or rt.dialogue_options.max_new_tokens,
            temperature=rt.dialogue_options.temperature
            if settings.temperature is None else settings.temperature,
        )
        dialogue = await asyncio.to_thread(
            rt.gate.run, lambda: Dialogue(rt.models.engine, rt.models.template, options)
        )
        td = settings.turn_detection or B.TurnDetectionSettings()
        turn_options = rt.turn_options
        if not td.interrupt_response:
            turn_options = dataclasses.replace(turn_options, barge_in_min_ms=10**9)
        pipeline = Pipeline(
            dialogue=GatedDialogue(dialogue, rt.gate),  # type: ignore[arg-type]
            transcriber=rt.models.transcriber,
            synthesizer=self._recorder,
            turn_manager=TurnManager(turn_options),
            listener=Listener(_vad_options(rt.vad_options, td), None),
            clock=self._clock,
            sink=self._sink,
            asr_options=rt.asr_options,
            min_clause_chars=rt.min_clause_chars,
            options=PipelineOptions(presynthesize=False),
            on_entry=self._on_entry,
        )
        withdraw = pipeline._withdraw  # HOOK: no log entry marks a withdrawn reply

        def withdrawn(turn_id: int) -> None:
            withdraw(turn_id)
            self._on_withdrawn(turn_id)

        pipeline._withdraw = withdrawn  # type: ignore[method-assign]
        return pipeline

    async def _ensure_ready(self) -> Pipeline:
        await self._ready.wait()
        assert self._pipeline is not None
        return self._pipeline

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._source.close()
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task
        for task in [*self._transcribing, *self._background]:
            task.cancel()
        if self._pipeline is not None:
            await self._pipeline.aclose()
        with contextlib.suppress(Exception):
            self._sink.close()
        self._events.put_nowait(None)

    async def events(self) -> AsyncIterator[B.BackendEvent]:
        while True:
            event = await self._events.get()
            if event is None:
                return
            yield event

    # ------------------------------------------------------------------ settings

    def configure(self, settings: B.SessionSettings) -> None:
        old = self._settings
        if settings.speed != 1.0:
            raise B.BackendRejected("unsupported_value", "speaking speed cannot be changed",
                                    param="session.audio.output.speed")
        td = settings.turn_detection
        if td is not None and not td.create_response:
            raise B.BackendRejected(
                "unsupported_value",
                "create_response: false is not supported with server VAD; use "
                "turn_detection: null and response.create",
                param="session.audio.input.turn_detection.create_response")
        rebuild = (settings.instructions != old.instructions
                   or (td or B.TurnDetectionSettings()).interrupt_response
                   != (old.turn_detection or B.TurnDetectionSettings()).interrupt_response)
        if rebuild and (self._turns_started or self._pending_text):
            raise B.BackendRejected(
                "unsupported_value",
                "instructions and interrupt_response can only change before the first turn",
                param="session.instructions")
        self._settings = settings
        self._source.hold = td is None
        if rebuild:
            self._source.pause()  # audio from now on is for the rebuilt pipeline
            task = self._loop.create_task(self._rebuild())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        pipeline = self._pipeline
        if pipeline is not None:
            opts = pipeline.dialogue.options
            pipeline.dialogue.inner.options = dataclasses.replace(  # type: ignore[attr-defined]
                opts,
                max_new_tokens=settings.max_output_tokens or self._rt.dialogue_options.max_new_tokens,
                temperature=opts.temperature if settings.temperature is None
                else settings.temperature)
        if td is not None and td != old.turn_detection:
            self._pending_vad = td
            self._apply_vad()

    async def _rebuild(self) -> None:
        """A new pipeline (and dialogue) for changed instructions; one rebuild at a time,
        each using the settings current when it runs."""
        async with self._rebuilding:
            await self._ensure_ready()
            self._ready.clear()
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            old, self._pipeline = self._pipeline, None
            if old is not None:
                await old.aclose()
            self._task = self._loop.create_task(self._run(), name="pipeline-backend")
            await self._ensure_ready()
            self._source.resume()

    def _apply_vad(self) -> None:
        from assistant.speech.listener import Listener

        pipeline, td = self._pipeline, self._pending_vad
        if pipeline is None or td is None or pipeline.listener.vad.in_speech:
            return  # applied at the end of the utterance in progress
        pipeline.listener = Listener(_vad_options(self._rt.vad_options, td), None)
        self._pending_vad = None

    # ------------------------------------------------------------------ input

    async def push_audio(self, pcm: npt.NDArray[np.int16]) -> None:
        await self._source.put(pcm)

    def commit_audio(self) -> None:
        if not self._source.hold:
            raise B.BackendRejected(
                "unsupported_event",
                "input_audio_buffer.commit needs turn_detection: null (server VAD commits)")
        pcm = self._source.take_held()
        if pcm.size == 0:
            raise B.BackendRejected("input_audio_buffer_commit_empty",
                                    "the input audio buffer is empty")
        audio_ms = pcm.size * 1000 // self._clock.sample_rate
        self._emit(B.InputCommitted(audio_ms=audio_ms))
        task = self._loop.create_task(self._transcribe(pcm, audio_ms))
        self._transcribing.add(task)
        task.add_done_callback(self._transcribing.discard)

    async def _transcribe(self, pcm: npt.NDArray[np.float32], audio_ms: int) -> None:
        transcriber = self._rt.models.transcriber
        result = await asyncio.to_thread(lambda: transcriber.transcribe(pcm).text.strip())
        self._pending_text.append(result)
        self._emit(B.UserTranscript(text=result, audio_ms=audio_ms))

    def clear_audio(self) -> None:
        self._source.clear_held()

    def add_text(self, role: Literal["user", "assistant", "system"], text: str) -> None:
        if role != "user":
            raise B.BackendRejected("unsupported_item",
                                    f"{role} text items are not supported; send user text",
                                    param="item.role")
        self._pending_text.append(text)

    # ------------------------------------------------------------------ responses

    def create_response(self, request: B.ResponseRequest) -> int:
        if request.instructions:
            raise B.BackendRejected("unsupported_value", "per-response instructions are not "
                                    "supported; use session.update", param="response.instructions")
        if self._open_turn is not None or self._requested is not None:
            raise B.BackendRejected("conversation_already_has_active_response",
                                    "a response is in progress")
        if not self._pending_text and not self._transcribing:
            raise B.BackendRejected(
                "no_user_input",
                "nothing to respond to: commit audio or create a user text item first")
        key = self._new_key()
        self._requested = key
        max_tokens = request.max_output_tokens
        self._loop.create_task(self._start_requested(key, max_tokens))
        return key

    async def _start_requested(self, key: int, max_tokens: int | None) -> None:
        pipeline = await self._ensure_ready()
        while self._transcribing:
            await asyncio.gather(*self._transcribing, return_exceptions=True)
        text = ""
        for part in self._pending_text:
            text = join_text(text, part)
        self._pending_text.clear()
        if self._requested != key:
            return
        if max_tokens is not None:
            inner = pipeline.dialogue.inner  # type: ignore[attr-defined]
            inner.options = dataclasses.replace(inner.options, max_new_tokens=max_tokens)
        from assistant.turns.events import State

        if not text or pipeline.tm.state is not State.LISTENING:
            self._requested = None
            self._emit(B.ResponseStarted(response_key=key))
            self._emit(B.ResponseFinished(response_key=key, status="failed",
                                          reason="no_user_input" if not text else "busy"))
            return
        # HOOK: feed the turn manager the end of a turn that carries ``text``.
        now = pipeline._now_ms()
        self._synthetic = True
        try:
            pipeline._turn_input(SpeechStarted(now))
            pipeline._turn_input(EndOfTurn(now, speech_end_ms=now))
            pipeline._turn_input(FinalTranscript(now, text))
        finally:
            self._synthetic = False

    def cancel_response(self, reason: str = "client_cancelled") -> bool:
        pipeline = self._pipeline
        turn = self._open_turn
        if pipeline is None or turn is None:
            return False
        self._reasons[turn] = reason
        playing = pipeline._playing  # HOOK: the reply on the sink
        if playing is None or playing.turn_id != turn:
            return False
        now = pipeline._now_ms()
        pipeline._barge_in(BargeIn(turn_id=turn, t_ms=now), now)  # HOOK: stop + cut
        pipeline._turn_input(PlaybackDone(now, turn))  # HOOK: the floor returns
        return True

    async def truncate_response(self, response_key: int, audio_end_ms: int) -> B.TruncateResult:
        from audio.word_timing import heard_position

        turn = self._turn_of_key.get(response_key)
        pipeline = self._pipeline
        if turn is None or pipeline is None:
            raise B.BackendRejected("item_not_found", "that response is no longer known")
        chunks = self._recorder.chunks(turn)
        heard = heard_position(chunks, audio_end_ms * self._recorder.sample_rate // 1000)
        dialogue = pipeline.dialogue.inner  # type: ignore[attr-defined]
        recut = await asyncio.to_thread(
            self._rt.gate.run,
            lambda: recut_last_reply(dialogue, turn, heard.word_count, audio_end_ms))
        if recut is None:
            log.warning("truncate of turn %d arrived after a later turn; kept as is", turn)
        elif recut.changed:
            self._texts[turn] = recut.text
        return B.TruncateResult(audio_end_ms=audio_end_ms, text=self._texts.get(turn, ""))

    def context_text(self) -> str:
        pipeline = self._pipeline
        if pipeline is None:
            return ""
        conv = pipeline.dialogue.inner.conversation  # type: ignore[attr-defined]
        messages = self._rt.gate.run(conv.messages)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)

    def sequence_text(self) -> str:
        """The engine sequence of this conversation, decoded (for inspection and tests);
        raises if it differs from the history's token ids."""
        pipeline = self._pipeline
        if pipeline is None:
            return ""
        dialogue = pipeline.dialogue.inner  # type: ignore[attr-defined]

        def read() -> tuple[int, ...]:
            tokens = tuple(dialogue.sequence.tokens)
            if dialogue.in_sync() is False and dialogue.live_turn_id is None:
                raise RuntimeError("engine sequence differs from the conversation history")
            return tokens

        tokens = self._rt.gate.run(read)
        return str(self._rt.models.engine.tokenizer.decode(list(tokens)))

    # ------------------------------------------------------------------ pipeline events

    def _emit(self, event: B.BackendEvent) -> None:
        if not self._closed:
            self._events.put_nowait(event)

    def _new_key(self) -> int:
        key = self._next_key
        self._next_key += 1
        return key

    def _playing_turn(self) -> int | None:
        pipeline = self._pipeline
        return None if pipeline is None else pipeline.tm.active_turn_id

    def _on_chunk(self, turn: int, text: str, pcm: bytes) -> None:
        key = self._key_of_turn.get(turn)
        if key is None or turn != self._open_turn:
            return
        if text:
            self._emit(B.ResponseText(response_key=key, delta=text))
        self._emit(B.ResponseAudio(response_key=key, pcm=pcm))

    def _on_entry(self, entry: L.Entry) -> None:
        if isinstance(entry, L.SpeechStartedEntry):
            if not self._synthetic:
                vad = self._rt.vad_options
                self._speech_start_ms = max(
                    0, entry.t_ms - vad.min_speech_ms - (self._settings.turn_detection
                                                         or B.TurnDetectionSettings()).prefix_padding_ms)
                self._emit(B.SpeechStarted(audio_start_ms=self._speech_start_ms))
        elif isinstance(entry, L.SpeechStoppedEntry):
            if not self._synthetic:
                self._emit(B.SpeechStopped(audio_end_ms=entry.t_ms))
                if not entry.discarded:
                    self._awaiting_transcripts += 1
                    self._emit(B.InputCommitted(
                        audio_ms=max(0, entry.speech_end_ms - self._speech_start_ms)))
                self._apply_vad()
        elif isinstance(entry, L.TranscriptFinalEntry):
            if self._awaiting_transcripts > 0:
                self._awaiting_transcripts -= 1
                self._emit(B.UserTranscript(
                    text=entry.text, audio_ms=max(0, entry.t_ms - self._speech_start_ms)))
        elif isinstance(entry, L.ResponseStartedEntry):
            self._on_response_started(entry)
        elif isinstance(entry, L.ResponseDoneEntry):
            self._on_response_done(entry)

    def _on_response_started(self, entry: L.ResponseStartedEntry) -> None:
        pipeline = self._pipeline
        if pipeline is None or entry.turn_id != pipeline.tm.active_turn_id:
            return  # a reply withdrawn before it started
        key = self._requested if self._requested is not None else self._new_key()
        self._requested = None
        self._turns_started += 1
        self._key_of_turn[entry.turn_id] = key
        self._turn_of_key[key] = entry.turn_id
        self._open_turn = entry.turn_id
        self._usage[entry.turn_id] = B.TokenUsage(
            input_tokens=entry.prompt_tokens_reused + entry.prompt_tokens_computed,
            cached_tokens=entry.prompt_tokens_reused)
        self._recorder.forget_before(entry.turn_id - 4)
        self._emit(B.ResponseStarted(response_key=key))

    def _on_response_done(self, entry: L.ResponseDoneEntry) -> None:
        key = self._key_of_turn.get(entry.turn_id)
        if key is None:
            return
        if self._open_turn == entry.turn_id:
            self._open_turn = None
        self._texts[entry.turn_id] = entry.text
        usage = dataclasses.replace(self._usage.pop(entry.turn_id, B.TokenUsage()),
                                    output_tokens=entry.generated_tokens)
        status: Literal["completed", "cancelled"] = "cancelled" if entry.interrupted else "completed"
        reason = self._reasons.pop(entry.turn_id, "turn_detected") if entry.interrupted else None
        self._emit(B.ResponseFinished(response_key=key, status=status, reason=reason,
                                      text=entry.text, usage=usage))

    def _on_withdrawn(self, turn: int) -> None:
        """The turn manager withdrew a reply before any of it played (the user went on
        talking); the pipeline logs no response_done for it, so report it here."""
        key = self._key_of_turn.get(turn)
        if key is None or self._open_turn != turn:
            return
        self._open_turn = None
        self._emit(B.ResponseFinished(response_key=key, status="cancelled",
                                      reason=self._reasons.pop(turn, "turn_detected"),
                                      usage=self._usage.pop(turn, B.TokenUsage())))
