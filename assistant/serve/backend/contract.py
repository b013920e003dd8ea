"""The seam between one client's protocol session and the conversation behind it.

A `SessionBackend` is one conversation: it hears the client's audio, detects turns
(server VAD), transcribes, generates and speaks. The protocol layer
(:mod:`assistant.serve.session`) only translates: client events become calls on the
backend, and the `BackendEvent`\\ s the backend reports become Realtime server events
with ids. Two implementations: the real one over the assistant pipeline and the shared
engine (:mod:`assistant.serve.backend.pipeline_backend`), and a scripted fake in the tests.

Contract
- Calls are made from the event loop and must not block: heavy work runs elsewhere.
  `push_audio` waits while the backend's input queue is full -- that wait is the
  per-session backpressure that reaches the client's socket. `truncate_response` is
  awaitable because it edits the engine's sequence on the engine's thread.
- Events come out of `events()`, in order. Response events carry the backend's
  ``response_key`` (an int) so stale ones can be told apart; the protocol session maps
  keys to Realtime ids.
- Times are integers: input times in milliseconds of audio the client appended (the
  session's own clock, derived from sample counts), output audio as 24 kHz samples.
- `cancel_response` and `aclose` are idempotent.

Tools are the client's (Realtime function calling): a reply may call one
(`ResponseFunctionCall`, before its `ResponseFinished`); the client runs it and gives
back its output (`add_tool_output`), which the next `create_response` answers on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "PROTOCOL_RATE",
    "TurnDetectionSettings",
    "FunctionTool",
    "TOOL_CHOICE_MODES",
    "SessionSettings",
    "ResponseRequest",
    "TokenUsage",
    "TruncateResult",
    "SpeechStarted",
    "SpeechStopped",
    "InputCommitted",
    "UserTranscript",
    "ResponseStarted",
    "ResponseText",
    "ResponseAudio",
    "ResponseFunctionCall",
    "ResponseFinished",
    "BackendFailure",
    "BackendEvent",
    "BackendRejected",
    "SessionBackend",
    "BackendFactory",
]

PROTOCOL_RATE = 24_000
"""Sample rate of every audio byte on the wire (Realtime ``audio/pcm``), in Hz."""


@dataclass(frozen=True, kw_only=True)
class TurnDetectionSettings:
    """Server VAD knobs, with the Realtime API defaults."""

    type: str = "server_vad"
    """``server_vad``: the turn ends after ``silence_duration_ms`` of silence;
    ``semantic_vad``: after a silence our model's end-of-turn score sets (between the
    ``eagerness`` limits), ``silence_duration_ms`` when there is nothing to score."""
    eagerness: str = "auto"
    """semantic_vad: low | medium | high | auto (see :data:`~assistant.turns.end_of_turn.EAGERNESS`)."""
    threshold: float = 0.5
    """Speech probability (0..1) that starts speech."""
    prefix_padding_ms: int = 300
    """Audio kept before the detected onset."""
    silence_duration_ms: int = 500
    """Silence that ends the user's turn."""
    create_response: bool = True
    """Reply automatically at the end of the user's turn."""
    interrupt_response: bool = True
    """Barge-in: user speech cancels the reply in progress."""


@dataclass(frozen=True, kw_only=True)
class FunctionTool:
    """A function the client offers the model (Realtime ``session.tools``); the client
    runs it when a reply calls it. Checked by the protocol layer (a valid name, an
    object JSON schema)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})
    """JSON schema (``type: object``) of the arguments."""


TOOL_CHOICE_MODES = ("auto", "none", "required")
"""``tool_choice`` values that are not a function's name."""


@dataclass(frozen=True, kw_only=True)
class SessionSettings:
    """The effective settings of one session."""

    instructions: str
    """System prompt."""
    voice: str
    """Name of the TTS voice."""
    turn_detection: TurnDetectionSettings | None = field(default_factory=TurnDetectionSettings)
    """``None``: no server VAD; the client commits audio and asks for responses."""
    output_modalities: tuple[Literal["text", "audio"], ...] = ("audio",)
    max_output_tokens: int | None = None
    """``None``: the server's limit."""
    temperature: float | None = None
    """``None``: the server's sampling settings."""
    speed: float = 1.0
    """Speaking rate multiplier (TTS length scale is its inverse)."""
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: str = "auto"
    """``auto``, ``none``, ``required`` (one of :data:`TOOL_CHOICE_MODES`) or the name
    of one of ``tools``, which the model must call."""


@dataclass(frozen=True, kw_only=True)
class ResponseRequest:
    """Per-response overrides from ``response.create``."""

    instructions: str | None = None
    output_modalities: tuple[Literal["text", "audio"], ...] | None = None
    max_output_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class TokenUsage:
    input_tokens: int = 0
    """Prompt tokens of this response (the whole context)."""
    cached_tokens: int = 0
    """Of those, tokens reused from KV pages (shared or kept from earlier turns)."""
    output_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class TruncateResult:
    """What is left of a response after the client reported how much it played."""

    audio_end_ms: int
    """The position the response was cut at."""
    text: str
    """The words heard, which is now all the conversation keeps of the response."""


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, kw_only=True)
class SpeechStarted:
    audio_start_ms: int
    """Session input time of the onset, including prefix padding."""


