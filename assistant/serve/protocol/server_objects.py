"""The objects inside Realtime server events (GA shapes): sessions, items, content
parts, responses, usage, errors. The events that carry them are in
:mod:`assistant.serve.protocol.server_events`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

__all__ = [
    "ErrorDetail",
    "AudioFormat",
    "TurnDetection",
    "SemanticTurnDetection",
    "TranscriptionConfig",
    "SessionAudioInput",
    "SessionAudioOutput",
    "SessionAudio",
    "SessionTool",
    "ToolChoiceFunction",
    "Session",
    "ContentPart",
    "Item",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "ConversationItem",
    "TranscriptionUsage",
    "InputTokenDetails",
    "OutputTokenDetails",
    "Usage",
    "StatusDetails",
    "Response",
]

Modality = Literal["text", "audio"]


@dataclass(frozen=True, kw_only=True)
class ErrorDetail:
    type: str
    """``invalid_request_error`` (the client's fault) or ``server_error``."""
    code: str | None = None
    """Machine-readable cause, e.g. ``invalid_json``, ``unknown_event``, ``session_limit``."""
    message: str
    param: str | None = None
    """Dotted path of the offending field, when there is one."""
    event_id: str | None = None
    """The client event that caused the error, when it had an ``event_id``."""


@dataclass(frozen=True, kw_only=True)
class AudioFormat:
    type: Literal["audio/pcm"] = "audio/pcm"
    rate: Literal[24000] = 24000


@dataclass(frozen=True, kw_only=True)
class TurnDetection:
    type: Literal["server_vad"] = "server_vad"
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: None = None


@dataclass(frozen=True, kw_only=True)
class SemanticTurnDetection:
    type: Literal["semantic_vad"] = "semantic_vad"
    eagerness: Literal["low", "medium", "high", "auto"] = "auto"
    create_response: bool = True
    interrupt_response: bool = True


@dataclass(frozen=True, kw_only=True)
class TranscriptionConfig:
    model: str
    """The ASR model that transcribes the user's audio."""
    language: str | None = None


@dataclass(frozen=True, kw_only=True)
class SessionAudioInput:
    format: AudioFormat = field(default_factory=AudioFormat)
    transcription: TranscriptionConfig | None = None
    turn_detection: TurnDetection | SemanticTurnDetection | None = field(
        default_factory=TurnDetection)
    noise_reduction: None = None


@dataclass(frozen=True, kw_only=True)
class SessionAudioOutput:
    format: AudioFormat = field(default_factory=AudioFormat)
    voice: str
    speed: float = 1.0


@dataclass(frozen=True, kw_only=True)
class SessionAudio:
    input: SessionAudioInput
    output: SessionAudioOutput


@dataclass(frozen=True, kw_only=True)
class SessionTool:
    """A function tool of the session (the client's definition, as checked)."""

    type: Literal["function"] = "function"
    name: str
    description: str = ""
    parameters: dict[str, Any]
    """JSON schema of the arguments."""


@dataclass(frozen=True, kw_only=True)
class ToolChoiceFunction:
    """``tool_choice`` naming the function the model must call."""

    type: Literal["function"] = "function"
    name: str


@dataclass(frozen=True, kw_only=True)
class Session:
    """The effective session configuration (GA shape)."""

    type: Literal["realtime"] = "realtime"
    object: Literal["realtime.session"] = "realtime.session"
    id: str
    model: str
    output_modalities: tuple[Modality, ...] = ("audio",)
    instructions: str
    max_output_tokens: int | Literal["inf"] = "inf"
    audio: SessionAudio
    tools: tuple[SessionTool, ...] = ()
    tool_choice: Literal["auto", "none", "required"] | ToolChoiceFunction = "auto"


@dataclass(frozen=True, kw_only=True)
class ContentPart:
    """An item's content (``input_audio``, ``output_audio``...) or, in the
    ``response.content_part.*`` events, a part of the response (``audio`` / ``text``)."""

    type: Literal["input_audio", "input_text", "output_audio", "output_text", "audio", "text"]
    transcript: str | None = None
    """For audio parts; ``None`` while not yet known."""
    text: str | None = None
    """For text parts."""


@dataclass(frozen=True, kw_only=True)
class Item:
    id: str
    object: Literal["realtime.item"] = "realtime.item"
    type: Literal["message"] = "message"
    status: Literal["completed", "incomplete", "in_progress"] = "completed"
    role: Literal["user", "assistant", "system"]
    content: tuple[ContentPart, ...] = ()


@dataclass(frozen=True, kw_only=True)
class FunctionCallItem:
    """A reply's call of one of the client's tools."""

    id: str
    object: Literal["realtime.item"] = "realtime.item"
    type: Literal["function_call"] = "function_call"
    status: Literal["completed", "incomplete", "in_progress"] = "completed"
    call_id: str
    name: str
    arguments: str = ""
    """JSON text; empty while the item is in progress."""


@dataclass(frozen=True, kw_only=True)
class FunctionCallOutputItem:
    """What the client's tool returned for a call."""

    id: str
    object: Literal["realtime.item"] = "realtime.item"
    type: Literal["function_call_output"] = "function_call_output"
    status: Literal["completed", "incomplete", "in_progress"] = "completed"
    call_id: str
    output: str


ConversationItem = Annotated[Item | FunctionCallItem | FunctionCallOutputItem,
                             Field(discriminator="type")]
"""Any item of the conversation, told apart by ``type``."""


@dataclass(frozen=True, kw_only=True)
class TranscriptionUsage:
    type: Literal["duration"] = "duration"
    seconds: float
    """Seconds of user audio transcribed."""


@dataclass(frozen=True, kw_only=True)
class InputTokenDetails:
    cached_tokens: int = 0
    """Prompt tokens served from shared / reused KV pages (not computed)."""
    text_tokens: int = 0
    audio_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class OutputTokenDetails:
    text_tokens: int = 0
    audio_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class Usage:
    total_tokens: int
    input_tokens: int
    output_tokens: int
    input_token_details: InputTokenDetails = field(default_factory=InputTokenDetails)
    output_token_details: OutputTokenDetails = field(default_factory=OutputTokenDetails)


@dataclass(frozen=True, kw_only=True)
class StatusDetails:
    type: Literal["completed", "cancelled", "incomplete", "failed"]
    reason: str | None = None
    """``turn_detected``, ``client_cancelled``, ``max_output_tokens``, ``shutdown``..."""
    error: ErrorDetail | None = None


@dataclass(frozen=True, kw_only=True)
class Response:
    id: str
    object: Literal["realtime.response"] = "realtime.response"
    status: Literal["in_progress", "completed", "cancelled", "incomplete", "failed"]
    status_details: StatusDetails | None = None
    output: tuple[ConversationItem, ...] = ()
    output_modalities: tuple[Modality, ...] = ("audio",)
    conversation_id: str | None = None
    max_output_tokens: int | Literal["inf"] = "inf"
    metadata: dict[str, str] | None = None
    usage: Usage | None = None
