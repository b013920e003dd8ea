"""The live loop's front door: one conversation, built one way, driven by commands.

``talk``, ``replay``, the daemon's sessions and ``serve --local-audio`` all open their
conversation with :meth:`Conversation.open` from the same typed
:class:`ConversationSettings`; they differ only in the clock, the audio they feed and
the sink that plays (a device, a file on a virtual clock, a socket), and in what they do
with the typed public output (:mod:`assistant.loop.output`). Commands:

- :meth:`Conversation.feed` / :meth:`Conversation.run`: input audio frames;
- :meth:`Conversation.submit_text`: a whole user turn as text;
- :meth:`Conversation.submit_tool_outputs`: what a client's tools returned, to answer on
  (local tools, ``ConversationSettings.tools``, run in the loop itself);
- :meth:`Conversation.interrupt`: stop the reply as a barge-in would;
- :meth:`Conversation.truncate`: the client heard less of a closed reply than the loop
  assumed (a Realtime ``conversation.item.truncate``);
- :meth:`Conversation.update`: new settings, each field applied where it can change or
  refused with :class:`SettingsError`.

The event log (:attr:`Conversation.entries`) is diagnostics: nothing outside the loop
decides anything from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.recut import Recut, recut_last_reply
from assistant.dialogue.types import DialogueOptions
from assistant.loop.output import OutputCallback
from assistant.loop.pipeline import Pipeline
from assistant.loop.text_turns import results_label
from assistant.loop.tool_worker import LocalTools
from assistant.loop.types import EntryCallback, PipelineOptions, PipelineResult
from assistant.speech.listener import Listener
from assistant.speech.voice import DEFAULT_CLAUSES, ClauseRule
from assistant.turns.events import State
from assistant.turns.options import TurnOptions
from assistant.turns.turn_manager import TurnManager

if TYPE_CHECKING:
    from assistant.llm.host import EngineHost
    from assistant.loop import event_log as log
    from audio.chunk import AudioChunk
    from audio.clock import Clock
    from audio.echo import EchoProcessor
    from audio.sinks import Sink
    from audio.vad import VadOptions

__all__ = ["Conversation", "ConversationModels", "ConversationSettings", "SettingsError",
           "ToolOutput"]


class SettingsError(ValueError):
    """A settings change the conversation cannot apply; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class ConversationSettings:
    """Everything a conversation's behaviour depends on, one typed option object per
    component (``assistant.loop.setup.conversation_settings`` maps the config onto it;
    the daemon maps a session's settings on top)."""

    dialogue: DialogueOptions
    """Generation: system prompt, sampling, limits (from the next turn on when changed)."""
    turns: TurnOptions
    """Turn-taking: the end-of-turn rule, speculation, interruptions (changed at once)."""
    vad: VadOptions
    """Voice activity detection (changed once the utterance in progress ends)."""
    asr: Any
    """Streaming ASR (`audio.streaming_asr.StreamingASROptions`); fixed for a conversation."""
    clauses: ClauseRule = DEFAULT_CLAUSES
    """Where replies are cut into clauses for TTS; fixed for a conversation."""
    pipeline: PipelineOptions = field(default_factory=PipelineOptions)
    """The loop's own scheduling; of these only ``presynthesize`` may change."""
    tools: LocalTools | None = None
    """Tools the loop runs itself when a reply calls them (their definitions must be
    ``dialogue.tools``); None: calls go out on the public output for the adapter to run
    (the daemon's clients run theirs). Fixed for a conversation."""


@dataclass(frozen=True)
class ToolOutput:
    """What a tool call gave, for :meth:`Conversation.submit_tool_outputs`."""

    call_id: str
    name: str
    output: str
    """Text for the model (JSON, by convention)."""


class ConversationModels(Protocol):
    """The loaded models a conversation runs on (`assistant.loop.setup.LoopModels`)."""

    @property
    def host(self) -> EngineHost: ...
    @property
    def template(self) -> Any: ...
    @property
    def transcriber(self) -> Any: ...
    @property
    def synthesizer(self) -> Any: ...
    @property
    def end_model(self) -> Any: ...


