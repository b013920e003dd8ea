"""What a daemon session hears of its conversation: the loop's output as `BackendEvent`\\ s.

:class:`ConversationEvents` translates the conversation's public output
(`assistant.loop.output`: speech started / stopped, final transcripts, response started
/ done / withdrawn, tool calls, failures) and the chunks the `NetworkSink` sends (a reply's text
and audio) into the events a `SessionBackend` yields, one handler per type in
:data:`_OUTPUT_HANDLERS`; :class:`~assistant.serve.backend.ledger.ResponseLedger` maps
turns to responses. The floor's state and transcripts in progress are not sent.

(How interruptions reach the client: :mod:`~assistant.serve.backend.pipeline_backend`.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from assistant.loop import output as O
from assistant.serve.backend import contract as B
from assistant.serve.backend.ledger import ResponseLedger
from assistant.serve.backend.network_io import RecordingSynthesizer

__all__ = ["ConversationEvents"]

KEPT_TURNS = 4
"""Per-turn state is kept for this many turns before the one starting (a long session
stays bounded)."""

KEPT_CALLS = 64
"""Tool calls the client has not answered yet that are remembered (the oldest go)."""


class ConversationEvents:
    """See the module docstring.

    ``settings`` gives the session's settings now, ``active_turn`` the conversation's
    reply in progress (None without one, or without a conversation), and
    ``forget_before(turn_id)`` drops the backend's per-turn state of older turns.
    ``min_speech_ms`` is the VAD's: speech is reported when it has lasted that long.
    ``local_tools``: the conversation runs its tools itself (``tools.enabled``), so its
    calls are not the client's to run and are not sent.
    """

    def __init__(self, *, ledger: ResponseLedger, recorder: RecordingSynthesizer,
                 emit: Callable[[B.BackendEvent], None],
                 settings: Callable[[], B.SessionSettings],
                 active_turn: Callable[[], int | None],
                 forget_before: Callable[[int], None],
                 min_speech_ms: int, local_tools: bool = False) -> None:
        self._ledger = ledger
        self._recorder = recorder
        self._emit = emit
        self._settings = settings
        self._active_turn = active_turn
        self._forget_before = forget_before
        self._min_speech_ms = min_speech_ms
        self._local_tools = local_tools
        self._requested_modalities: dict[int, tuple[str, ...]] = {}
        """``response.create``'s output modalities by response key, until it starts."""
        self._speech_start_ms = 0
        self._awaiting_transcripts = 0
        self._calls: dict[str, str] = {}
        """Tool calls sent to the client and not answered yet: ``call_id`` -> name."""

    def take_call(self, call_id: str) -> str | None:
        """The name of call ``call_id``, which the client answers now (None: no such
        call, or it was answered)."""
        return self._calls.pop(call_id, None)

    def request_modalities(self, key: int, modalities: tuple[str, ...]) -> None:
        """Response ``key`` (requested, not started) is to have ``modalities``."""
        self._requested_modalities[key] = modalities

    def drop_request(self, key: int) -> None:
        """Response ``key`` will not start."""
        self._requested_modalities.pop(key, None)

    def on_chunk(self, turn: int, text: str, pcm: bytes) -> None:
        """The sink sent part of turn ``turn``: its text and audio (24 kHz PCM16)."""
        key = self._ledger.key_of(turn)
        if key is None or turn != self._ledger.open_turn:
            return
        if text:
            self._emit(B.ResponseText(response_key=key, delta=text))
        if pcm:
            self._emit(B.ResponseAudio(response_key=key, pcm=pcm))

    def on_output(self, event: O.ConversationEvent) -> None:
        """One event of the conversation's public output."""
        handler = _OUTPUT_HANDLERS.get(type(event))
        if handler is not None:  # the floor's state and transcripts in progress: not sent
            handler(self, event)

    def _on_speech_started(self, event: O.SpeechStarted) -> None:
        td = self._settings().turn_detection or B.TurnDetectionSettings()
        self._speech_start_ms = max(
            0, event.t_ms - self._min_speech_ms - td.prefix_padding_ms)
        self._emit(B.SpeechStarted(audio_start_ms=self._speech_start_ms))

    def _on_speech_stopped(self, event: O.SpeechStopped) -> None:
        self._emit(B.SpeechStopped(audio_end_ms=event.t_ms))
        if not event.discarded:
            self._awaiting_transcripts += 1
            self._emit(B.InputCommitted(audio_ms=max(0, event.speech_end_ms
                                                     - self._speech_start_ms)))

    def _on_transcript(self, event: O.TranscriptFinal) -> None:
        if self._awaiting_transcripts > 0:
            self._awaiting_transcripts -= 1
            self._emit(B.UserTranscript(text=event.text,
                                        audio_ms=max(0, event.t_ms - self._speech_start_ms)))

    def _on_response_started(self, event: O.ResponseStarted) -> None:
        if event.turn_id != self._active_turn():
            return  # a reply withdrawn before it started
        key = self._ledger.start(event.turn_id, B.TokenUsage(
            input_tokens=event.prompt_tokens_reused + event.prompt_tokens_computed,
            cached_tokens=event.prompt_tokens_reused))
        # Text only: no speech, so the text goes out as it is generated (the TTS worker
        # speaks this turn's clauses after this, in order).
        modalities = self._requested_modalities.pop(key, self._settings().output_modalities)
        self._recorder.set_text_only(event.turn_id, "audio" not in modalities)
        self._forget_before(event.turn_id - KEPT_TURNS)
        self._emit(B.ResponseStarted(response_key=key))

    def _on_response_done(self, event: O.ResponseDone) -> None:
        done = self._ledger.finish(event.turn_id, text=event.text,
                                   output_tokens=event.generated_tokens,
                                   interrupted=event.interrupted)
        if done is not None:
            self._emit(done)

    def _on_tool_call(self, event: O.ToolCallRequested) -> None:
        key = self._ledger.key_of(event.turn_id)
        if self._local_tools or key is None or event.turn_id != self._ledger.open_turn:
            return
        if event.error:
            self._emit(B.BackendFailure(code="invalid_tool_call",
                                        message=f"the model's tool call could not be read "
                                        f"({event.error}); it was not sent"))
            return
        self._calls[event.call_id] = event.name
        while len(self._calls) > KEPT_CALLS:
            del self._calls[next(iter(self._calls))]
        self._emit(B.ResponseFunctionCall(response_key=key, call_id=event.call_id,
                                          name=event.name, arguments=event.arguments))

    def _on_response_withdrawn(self, event: O.ResponseWithdrawn) -> None:
        done = self._ledger.withdraw(event.turn_id)
        if done is not None:
            self._emit(done)

    def _on_engine_failed(self, event: O.Failure) -> None:
        self._emit(B.BackendFailure(code="engine_failed", message=event.error))


_OUTPUT_HANDLERS: dict[type, Callable[[ConversationEvents, Any], None]] = {
    O.SpeechStarted: ConversationEvents._on_speech_started,
    O.SpeechStopped: ConversationEvents._on_speech_stopped,
    O.TranscriptFinal: ConversationEvents._on_transcript,
    O.ResponseStarted: ConversationEvents._on_response_started,
    O.ToolCallRequested: ConversationEvents._on_tool_call,
    O.ResponseDone: ConversationEvents._on_response_done,
    O.ResponseWithdrawn: ConversationEvents._on_response_withdrawn,
    O.Failure: ConversationEvents._on_engine_failed,
}
"""The conversation's public event type -> what the Realtime session hears of it."""
