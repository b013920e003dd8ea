"""The live loop: audio in, turn-taking, ASR, engine, TTS, audio out -- on asyncio.

::

    frames -> Listener (echo, VAD) -> TurnManager -> actions
                                  \\-> AsrWorker --(preview/final)--> TurnManager
    TurnManager --StartResponse--> EngineWorker --ReplyDelta--> TtsWorker --SpeechChunk--> sink
    sink position --AudioStarted / PlaybackDone--> TurnManager

The event loop only routes: every model call runs on a worker thread
(:mod:`assistant.loop.model_workers`), and results come back through one inbox. Control
overtakes data: turn-manager actions run synchronously in the frame that caused them
(a barge-in stops the sink before anything else happens), cancels are queued ahead of
other work on each worker, and every output carries a ``turn_id`` -- audio of any turn
but the active one is dropped, never played.

Source, sink and clock are injected (a WAV file on a virtual clock for replay, the
microphone and speaker on the device clock for ``talk``, a socket for the daemon).
With ``virtual=True`` the pipeline waits, after each frame, until every worker is idle:
computation takes zero virtual time, so the same input gives the same events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from assistant.dialogue.dialogue import (
    Dialogue,
    ReplyDelta,
    SpeculationDrafted,
    TurnClosed,
    TurnStart,
)
from assistant.loop import event_log as log
from assistant.loop.metrics import compute_metrics
from assistant.loop.model_workers import (
    AsrFinal,
    AsrPartial,
    AsrPreview,
    AsrWorker,
    EngineWorker,
    Presynthesized,
    SpeechChunk,
    SpeechDone,
    TtsWorker,
    TurnWithdrawn,
)
from assistant.loop.playback import ReplyPlayback
from assistant.loop.types import EntryCallback, PipelineError, PipelineOptions, PipelineResult
from assistant.loop.workers import Worker, WorkerFailed
from assistant.speech.listener import Listener, UtteranceAudio, UtteranceClosed, UtteranceOpened
from assistant.turns.events import (
    AudioStarted,
    BargeIn,
    CancelResponse,
    CancelSpeculation,
    DiscardUtterance,
    EndOfTurn,
    FinalizeUtterance,
    FinalTranscript,
    PartialTranscript,
    PlaybackDone,
    RequestPartial,
    ShortPause,
    SpeechResumed,
    SpeechStarted,
    StartResponse,
    StartSpeculation,
    State,
    StateChanged,
    TurnAction,
    TurnInput,
    VoiceFrame,
)
from assistant.turns.turn_manager import TurnManager
from audio.chunk import AudioChunk
from audio.clock import Clock
from audio.sinks import Sink
from audio.word_timing import heard_position

__all__ = ["Pipeline", "PipelineOptions", "PipelineError", "PipelineResult", "EntryCallback"]

_log = logging.getLogger(__name__)


@dataclass
class _Utt:
    utt_id: int
    end_sample: int | None = None


@dataclass
class _Counters:
    next_utt: int = 1
    partials: int = 0
    frames: int = 0
    presynth_ready: set[int] = field(default_factory=set)
    quiet_ms: int = 0
    """Unvoiced input since the last voiced frame of the open utterance."""
    quiet_hold: bool = False
    """Display partials are held because the user went quiet (not yet a short pause)."""


class Pipeline:
    """One conversation; see the module docstring."""

    def __init__(self, *, dialogue: Dialogue, transcriber: Any, synthesizer: Any,
                 turn_manager: TurnManager, listener: Listener, clock: Clock, sink: Sink,
                 asr_options: Any, min_clause_chars: int = 12,
                 options: PipelineOptions | None = None,
                 on_entry: EntryCallback | None = None) -> None:
        self.options = options if options is not None else PipelineOptions()
        self.dialogue = dialogue
        self.tm = turn_manager
        self.listener = listener
        self.clock = clock
        self.sink = sink
        self.synth_rate = int(synthesizer.sample_rate)
        self.entries: list[log.Entry] = []
        self._on_entry = on_entry
        self._loop = asyncio.get_running_loop()
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        post = self._post
        self.engine = EngineWorker(dialogue, post)
        self.asr = AsrWorker(transcriber, asr_options, post, sample_rate=listener.rate)
        self.tts = TtsWorker(synthesizer, post, min_clause_chars=min_clause_chars)
        self._workers: tuple[Worker, ...] = (self.engine, self.asr, self.tts)
        self._utt: _Utt | None = None  # the open (or just closed) utterance
        self._finals: list[int] = []  # utterances awaiting their final transcript
        self._pause_end_sample = 0
        self._next_input_sample = 0
        self._last_end: EndOfTurn | None = None
        self._spec_texts: dict[int, str] = {}
        self._playing: ReplyPlayback | None = None
        self._count = _Counters()
        self._consumer: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False

    # ------------------------------------------------------------------ running

    async def run(self, frames: Iterable[AudioChunk] | AsyncIterator[AudioChunk]) -> None:
        """Process every input frame (see :meth:`run_tail` for what comes after)."""
        if not self.options.virtual and self._consumer is None:
            self._consumer = asyncio.create_task(self._consume())
        if isinstance(frames, AsyncIterator):
            async for frame in frames:
                await self.feed(frame)
        else:
            for frame in frames:
                await self.feed(frame)

    async def feed(self, frame: AudioChunk) -> None:
        """One input frame (16 kHz, stamped on the clock)."""
        self._raise_failure()
        self._count.frames += 1
        self._next_input_sample = frame.end_sample
        # Bring the sink up to now first: its tap is the echo reference for this frame.
        _ = self.sink.played_samples
        for out in self.listener.process(frame):
            if isinstance(out, UtteranceOpened):
                self._open_utterance(out)
            elif isinstance(out, UtteranceAudio):
                if self._utt is not None and self._utt.end_sample is None:
                    self.asr.feed(self._utt.utt_id, out.pcm)
            elif isinstance(out, UtteranceClosed):
                if self._utt is not None:
                    self._utt.end_sample = out.speech_end_sample
            else:
                self._turn_input(out)
        self._poll_playback()
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
        """Listening, nothing open, nothing playing or pending."""
        return (self.tm.state is State.LISTENING and self._playing is None
                and not self._finals and (self._utt is None or self._utt.end_sample is not None))

    async def settle(self) -> None:
        """Wait until no worker has work and every output was handled."""
        while True:
            await asyncio.gather(*(asyncio.wrap_future(w.idle()) for w in self._workers))
            if self._inbox.empty():
                self._raise_failure()
                return
            while not self._inbox.empty():
                self._handle(self._inbox.get_nowait())

    async def finish(self) -> PipelineResult:
        """Settle, check the engine against the history, and compute the metrics."""
        await self.settle_workers()
        metrics = compute_metrics(self.entries, sequence_tokens=len(self.dialogue.sequence),
                                  history_tokens=self.dialogue.conversation.num_tokens,
                                  history_text_matches=self.dialogue.history_text_matches())
        return PipelineResult(self.dialogue.conversation.to_json(), metrics, list(self.entries))

    async def settle_workers(self) -> None:
        if self.options.virtual:
            await self.settle()
        else:
            await asyncio.gather(*(asyncio.wrap_future(w.idle()) for w in self._workers))
            while not self._inbox.empty():
                self._handle(self._inbox.get_nowait())

    async def aclose(self) -> None:
        """Stop playback, cancel all work and stop the worker threads. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._consumer is not None:
            self._consumer.cancel()
        self.sink.stop()
        for w in self._workers:
            await asyncio.to_thread(w.close)

    # ------------------------------------------------------------------ plumbing

    def _post(self, item: Any) -> None:
        """Called from worker threads."""
        with contextlib.suppress(RuntimeError):  # the loop closed during shutdown
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, item)

    async def _consume(self) -> None:
        while True:
            item = await self._inbox.get()
            try:
                self._handle(item)
            except Exception as exc:  # keep the failure for the frame loop to raise
                _log.exception("pipeline handler failed")
                self._failure = exc

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

    def _now_ms(self) -> int:
        return self.clock.now_samples() * 1000 // self.clock.sample_rate

    def _emit(self, entry: log.Entry) -> None:
        self.entries.append(entry)
        if self._on_entry is not None:
            self._on_entry(entry)

    # ------------------------------------------------------------------ worker outputs

    def _handle(self, item: Any) -> None:
        now = self._now_ms()
        if isinstance(item, WorkerFailed):
            self._failure = item.error
        elif isinstance(item, AsrPartial):
            self._count.partials += 1
            self._emit(log.TranscriptPartialEntry(now, item.text))
        elif isinstance(item, AsrPreview):
            if self._utt is not None and item.utt_id == self._utt.utt_id:
                self._turn_input(PartialTranscript(now, item.text))
        elif isinstance(item, AsrFinal):
            if item.utt_id in self._finals:
                self._finals.remove(item.utt_id)
            self._emit(log.TranscriptFinalEntry(now, item.text))
            self._turn_input(FinalTranscript(now, item.text))
        elif isinstance(item, TurnStart):
            self._on_turn_start(item, now)
        elif isinstance(item, ReplyDelta):
            if self._playing is not None and item.turn_id == self._playing.turn_id:
                self.tts.feed(item.turn_id, item.text, item.done)
        elif isinstance(item, SpeculationDrafted):
            if self.options.presynthesize and item.spec_id == self.tm.speculation_id:
                self.tts.presynthesize(item.spec_id, item.text)
        elif isinstance(item, Presynthesized):
            self._count.presynth_ready.add(item.spec_id)
        elif isinstance(item, SpeechChunk):
            self._on_speech_chunk(item, now)
        elif isinstance(item, SpeechDone):
            if self._playing is not None and item.turn_id == self._playing.turn_id:
                self._playing.tts_done = True
                self._poll_playback()
        elif isinstance(item, TurnClosed):
            self._on_turn_closed(item, now)
        elif isinstance(item, TurnWithdrawn):
            pass

    def _on_turn_start(self, start: TurnStart, now: int) -> None:
        if start.spec_id is not None:
            if start.speculation == "hit":
                self._emit(log.SpeculationHitEntry(now, start.spec_id, start.turn_id,
                                                   start.drafted_tokens, start.prompt_tokens))
            else:
                self._emit(log.SpeculationMissEntry(
                    now, start.spec_id, start.turn_id, start.spec_text, start.user_text,
                    start.common_prefix_tokens))
        self._emit(log.ResponseStartedEntry(
            now, start.turn_id, start.user_text, start.prompt_tokens,
            start.prompt_tokens_computed, start.prompt_tokens_reused, start.speculation))

    def _on_speech_chunk(self, item: SpeechChunk, now: int) -> None:
        playing = self._playing
        if playing is None or item.turn_id != playing.turn_id or playing.stopped:
            return  # stale audio of an interrupted or withdrawn turn: never played
        if playing.write(self.sink, item.chunk, now):
            self._emit(log.AudioStartedEntry(now, playing.turn_id, playing.speech_end_ms,
                                             playing.endpoint_ms))
            self._turn_input(AudioStarted(now, playing.turn_id))

    def _on_turn_closed(self, closed: TurnClosed, now: int) -> None:
        turn = closed.turn
        if turn.interrupted:
            self._emit(log.TruncatedEntry(now, closed.turn_id, closed.generated_text, turn.text,
                                          closed.kept_tokens,
                                          closed.generated_tokens, turn.spoken_ms,
                                          closed.sequence_tokens))
        self._emit(log.ResponseDoneEntry(now, closed.turn_id, turn.text, closed.generated_tokens,
                                         turn.interrupted, turn.spoken_ms))

    def _poll_playback(self) -> None:
        playing = self._playing
        if playing is None or playing.stopped or not playing.finished(self.sink):
            return
        self._playing = None
        now = self._now_ms()
        self.engine.finish_turn(playing.turn_id, playing.total_ms(self.sink))
        self._turn_input(PlaybackDone(now, playing.turn_id))

    # ------------------------------------------------------------------ turn manager

    def _open_utterance(self, out: UtteranceOpened) -> None:
        utt = _Utt(self._count.next_utt)
        self._count.next_utt += 1
        self._utt = utt
        self._count.quiet_ms, self._count.quiet_hold = 0, False
        self.asr.open(utt.utt_id, out.pcm, out.start_sample)

    def _on_voice_frame(self, frame: VoiceFrame) -> None:
        """Hold display partials as soon as the user goes quiet, so that no partial
        re-decode is in flight on the ASR worker when the short pause asks for the
        preview (the preview would wait for it, and speculation would start late)."""
        utt, c = self._utt, self._count
        if utt is None or utt.end_sample is not None:
            return
        if frame.voiced:
            c.quiet_ms = 0
            if c.quiet_hold:
                c.quiet_hold = False
                self.asr.hold_partials(utt.utt_id, False)
            return
        c.quiet_ms += frame.duration_ms
        hold_ms = self.options.quiet_hold_ms
        if hold_ms > 0 and c.quiet_ms >= hold_ms and not c.quiet_hold:
            c.quiet_hold = True
            self.asr.hold_partials(utt.utt_id, True)

    def _turn_input(self, event: TurnInput) -> None:
        if isinstance(event, VoiceFrame):
            self._on_voice_frame(event)
        elif isinstance(event, SpeechStarted):
            self._emit(log.SpeechStartedEntry(event.t_ms))
        elif isinstance(event, ShortPause):
            # Decode what a final transcript would see if the turn ended here: the speech
            # plus the same tail (the tail fits in the pause, so the audio is there).
            tail = min(self.options.asr_tail_ms, self.listener.options.short_pause_ms)
            self._pause_end_sample = (self.listener.pause_start_sample
                                      + tail * self.listener.rate // 1000)
            self._count.quiet_hold = False  # the pause holds them now, until speech resumes
            if self._utt is not None:
                self.asr.hold_partials(self._utt.utt_id, True)
        elif isinstance(event, SpeechResumed):
            if self._utt is not None:
                self.asr.hold_partials(self._utt.utt_id, False)
        elif isinstance(event, EndOfTurn):
            self._last_end = event
        for action in self.tm.handle(event):
            self._act(action, event)

    def _act(self, action: TurnAction, cause: TurnInput) -> None:
        now = self._now_ms()
        if isinstance(action, StateChanged):
            self._emit(log.StateEntry(action.t_ms, action.new.value))
        elif isinstance(action, RequestPartial):
            if self._utt is not None:
                self.asr.preview(self._utt.utt_id, self._pause_end_sample)
        elif isinstance(action, FinalizeUtterance):
            assert isinstance(cause, EndOfTurn)
            self._emit(log.SpeechStoppedEntry(cause.t_ms, cause.speech_end_ms))
            if self._utt is not None:
                tail = (min(self.options.asr_tail_ms, self.listener.options.short_pause_ms)
                        * self.listener.rate // 1000)
                end = (self._utt.end_sample or 0) + tail
                self._finals.append(self._utt.utt_id)
                self.asr.finalize(self._utt.utt_id, end)
                self._utt = None
        elif isinstance(action, DiscardUtterance):
            if isinstance(cause, EndOfTurn):
                self._emit(log.SpeechStoppedEntry(cause.t_ms, cause.speech_end_ms,
                                                  discarded=True))
            if self._utt is not None:
                self.asr.discard(self._utt.utt_id)
                self._utt = None
        elif isinstance(action, StartSpeculation):
            self._spec_texts[action.spec_id] = action.user_text
            self._emit(log.SpeculationStartedEntry(now, action.spec_id, action.user_text))
            self.engine.speculate(action.spec_id, action.user_text)
        elif isinstance(action, CancelSpeculation):
            old = self._spec_texts.pop(action.spec_id, "")
            if isinstance(cause, PartialTranscript):
                # The transcript grew past what was speculated: a miss.
                self._emit(log.SpeculationMissEntry(now, action.spec_id, None, old, cause.text,
                                                    0, reason="superseded"))
            else:
                self._emit(log.SpeculationCancelledEntry(now, action.spec_id))
            self.engine.cancel_speculation(action.spec_id)
        elif isinstance(action, StartResponse):
            self._start_response(action, now)
        elif isinstance(action, BargeIn):
            self._barge_in(action, now)
        elif isinstance(action, CancelResponse):
            self._withdraw(action.turn_id)

    def _start_response(self, action: StartResponse, now: int) -> None:
        endpoint = self._last_end
        self._playing = ReplyPlayback(
            turn_id=action.turn_id, tts_rate=self.synth_rate,
            speech_end_ms=action.speech_end_ms,
            endpoint_ms=endpoint.t_ms if endpoint is not None else now,
            gain=10 ** (self.options.output_gain_db / 20))
        premade = action.spec_id if action.spec_id in self._count.presynth_ready else None
        self._count.presynth_ready.clear()
        self.tts.begin(action.turn_id, premade)
        self.engine.start_turn(action.turn_id, action.user_text, action.spec_id)

    def _barge_in(self, action: BargeIn, now: int) -> None:
        playing = self._playing
        if playing is None or playing.turn_id != action.turn_id:
            return
        self._playing = None
        report = playing.stop(self.sink, detected_ms=action.t_ms, now_ms=now)
        self.tts.cancel(action.turn_id)
        self._emit(log.BargeInEntry(action.t_ms, action.turn_id, report.played_at_detection_ms))
        self._emit(log.PlaybackStoppedEntry(report.stopped_at_ms, action.turn_id,
                                            report.heard_ms, report.leaked_ms))
        heard = heard_position(playing.chunks, report.heard_samples)
        self.engine.cut_turn(action.turn_id, heard.char_offset, report.heard_ms)

    def _withdraw(self, turn_id: int) -> None:
        playing = self._playing
        if playing is not None and playing.turn_id == turn_id:
            self._playing = None
            playing.stopped = True
            self.sink.stop()
        self.tts.cancel(turn_id)
        self.engine.withdraw_turn(turn_id)