_CHANGEABLE_PIPELINE = frozenset({"presynthesize"})


class Conversation:
    """One conversation; see the module docstring. Build it with :meth:`open`."""

    def __init__(self, pipeline: Pipeline, settings: ConversationSettings) -> None:
        self._pipeline = pipeline
        self._settings = settings

    @classmethod
    def open(cls, models: ConversationModels, settings: ConversationSettings, *,
             clock: Clock, sink: Sink, echo: EchoProcessor | None = None,
             synthesizer: Any = None, on_output: OutputCallback | None = None,
             on_entry: EntryCallback | None = None, name: str = "") -> Conversation:
        """A fresh conversation on ``models`` (call inside the running event loop).

        ``echo`` must be the processor whose ``push_reference`` is the sink's tap (None:
        no echo handling); ``synthesizer`` replaces the models' voice (the daemon wraps
        it to record what each reply sent); ``on_output`` gets the public stream,
        ``on_entry`` every diagnostic log entry."""
        template, options = models.template, settings.dialogue
        if settings.tools is not None and settings.tools.time is not None:
            settings.tools.time.bind(clock)  # timers run on the conversation's clock
        pipeline = Pipeline(
            host=models.host, dialogue=lambda backend: Dialogue(backend, template, options),
            transcriber=models.transcriber,
            synthesizer=synthesizer if synthesizer is not None else models.synthesizer,
            turn_manager=TurnManager(settings.turns), listener=Listener(settings.vad, echo),
            clock=clock, sink=sink, asr_options=settings.asr, clauses=settings.clauses,
            options=settings.pipeline, on_entry=on_entry, on_output=on_output, name=name,
            end_model=models.end_model, tools=settings.tools)
        return cls(pipeline, settings)

    # ------------------------------------------------------------------ state

    @property
    def settings(self) -> ConversationSettings:
        return self._settings

    @property
    def pipeline(self) -> Pipeline:
        """The loop underneath (diagnostics and tests; adapters use the commands)."""
        return self._pipeline

    @property
    def state(self) -> State:
        return self._pipeline.state

    @property
    def active_turn_id(self) -> int | None:
        """The reply in flight (thinking or speaking), if any."""
        return self._pipeline.tm.active_turn_id

    @property
    def paused_turn_id(self) -> int | None:
        """The reply paused by speech over it, its cut undecided, if any."""
        return self._pipeline.tm.paused_turn_id

    @property
    def playing_turn_id(self) -> int | None:
        """The reply that owns the sink (from its start, before any audio), if any."""
        return self._pipeline.playback.playing_turn_id

    @property
    def interruptions_pause(self) -> bool:
        """Speech over a reply pauses it until its words decide (tentative)."""
        return self._pipeline.interruptions_pause

    @property
    def entries(self) -> list[log.Entry]:
        """The diagnostic event log so far."""
        return self._pipeline.entries

    def now_ms(self) -> int:
        return self._pipeline.now_ms()

    def is_idle(self) -> bool:
        """Listening, nothing open, nothing playing or pending."""
        return self._pipeline.is_idle()

    # ------------------------------------------------------------------ input

    async def feed(self, frame: AudioChunk) -> None:
        """One input frame (16 kHz, stamped on the conversation's clock)."""
        await self._pipeline.feed(frame)

    async def run(self, frames: Iterable[AudioChunk] | AsyncIterator[AudioChunk]) -> None:
        """Feed every frame of ``frames``."""
        await self._pipeline.run(frames)

    async def run_tail(self, frame_ms: int = 20) -> None:
        """After the input: silence until the conversation is idle (replay)."""
        await self._pipeline.run_tail(frame_ms)

    def submit_text(self, text: str, *, max_new_tokens: int | None = None) -> int | None:
        """Answer ``text`` as a whole user turn now; its turn id, or None when the floor
        is taken or ``text`` is empty. ``max_new_tokens`` applies to this reply only."""
        return self._pipeline.submit_turn(text, max_new_tokens=max_new_tokens)

    def submit_tool_outputs(self, outputs: Sequence[ToolOutput], *, respond: bool = True,
                            max_new_tokens: int | None = None) -> int | None:
        """Give the model what the last reply's tool calls returned (a client ran them).
        ``respond``: answer on them now -- the reply's turn id, or None when the floor
        is taken (then they are recorded without a reply); else only record them."""
        results = tuple((o.name, o.output) for o in outputs)
        if not results:
            raise ValueError("no tool outputs to submit")
        if respond:
            turn = self._pipeline.submit_turn(results_label(results),
                                              max_new_tokens=max_new_tokens,
                                              tool_results=results)
            if turn is not None:
                return turn
        self._pipeline.dialogue.add_tool_results(None, results)
        return None

    def interrupt(self, turn_id: int, reason: str = "cancelled") -> bool:
        """Stop reply ``turn_id`` now, cut to the words heard; False if it is not the
        reply in flight."""
        return self._pipeline.interrupt(turn_id, reason)

    async def truncate(self, turn_id: int, heard_words: int, audio_end_ms: int) -> Recut | None:
        """Closed reply ``turn_id`` was heard only up to its ``heard_words``-th word
        (``audio_end_ms`` into it): cut it there in the history and the cache. None
        when a later turn already followed it (then it is kept as it is)."""
        return await self._pipeline.dialogue.query(
            lambda d: recut_last_reply(d, turn_id, heard_words, audio_end_ms))

    def update(self, settings: ConversationSettings) -> None:
        """Apply new settings: generation from the next turn, turn-taking now, VAD once
        the utterance in progress ends. ASR, clause and scheduling options (but
        ``pipeline.presynthesize``) are fixed: changing one raises `SettingsError`."""
        old = self._settings
        if settings.asr != old.asr:
            raise SettingsError("asr", "the speech recognition options cannot change "
                                "during a conversation")
        if settings.tools != old.tools:
            raise SettingsError("tools", "the local tools cannot change during a "
                                "conversation (the tools a client runs can)")
        if settings.clauses != old.clauses:
            raise SettingsError("clauses", "the clause rule cannot change during a "
                                "conversation")
        for f in dataclasses.fields(PipelineOptions):
            if (f.name not in _CHANGEABLE_PIPELINE
                    and getattr(settings.pipeline, f.name) != getattr(old.pipeline, f.name)):
                raise SettingsError(f"pipeline.{f.name}", "cannot change during a "
                                    "conversation")
        p = self._pipeline
        p.update_settings(
            dialogue=settings.dialogue if settings.dialogue != old.dialogue else None,
            vad=settings.vad if settings.vad != old.vad else None,
            turns=settings.turns if settings.turns != old.turns else None,
            presynthesize=settings.pipeline.presynthesize)
        self._settings = settings

    # ------------------------------------------------------------------ queries

    async def history(self) -> list[dict[str, str]]:
        """The conversation's messages (system prompt first, if any)."""
        messages = await self._pipeline.dialogue.query(lambda d: d.conversation.messages())
        return [dict(m) for m in messages]

    async def sequence_text(self) -> str:
        """The engine sequence decoded; raises if it differs from the history's ids
        (while no reply is in flight)."""
        def read(d: Dialogue) -> str:
            if d.live_turn_id is None and not d.in_sync():
                raise RuntimeError("engine sequence differs from the conversation history")
            return str(d.sequence_text())

        return await self._pipeline.dialogue.query(read)

    # ------------------------------------------------------------------ end

    async def finish(self) -> PipelineResult:
        """Settle, check the engine against the history, compute the metrics (replay)."""
        return await self._pipeline.finish()

    async def aclose(self) -> None:
        """Stop playback, cancel all work, release the conversation (idempotent)."""
        await self._pipeline.aclose()
