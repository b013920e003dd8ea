"""The live loop: audio in, turn-taking, ASR, engine, TTS, audio out -- on asyncio.

::

    frames -> Listener (echo, VAD) -> TurnManager -> actions
                                  \\-> UtteranceTracker -> AsrWorker --(preview/final)--> TurnManager
    TurnManager --StartResponse--> DialogueClient (engine thread) --ReplyDelta--> TtsWorker
    TtsWorker --SpeechChunk--> PlaybackController -> sink
    sink position --AudioStarted / PlaybackDone--> TurnManager

The event loop only routes: every model call runs on a worker thread (ASR, TTS) or on
the process's one engine thread (:mod:`assistant.llm.host`), and results come back
through one inbox, dispatched by type through a table. Control overtakes data:
turn-manager actions run synchronously in the frame that caused them (a barge-in stops
the sink before anything else happens), cancels are queued ahead of other work, and
every output carries a ``turn_id`` -- audio of any turn but the one that owns the sink
is dropped, never played.

Source, sink and clock are injected (a WAV file on a virtual clock for replay, the
microphone and speaker on the device clock for ``talk``, a socket for the daemon).
With ``virtual=True`` the pipeline waits, after each frame, until every worker is idle:
computation takes zero virtual time, so the same input gives the same events.

Built and driven through :class:`assistant.loop.conversation.Conversation`, the front
door: its commands and queries are this class's methods and its dialogue client's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueOptions
from assistant.loop import event_log as log
from assistant.loop.asr_worker import AsrWorker
from assistant.loop.engine_client import DialogueClient
from assistant.loop.metrics import compute_metrics
from assistant.loop.output import OutputCallback
from assistant.loop.parts import LoopParts
from assistant.loop.playback import PlaybackController
from assistant.loop.publish import Publisher
from assistant.loop.router import handle_output, poll_playback, run_action
from assistant.loop.tasks import cancel_and_wait
from assistant.loop.text_turns import start_text_turn
from assistant.loop.tool_worker import LocalTools, ToolWorker
from assistant.loop.tts_worker import TtsWorker
from assistant.loop.types import EntryCallback, PipelineError, PipelineOptions, PipelineResult
from assistant.loop.utterances import UtteranceTracker, decode_tail_ms
from assistant.speech.listener import (
    Listener,
    UtteranceAudio,
    UtteranceClosed,
    UtteranceOpened,
    UtterancePaused,
)
from assistant.speech.voice import DEFAULT_CLAUSES, ClauseRule
from assistant.turns.actions import BargeIn, TurnAction
from assistant.turns.events import (
    EndOfTurn,
    Interrupt,
    ShortPause,
    SpeechResumed,
    SpeechStarted,
    State,
    TurnInput,
    TurnRulesChanged,
    VoiceFrame,
)
from assistant.turns.options import TurnOptions
from assistant.turns.turn_manager import TurnManager
from audio.chunk import AudioChunk
from audio.clock import Clock
from audio.sinks import Sink

if TYPE_CHECKING:
    from assistant.llm.host import EngineHost
    from assistant.llm.protocol import LLMBackend
    from audio.vad import VadOptions

__all__ = ["Pipeline", "PipelineOptions", "PipelineError", "PipelineResult", "EntryCallback"]

_log = logging.getLogger(__name__)


class Pipeline:
    """One conversation; see the module docstring."""

    def __init__(self, *, host: EngineHost, dialogue: Callable[[LLMBackend], Dialogue],
                 transcriber: Any, synthesizer: Any, turn_manager: TurnManager,
                 listener: Listener, clock: Clock, sink: Sink, asr_options: Any,
                 clauses: ClauseRule = DEFAULT_CLAUSES, options: PipelineOptions | None = None,
                 on_entry: EntryCallback | None = None, name: str = "",
                 end_model: Any = None, on_output: OutputCallback | None = None,
                 tools: LocalTools | None = None) -> None:
        """``dialogue(backend)`` builds the conversation on the engine thread of ``host``;
        ``end_model``: the audio end-of-turn model (`audio.smart_turn.SmartTurn`), asked
        at pauses when the turn manager's options use it. ``on_entry`` gets every event
        log entry (diagnostics); ``on_output`` the public stream (`assistant.loop.output`),
        which adapters act on; ``tools``: the local tools its replies may call."""
        self.options = options if options is not None else PipelineOptions()
        self.tm = turn_manager
        self.listener = listener
        self.clock = clock
        self.sink = sink
        self._publisher = Publisher(on_entry, on_output)
        self.entries: list[log.Entry] = self._publisher.entries
        self._loop = asyncio.get_running_loop()
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        post = self._post
        self.dialogue = DialogueClient(host, dialogue, post, name=name)
        self.asr = AsrWorker(transcriber, asr_options, post, sample_rate=listener.rate,
                             end_model=end_model)
        self._gate = host.gate if self.options.pause_priority else None
        self.tts = TtsWorker(synthesizer, post, clauses=clauses,
                             gate=host.gate if self.options.first_clause_priority else None)
        self.tools = ToolWorker(tools, post, self._emit, self.now_ms)
        self._stages: tuple[Any, ...] = (self.dialogue, self.asr, self.tts)
        self.utterances = UtteranceTracker(self.asr, rate=listener.rate,
                                           quiet_hold_ms=self.options.quiet_hold_ms)
        self.playback = PlaybackController(sink, int(synthesizer.sample_rate),
                                           gain_db=self.options.output_gain_db)
        self.parts = LoopParts(
            tm=turn_manager, utterances=self.utterances, playback=self.playback,
            dialogue=self.dialogue, tts=self.tts, tools=self.tools, options=self.options,
            emit=self._emit, publish=self._publisher.publish, now_ms=self.now_ms,
            turn_input=self._turn_input, fail=self._fail, asr_tail_ms=self._asr_tail_ms,
            set_pause_limit=lambda ms: self.listener.set_pause_limit(ms),
            hears_speaker=lambda: self.listener.hears_speaker)
        self._next_input_sample = 0
        self._pending_vad: VadOptions | None = None
        self._consumer: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._close_task: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ public API

    @property
    def state(self) -> State:
        return self.tm.state

    @property
    def interruptions_pause(self) -> bool:
        """Speech over a reply pauses it until its words decide (tentative
        interruptions), rather than cutting it at once."""
        return self.tm.options.interruption.mode == "tentative"

    def now_ms(self) -> int:
        return self.clock.now_samples() * 1000 // self.clock.sample_rate

    def submit_turn(self, text: str, *, max_new_tokens: int | None = None,
                    tool_results: tuple[tuple[str, str], ...] = (),
                    say: bool = False) -> int | None:
        """Answer ``text`` as a whole user turn (or, with ``tool_results``, the results
        ``(name, output)`` of the last reply's calls, ``text`` labelling them; with
        ``say``, the assistant says ``text`` itself), now; returns its turn id, or None
        when the floor is taken (someone speaking or a reply in flight) or ``text`` is
        empty. ``max_new_tokens``: this reply only."""
        now = self.now_ms()
        start = start_text_turn(self.parts, text, tool_results=tool_results,
                                said=text if say else "", max_new_tokens=max_new_tokens)
        if start is None:
            return None
        self._emit(log.TextTurnEntry(now, start.turn_id, start.user_text))
        return start.turn_id

    def interrupt(self, turn_id: int, reason: str = "cancelled") -> bool:
        """Stop reply ``turn_id`` as a barge-in would, without user speech: playback stops
        now and the reply is cut to the words heard (none if nothing played). False if
        it is not the reply in flight."""
        actions = self._turn_input(Interrupt(self.now_ms(), turn_id, reason))
        return any(isinstance(a, BargeIn) for a in actions)

    def update_settings(self, *, dialogue: DialogueOptions | None = None,
                        vad: VadOptions | None = None, turns: TurnOptions | None = None,
                        presynthesize: bool | None = None) -> None:
        """Change settings where they can change: generation options from the next turn
        on, VAD options once the utterance in progress ends, turn-taking options now.
        (:meth:`Conversation.update <assistant.loop.conversation.Conversation.update>`
        is the public way.)"""
        if presynthesize is not None and presynthesize != self.options.presynthesize:
            self.options = dataclasses.replace(self.options, presynthesize=presynthesize)
            self.parts.options = self.options
        if dialogue is not None:
            self.dialogue.set_options(dialogue)
        if turns is not None and turns != self.tm.options:
            self._turn_input(TurnRulesChanged(self.now_ms(), turns))
        if vad is not None:
            self._pending_vad = vad
            self._apply_vad()

    # ------------------------------------------------------------------ running

    async def run(self, frames: Iterable[AudioChunk] | AsyncIterator[AudioChunk]) -> None:
        """Process every input frame (see :meth:`run_tail` for what comes after)."""
        if not self.options.virtual and self._consumer is None:
            self._consumer = asyncio.create_task(self._consume(), name="pipeline-inbox")
            self._consumer.add_done_callback(self._consumer_done)
        if isinstance(frames, AsyncIterator):
            async for frame in frames:
                await self.feed(frame)
        else:
            for frame in frames:
                await self.feed(frame)

    async def feed(self, frame: AudioChunk) -> None:
        """One input frame (16 kHz, stamped on the clock)."""
        self._raise_failure()
        self._next_input_sample = frame.end_sample
        # Bring the sink up to now first: its tap is the echo reference for this frame.
        _ = self.sink.played_samples
        for out in self.listener.process(frame):
            if isinstance(out, UtteranceOpened):
                # Before its SpeechStarted: the state says whose floor the speech began on.
                self.utterances.open(out.pcm, out.start_sample, partials=(
                    self.options.listening_partials or self.tm.assistant_has_floor))
            elif isinstance(out, UtteranceAudio):
                self.utterances.audio(out.pcm)
            elif isinstance(out, UtterancePaused):
                self.utterances.paused(out.speech_end_sample, self._asr_tail_ms(),
                                       with_p=self.tm.hears_over_reply)
            elif isinstance(out, UtteranceClosed):
                self.utterances.closed(out.speech_end_sample)
                self._apply_vad()
            else:
                self._turn_input(out)
        self._poll_playback()
        self.tools.poll_timers(self.tm.state is State.LISTENING)
        if self.options.virtual:
            await self.settle()

    async def run_tail(self, frame_ms: int = 20) -> None:
        """After the input: silence frames until the conversation is idle (or a limit)."""
        rate = self.listener.rate
        n = rate * frame_ms // 1000
        start = self._next_input_sample  # continue the input's timeline without a gap
        limit = start + rate * self.options.max_tail_ms // 1000
        while start < limit and not self.is_idle():
            await self._wait_until_sample((start + n) * self.clock.sample_rate // rate)
            await self.feed(AudioChunk(np.zeros(n, np.float32), rate, start))
            start += n

    def is_idle(self) -> bool:
        """Listening, nothing open, nothing playing or pending: every reply closed, no
        tool running."""
        return (self.tm.state is State.LISTENING and self.playback.current is None
                and self.utterances.settled and not self.parts.open_turns
                and not self.tools.busy)

    async def settle(self) -> None:
        """Wait until no worker has work and every output was handled."""
        while True:
            await asyncio.gather(*(asyncio.wrap_future(w.idle())
                                   for w in (*self._stages, self.tools)))
            if self._inbox.empty():
                self._raise_failure()
                return
            while not self._inbox.empty():
                self._handle(self._inbox.get_nowait())

    async def finish(self) -> PipelineResult:
        """Settle, check the engine against the history, and compute the metrics."""
        await self.settle_workers()
        seq_tokens, hist_tokens, matches, conversation = await self.dialogue.query(
            lambda d: (len(d.sequence), d.conversation.num_tokens, d.history_text_matches(),
                       d.conversation.to_json()))
        metrics = compute_metrics(self.entries, sequence_tokens=seq_tokens,
                                  history_tokens=hist_tokens, history_text_matches=matches)
        return PipelineResult(conversation, metrics, list(self.entries))

    async def settle_workers(self) -> None:
        if self.options.virtual:
            await self.settle()
        else:
            await asyncio.gather(*(asyncio.wrap_future(w.idle()) for w in self._stages))
            while not self._inbox.empty():
                self._handle(self._inbox.get_nowait())
            self._raise_failure()

    async def aclose(self) -> None:
        """Stop playback, cancel all work, release the conversation and stop the worker
        threads. Idempotent, and safe to cancel: the close goes on to the end (a caller
        cancelled mid-close must not leave the conversation on the engine)."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        if self._consumer is not None:
            await cancel_and_wait(self._consumer, logger=_log, what="pipeline inbox")
        self.sink.stop()
        self.tools.close()
        if self._gate is not None:
            self._gate.set_held(self, False)
        for stage in self._stages:
            await asyncio.to_thread(stage.close)

    # ------------------------------------------------------------------ plumbing

    def _post(self, item: Any) -> None:
        """Called from worker threads and the engine thread."""
        if self._loop.is_closed():
            return  # the process is shutting down: nobody is listening any more
        # The loop may close between the check and the call: then nobody listens either.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, item)

    async def _consume(self) -> None:
        while True:
            item = await self._inbox.get()
            try:
                self._handle(item)
            except Exception as exc:  # kept for the frame loop to raise
                _log.exception("pipeline handler failed")
                self._failure = self._failure or exc

    def _consumer_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._failure = self._failure or task.exception()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise PipelineError(f"pipeline failed: {failure}") from failure

    async def _wait_until_sample(self, sample: int) -> None:
        if self.options.virtual:
            self.clock.wait_until(sample)
            return
        while True:
            remaining = (sample - self.clock.now_samples()) / self.clock.sample_rate
            if remaining <= 0:
                return
            await asyncio.sleep(min(remaining, 0.02))

    def _emit(self, entry: log.Entry) -> None:
        # Speech starting while a reply holds the floor is held until it counts.
        self._publisher.emit(entry, over_reply=(
            isinstance(entry, log.SpeechStartedEntry) and self.interruptions_pause
            and self.tm.assistant_has_floor))

    def _apply_vad(self) -> None:
        vad = self._pending_vad
        if vad is None or self.listener.vad.in_speech:
            return  # applied at the end of the utterance in progress
        self.listener = Listener(vad, self.listener.echo)
        self._pending_vad = None

    # ------------------------------------------------------------------ routing

    def _asr_tail_ms(self) -> int:
        vad = self.listener.options
        return decode_tail_ms(self.options.asr_tail_ms, vad.short_pause_ms, vad.pause_onset_ms)

    def _handle(self, item: Any) -> None:
        handle_output(self.parts, item)

    def _fail(self, error: BaseException) -> None:
        self._failure = self._failure or error

    def _poll_playback(self) -> None:
        poll_playback(self.parts)

    def _turn_input(self, event: TurnInput) -> list[TurnAction]:
        if isinstance(event, VoiceFrame):
            self.utterances.voice_frame(event.voiced, event.duration_ms)
        elif isinstance(event, SpeechStarted):
            self._emit(log.SpeechStartedEntry(event.t_ms))
            self.tools.cancel("the user spoke")
        elif isinstance(event, ShortPause):
            self._emit(log.PauseEntry(event.t_ms, self.listener.ms(
                self.listener.pause_start_sample)))
            self.utterances.short_pause(self.listener.pause_start_sample, self._asr_tail_ms())
        elif isinstance(event, SpeechResumed):
            self.utterances.speech_resumed()
        elif isinstance(event, EndOfTurn):
            self.parts.last_end = event
        actions = self.tm.handle(event)
        for action in actions:
            run_action(self.parts, action, event)
        # While a reply is paused (its cut undecided), ASR has the CPU: the speech's words
        # decide the cut, and the reply's clauses and tokens ahead of playback are not
        # needed yet.
        paused = self.tm.paused_turn_id is not None
        self.tts.hold(paused)
        if self._gate is not None:
            self._gate.set_held(self, paused)
        return actions
