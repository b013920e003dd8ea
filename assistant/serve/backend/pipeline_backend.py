"""The real `SessionBackend`: a live-loop `Conversation` with the socket as mic and speaker.

A daemon session is the same conversation as ``assistant talk``, opened the same way
(:meth:`Conversation.open <assistant.loop.conversation.Conversation.open>`): a
`NetworkSource` feeds it the client's audio on the session's audio clock, a
`NetworkSink` plays (and sends) its replies, and its dialogue lives on the engine
thread every session shares (:class:`~assistant.llm.host.EngineHost`). The
conversation's public output (`assistant.loop.output`) is what this backend listens to,
translated into `BackendEvent`\\ s by
:class:`~assistant.serve.backend.conversation_events.ConversationEvents`;
:class:`~assistant.serve.backend.ledger.ResponseLedger` maps turns to responses.

Things the Realtime protocol has and the local loop does not, all through the
conversation's commands:

- ``response.cancel``: ``interrupt`` (stop the sink, cut at the words heard).
- ``conversation.item.truncate`` after a reply was closed: ``truncate`` shortens the
  closed turn in the history and the sequence.
- Manual turns (``turn_detection: null``):
  :class:`~assistant.serve.backend.client_turns.ClientTurns` holds the committed audio's
  transcripts and text items; ``response.create`` submits them as a text turn
  (``submit_text``).
- ``session.update``: ``update`` (generation options from the next turn, VAD at the end
  of the utterance in progress, turn-taking rules now); changed instructions or tools
  (which the system prompt shows) open a new conversation before the first turn, and
  after it are computed into the context in the background
  (`assistant.dialogue.context_window`).
- The client's tools: a reply's call (the conversation's ``ToolCallRequested``) goes to
  the client, and its output comes back through ``submit_tool_outputs`` on the next
  ``response.create`` (:class:`~assistant.serve.backend.client_turns.ClientTurns`).
- ``output_modalities: ["text"]`` (session or response): the turn is marked text-only on
  the `RecordingSynthesizer`, which then makes silent chunks instead of speech.

Interruptions follow the session's turn options (``turns.interruption``; tentative by
default, see :func:`~assistant.serve.backend.settings_map.turn_options`). While speech
over a reply is undecided the `NetworkSink` sends nothing more of the reply (the client
plays out the little it holds) and the conversation's public stream
(`assistant.loop.output`, which this backend translates into the session's events) holds
the speech's events back, since the client's ``speech_started`` would stop and truncate
the reply: a backchannel or a
cough resumes the same response's audio and is never a user item; real words commit, and
the client hears ``speech_started`` (with the speech's own start) and then the response
ending as ``cancelled`` / ``turn_detected``, cut to the audio it had played.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from assistant.loop import event_log as L
from assistant.loop.setup import local_tools
from assistant.loop.tasks import cancel_and_wait
from assistant.serve.backend import contract as B
from assistant.serve.backend.client_turns import ClientTurns
from assistant.serve.backend.conversation_events import ConversationEvents
from assistant.serve.backend.ledger import ResponseLedger
from assistant.serve.backend.network_io import NetworkSource, RecordingSynthesizer
from assistant.serve.backend.network_sink import NetworkSink
from assistant.serve.backend.settings_map import conversation_settings
from assistant.serve.backend.shared import SharedRuntime
from audio.clock import VirtualClock

if TYPE_CHECKING:
    from assistant.loop.conversation import Conversation, ConversationSettings

__all__ = ["PipelineBackend"]

log = logging.getLogger("assistant.serve")


class PipelineBackend:
    """One conversation on the shared engine thread (see the module docstring)."""

    def __init__(self, runtime: SharedRuntime, settings: B.SessionSettings) -> None:
        self._rt = runtime
        self._settings = settings
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[B.BackendEvent | None] = asyncio.Queue()
        self._clock = VirtualClock(runtime.settings.vad.sample_rate)
        self._source = NetworkSource(self._clock, wall=self._loop.time,
                                     queue_size=runtime.session_queue)
        self._source.hold = settings.turn_detection is None
        self._recorder = RecordingSynthesizer(runtime.models.synthesizer)
        self._ledger = ResponseLedger()
        self._output = ConversationEvents(
            ledger=self._ledger, recorder=self._recorder, emit=self._emit,
            settings=lambda: self._settings, active_turn=self._playing_turn,
            forget_before=self._forget_before, min_speech_ms=runtime.settings.vad.min_speech_ms,
            local_tools=runtime.settings.tools is not None)
        self._sink = NetworkSink(self._clock, self._recorder.sample_rate, recorder=self._recorder,
                                 current_turn=self._playing_turn, emit=self._output.on_chunk,
                                 delta_ms=runtime.audio_delta_ms, lead_ms=runtime.audio_lead_ms,
                                 keeps_sent=self._client_keeps_playing)
        self._cut_reported = False
        """A cut the client reports itself (``conversation.item.truncate``) is in progress."""
        self._local_tools = None if runtime.settings.tools is None else local_tools(runtime.cfg)
        """The daemon's own tools (``tools.enabled``), this session's: its own timers."""
        self._pipeline: Conversation | None = None
        self._ready = asyncio.Event()
        self._closed = False
        transcriber = runtime.models.transcriber
        self._client = ClientTurns(
            source=self._source, sample_rate=self._clock.sample_rate,
            transcribe=lambda pcm: transcriber.transcribe(pcm).text.strip(),
            ledger=self._ledger, output=self._output, emit=self._emit, spawn=self._spawn,
            conversation=self._ensure_ready)
        self._rebuilding = asyncio.Lock()
        self._retiring: set[Conversation] = set()
        self._closed_entries: list[L.Entry] = []
        """The event log of the pipeline that was open when the session closed."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._task = self._spawn(self._run(), "pipeline-backend")

    # ------------------------------------------------------------------ lifecycle

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        """An owned task: kept until done, and a failure is logged and reported."""
        task: asyncio.Task[None] = self._loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("session task %s failed", task.get_name(), exc_info=exc)
            self._emit(B.BackendFailure(code="server_error", message=f"session failed: {exc}"))

    async def _run(self) -> None:
        pipeline = self._build(self._settings)
        self._pipeline = pipeline
        try:
            self._ready.set()
            await pipeline.run(self._source.frames())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("session pipeline failed")
            self._emit(B.BackendFailure(code="pipeline_failed", message=f"session failed: {exc}"))
            self._events.put_nowait(None)

    def _conversation_settings(self, settings: B.SessionSettings) -> ConversationSettings:
        return dataclasses.replace(conversation_settings(self._rt.settings, settings),
                                   tools=self._local_tools)

    def _build(self, settings: B.SessionSettings) -> Conversation:
        from assistant.loop.conversation import Conversation

        # The recorder keeps what each reply sent (a speculation's first clause
        # synthesised ahead too, once a reply adopts it; silent if that turn is text).
        return Conversation.open(self._rt.models, self._conversation_settings(settings),
                                 clock=self._clock, sink=self._sink,
                                 synthesizer=self._recorder, on_output=self._output.on_output)

    async def _ensure_ready(self) -> Conversation:
        await self._ready.wait()
        assert self._pipeline is not None
        return self._pipeline

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._pipeline is not None:
            self._closed_entries = list(self._pipeline.entries)
        self._source.close()
        await cancel_and_wait(*self._tasks, logger=log, what="session task")
        await self._client.cancel()
        for pipeline in [*self._retiring, self._pipeline]:
            if pipeline is not None:
                await pipeline.aclose()
        try:
            self._sink.close()
        except Exception:
            log.exception("closing the session's sink failed")
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
        if settings.tools and self._rt.settings.tools is not None:
            raise B.BackendRejected(
                "unsupported_value",
                "this daemon runs its own tools (tools.enabled in its config); a client's "
                "tools cannot be added to them", param="session.tools")
        changed = _system_prompt_of(settings) != _system_prompt_of(old)
        started = self._ledger.started or self._client.pending
        if changed and started and not (self._has_system_prompt(old)
                                        and self._has_system_prompt(settings)):
            raise B.BackendRejected(
                "unsupported_value",
                "the system prompt (instructions, and the tools it describes) cannot become "
                "empty, or be set where it was empty, once the conversation has started: "
                "set instructions or tools before the first turn",
                param="session.instructions" if settings.instructions != old.instructions
                else "session.tools")
        # Before the first turn a new pipeline is as cheap; after it the dialogue
        # recomputes its context with the new system prompt in the background.
        rebuild = changed and not started
        self._settings = settings
        self._source.hold = td is None
        if rebuild:
            self._source.pause()  # audio from now on is for the rebuilt pipeline
            self._spawn(self._rebuild(), "pipeline-rebuild")
            return
        pipeline = self._pipeline
        if pipeline is not None:
            pipeline.update(self._conversation_settings(settings))

    def _has_system_prompt(self, settings: B.SessionSettings) -> bool:
        """Whether a conversation with ``settings`` has a system prompt: instructions, or
        tools shown to the model (described there, or with a default prompt)."""
        from assistant.dialogue.tool_prompt import shown_tools

        dialogue = self._conversation_settings(settings).dialogue
        return bool(dialogue.system_prompt) or bool(
            shown_tools(dialogue.tools, dialogue.tool_choice))

    async def _rebuild(self) -> None:
        """A new pipeline (and dialogue) for changed instructions; one rebuild at a time,
        each using the settings current when it runs."""
        async with self._rebuilding:
            await self._ensure_ready()
            self._ready.clear()
            await cancel_and_wait(self._task, logger=log, what="session pipeline")
            old, self._pipeline = self._pipeline, None
            if old is not None:
                self._retiring.add(old)  # aclose finishes it if we are cancelled here
                await old.aclose()
                self._retiring.discard(old)
            self._task = self._spawn(self._run(), "pipeline-backend")
            await self._ensure_ready()
            self._source.resume()

    # ------------------------------------------------------------------ input

    async def push_audio(self, pcm: npt.NDArray[np.int16]) -> None:
        await self._source.put(pcm)

    def commit_audio(self) -> None:
        self._client.commit_audio()

    def clear_audio(self) -> None:
        self._source.clear_held()

    def add_text(self, role: Literal["user", "assistant", "system"], text: str) -> None:
        self._client.add_text(role, text)

    def add_tool_output(self, call_id: str, output: str) -> None:
        self._client.add_tool_output(call_id, output)

    # ------------------------------------------------------------------ responses

    def create_response(self, request: B.ResponseRequest) -> int:
        return self._client.create_response(request)

    def cancel_response(self, reason: str = "client_cancelled", *,
                        reported: bool = False) -> bool:
        pipeline = self._pipeline
        turn = self._ledger.open_turn
        if pipeline is None or turn is None:
            return False
        self._ledger.set_reason(turn, reason)
        # A cut the client reports next is made at the end of the audio sent, so that its
        # audio_end_ms, which can only shorten the reply, sets it.
        self._cut_reported = reported
        try:
            interrupted = pipeline.interrupt(turn, reason)
        finally:
            self._cut_reported = False
        if interrupted:
            self._sink.stop()  # the client no longer plays any of it
        return interrupted

    async def truncate_response(self, response_key: int, audio_end_ms: int) -> B.TruncateResult:
        from audio.word_timing import heard_position

        turn = self._ledger.turn_of(response_key)
        pipeline = self._pipeline
        if turn is None or pipeline is None:
            raise B.BackendRejected("item_not_found", "that response is no longer known")
        chunks = self._recorder.chunks(turn)
        # Wire position -> reply position (a resumed reply sent its interrupted word twice).
        heard = heard_position(chunks, self._sink.reply_samples(
            turn, audio_end_ms * B.PROTOCOL_RATE // 1000))
        recut = await pipeline.truncate(turn, heard.word_count, audio_end_ms)
        if recut is None:
            log.warning("truncate of turn %d arrived after a later turn; kept as is", turn)
        elif recut.changed:
            self._ledger.set_text(turn, recut.text)
        return B.TruncateResult(audio_end_ms=audio_end_ms, text=self._ledger.text_of(turn))

    async def context_text(self) -> str:
        pipeline = self._pipeline
        if pipeline is None:
            return ""
        messages = await pipeline.history()
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)

    async def sequence_text(self) -> str:
        """The engine sequence of this conversation, decoded (for inspection and tests);
        raises if it differs from the history's token ids."""
        pipeline = self._pipeline
        if pipeline is None:
            return ""

        return await pipeline.sequence_text()

    def log_entries(self) -> list[L.Entry]:
        """The session pipeline's event log so far, or as it was when the session closed
        (for inspection, tests and benchmarks)."""
        pipeline = self._pipeline
        if pipeline is None or self._closed:
            return list(self._closed_entries)
        return list(pipeline.entries)

    # ------------------------------------------------------------------ output

    def _emit(self, event: B.BackendEvent) -> None:
        if not self._closed:
            self._events.put_nowait(event)

    def _playing_turn(self) -> int | None:
        pipeline = self._pipeline
        return None if pipeline is None else pipeline.active_turn_id

    def _client_keeps_playing(self) -> bool:
        """Whether the client goes on playing the audio it holds when the sink stops now:
        a tentative pause (the client is not told), or a cut it reports itself."""
        pipeline = self._pipeline
        return self._cut_reported or (pipeline is not None
                                      and pipeline.paused_turn_id is not None)

    def _forget_before(self, turn_id: int) -> None:
        """Drop the per-turn state of turns before ``turn_id`` (ids and texts stay)."""
        self._recorder.forget_before(turn_id)
        self._sink.forget_before(turn_id)
        self._ledger.forget_before(turn_id)



def _system_prompt_of(settings: B.SessionSettings) -> tuple[object, ...]:
    """What the conversation's system prompt is made of."""
    return settings.instructions, settings.tools, settings.tool_choice