@dataclass(frozen=True, kw_only=True)
class SpeechStopped:
    audio_end_ms: int
    """Session input time at which the turn ended."""


@dataclass(frozen=True, kw_only=True)
class InputCommitted:
    """The audio heard so far became a user turn (by VAD or by ``commit_audio``)."""

    audio_ms: int
    """Duration of the committed audio."""


@dataclass(frozen=True, kw_only=True)
class UserTranscript:
    """Transcript of the most recently committed user turn."""

    text: str
    audio_ms: int
    """Duration of the transcribed audio."""


@dataclass(frozen=True, kw_only=True)
class ResponseStarted:
    response_key: int


@dataclass(frozen=True, kw_only=True)
class ResponseText:
    """Text of the response as it will be spoken (or shown, in text mode)."""

    response_key: int
    delta: str


@dataclass(frozen=True, kw_only=True)
class ResponseAudio:
    response_key: int
    pcm: bytes
    """Little-endian int16 samples, 24 kHz mono."""


@dataclass(frozen=True, kw_only=True)
class ResponseFunctionCall:
    """The response calls one of the client's tools (reported before it finishes)."""

    response_key: int
    call_id: str
    name: str
    arguments: str
    """JSON text of the arguments."""


@dataclass(frozen=True, kw_only=True)
class ResponseFinished:
    response_key: int
    status: Literal["completed", "cancelled", "incomplete", "failed"]
    reason: str | None = None
    """``turn_detected``, ``client_cancelled``, ``max_output_tokens``, ``shutdown``..."""
    text: str = ""
    """Everything the response said (before any later truncation)."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    withdrawn: bool = False
    """The reply left the conversation: the user went on with their turn before, or as,
    it began to play (their words join the turn it answered)."""


@dataclass(frozen=True, kw_only=True)
class BackendFailure:
    """Something went wrong that the client should hear about (the session goes on)."""

    code: str
    message: str


BackendEvent = (
    SpeechStarted
    | SpeechStopped
    | InputCommitted
    | UserTranscript
    | ResponseStarted
    | ResponseText
    | ResponseAudio
    | ResponseFunctionCall
    | ResponseFinished
    | BackendFailure
)


class BackendRejected(Exception):
    """A call the backend refuses (e.g. committing an empty buffer); becomes an error
    event with ``code``."""

    def __init__(self, code: str, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


class SessionBackend(Protocol):
    """One conversation behind one protocol session (see the module docstring)."""

    def configure(self, settings: SessionSettings) -> None:
        """Apply new settings; takes effect for the next turn. Raises `BackendRejected`
        for a setting this backend cannot honour (the old settings stay)."""
        ...

    async def push_audio(self, pcm: npt.NDArray[np.int16]) -> None:
        """Append client audio (24 kHz mono int16); waits while the input queue is full."""
        ...

    def commit_audio(self) -> None:
        """Make the buffered audio a user turn (manual turn detection).
        Raises `BackendRejected` when there is nothing to commit."""
        ...

    def clear_audio(self) -> None:
        """Drop buffered, uncommitted audio."""
        ...

    def add_text(self, role: Literal["user", "assistant", "system"], text: str) -> None:
        """Append a text message to the conversation."""
        ...

    def add_tool_output(self, call_id: str, output: str) -> None:
        """What the client's tool returned for call ``call_id`` (a `ResponseFunctionCall`
        of this session); the next `create_response` answers on it. Raises
        `BackendRejected` for an unknown or already answered call."""
        ...

    def create_response(self, request: ResponseRequest) -> int:
        """Start a response to the conversation so far (new user input or tool outputs);
        returns its ``response_key`` (and reports `ResponseStarted`). Raises
        `BackendRejected` while another response is in progress."""
        ...

    def cancel_response(self, reason: str = "client_cancelled", *,
                        reported: bool = False) -> bool:
        """Cancel the response in progress; False when there is none. Idempotent.
        ``reported``: the client reports how much it played next (a truncate of the
        response's item), so the cut keeps everything sent until then."""
        ...

    async def truncate_response(self, response_key: int, audio_end_ms: int) -> TruncateResult:
        """Keep only what was heard of a finished or cancelled response: the words
        spoken within its first ``audio_end_ms`` of audio, in the history and in the
        engine's sequence. Raises `BackendRejected` for an unknown key or a position
        past the audio sent."""
        ...

    async def context_text(self) -> str:
        """The conversation as the model will see it next (for inspection and tests;
        read on the engine thread, hence awaitable)."""
        ...

    def events(self) -> AsyncIterator[BackendEvent]:
        """What happened, in order; ends after `aclose`."""
        ...

    async def aclose(self) -> None:
        """Cancel everything and release engine sequences and models. Idempotent."""
        ...


BackendFactory = Callable[[SessionSettings], SessionBackend]
"""Builds the backend of a new session from its initial settings."""
