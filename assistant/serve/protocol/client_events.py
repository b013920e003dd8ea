"""Client -> server events of the Realtime protocol subset we accept.

Field names and nesting follow the OpenAI Realtime API (the GA shapes in the ``openai``
SDK's ``types/realtime/`` and the older beta shapes in ``types/beta/realtime/``); a
session patch accepts both spellings (``audio.input.turn_detection`` and the beta
top-level ``turn_detection``). Fields a client leaves out are `MISSING`, which is not
the same as an explicit JSON ``null`` (``turn_detection: null`` turns server VAD off).
Unknown fields are ignored, so clients that send more than we support still work; the
``session.updated`` reply shows what took effect.

The JSON codec is :mod:`assistant.serve.protocol.codec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import MISSING, Field

__all__ = [
    "MISSING",
    "AudioFormatParam",
    "TurnDetectionParam",
    "AudioInputParam",
    "AudioOutputParam",
    "AudioParam",
    "SessionParam",
    "SessionUpdate",
    "InputAudioBufferAppend",
    "InputAudioBufferCommit",
    "InputAudioBufferClear",
    "ContentParam",
    "ItemParam",
    "ConversationItemCreate",
    "ConversationItemTruncate",
    "ConversationItemRetrieve",
    "ConversationItemDelete",
    "ResponseParam",
    "ResponseCreate",
    "ResponseCancel",
    "OutputAudioBufferClear",
    "ClientEvent",
    "CLIENT_EVENT_TYPES",
]

Modality = Literal["text", "audio"]
NonNegInt = Annotated[int, Field(ge=0)]
MaxTokens = Annotated[int, Field(ge=1, le=4096)] | Literal["inf"]


@dataclass(frozen=True, kw_only=True)
class AudioFormatParam:
    """An audio format: GA ``{"type": "audio/pcm", "rate": 24000}``."""

    type: str | MISSING = MISSING
    """``audio/pcm`` is accepted; ``audio/pcmu`` and ``audio/pcma`` are refused."""
    rate: int | MISSING = MISSING
    """Hz; only 24000 is accepted."""


@dataclass(frozen=True, kw_only=True)
class TurnDetectionParam:
    """Server VAD settings; a field left out keeps its current value."""

    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    threshold: Annotated[float, Field(ge=0.0, le=1.0)] | MISSING = MISSING
    """Speech probability needed to start speech, 0..1 (Realtime default 0.5)."""
    prefix_padding_ms: NonNegInt | MISSING = MISSING
    """Audio kept before the detected onset, in milliseconds (default 300)."""
    silence_duration_ms: Annotated[int, Field(ge=1)] | MISSING = MISSING
    """Silence that ends the user's turn, in milliseconds (default 500)."""
    create_response: bool | MISSING = MISSING
    """Reply automatically when the turn ends (default true)."""
    interrupt_response: bool | MISSING = MISSING
    """Cancel the reply in progress when the user starts speaking (default true)."""
    eagerness: Literal["low", "medium", "high", "auto"] | MISSING = MISSING
    """semantic_vad only: approximated by a silence duration (see docs/serve.md)."""


@dataclass(frozen=True, kw_only=True)
class AudioInputParam:
    format: AudioFormatParam | MISSING = MISSING
    turn_detection: TurnDetectionParam | None | MISSING = MISSING
    """``null`` turns server VAD off: the client commits and asks for responses."""


@dataclass(frozen=True, kw_only=True)
class AudioOutputParam:
    format: AudioFormatParam | MISSING = MISSING
    voice: str | MISSING = MISSING
    speed: Annotated[float, Field(ge=0.25, le=1.5)] | MISSING = MISSING


@dataclass(frozen=True, kw_only=True)
class AudioParam:
    input: AudioInputParam | MISSING = MISSING
    output: AudioOutputParam | MISSING = MISSING


@dataclass(frozen=True, kw_only=True)
class SessionParam:
    """A partial session configuration: GA fields first, then the beta spellings."""

    type: Literal["realtime", "transcription"] | MISSING = MISSING
    model: str | MISSING = MISSING
    """Accepted and ignored: the daemon serves the model it was started with."""
    instructions: str | MISSING = MISSING
    output_modalities: tuple[Modality, ...] | MISSING = MISSING
    max_output_tokens: MaxTokens | MISSING = MISSING
    audio: AudioParam | MISSING = MISSING
    # beta (OpenAI-Beta: realtime=v1) spellings of the same settings
    modalities: tuple[Modality, ...] | MISSING = MISSING
    max_response_output_tokens: MaxTokens | MISSING = MISSING
    voice: str | MISSING = MISSING
    turn_detection: TurnDetectionParam | None | MISSING = MISSING
    input_audio_format: str | MISSING = MISSING
    """beta: ``pcm16`` (24 kHz) is accepted; ``g711_ulaw`` / ``g711_alaw`` are refused."""
    output_audio_format: str | MISSING = MISSING
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | MISSING = MISSING
    # both dialects
    tools: tuple[dict[str, Any], ...] | None | MISSING = MISSING
    """Function tools (``{"type": "function", "name", "description", "parameters"}``);
    checked field by field by :func:`~assistant.serve.protocol.settings.apply_update`
    (an MCP server or another type is refused there, naming the field)."""
    tool_choice: str | dict[str, Any] | MISSING = MISSING
    """``auto``, ``none``, ``required``, or ``{"type": "function", "name": ...}`` (a beta
    client may send the bare name)."""


@dataclass(frozen=True, kw_only=True)
class SessionUpdate:
    type: Literal["session.update"] = "session.update"
    event_id: str | MISSING = MISSING
    session: SessionParam


@dataclass(frozen=True, kw_only=True)
class InputAudioBufferAppend:
    type: Literal["input_audio_buffer.append"] = "input_audio_buffer.append"
    event_id: str | MISSING = MISSING
    audio: str
    """Base64 of little-endian 16-bit PCM, 24 kHz, mono."""


@dataclass(frozen=True, kw_only=True)
class InputAudioBufferCommit:
    type: Literal["input_audio_buffer.commit"] = "input_audio_buffer.commit"
    event_id: str | MISSING = MISSING


@dataclass(frozen=True, kw_only=True)
class InputAudioBufferClear:
    type: Literal["input_audio_buffer.clear"] = "input_audio_buffer.clear"
    event_id: str | MISSING = MISSING


@dataclass(frozen=True, kw_only=True)
class ContentParam:
    type: Literal["input_text", "text", "output_text", "input_audio", "audio", "output_audio"]
    text: str | MISSING = MISSING
    transcript: str | MISSING = MISSING
    audio: str | MISSING = MISSING


@dataclass(frozen=True, kw_only=True)
class ItemParam:
    """A conversation item from the client: a text message, or what a tool returned
    (``function_call_output``); a ``function_call`` is parsed to be refused by name."""

    type: Literal["message", "function_call", "function_call_output"] = "message"
    id: str | MISSING = MISSING
    role: Literal["user", "assistant", "system"] | MISSING = MISSING
    content: tuple[ContentParam, ...] = ()
    call_id: str | MISSING = MISSING
    """``function_call_output``: the call it answers."""
    output: str | MISSING = MISSING
    """``function_call_output``: what the tool returned (free text, often JSON)."""
    name: str | MISSING = MISSING
    arguments: str | MISSING = MISSING


@dataclass(frozen=True, kw_only=True)
class ConversationItemCreate:
    type: Literal["conversation.item.create"] = "conversation.item.create"
    event_id: str | MISSING = MISSING
    previous_item_id: str | None | MISSING = MISSING
    item: ItemParam


@dataclass(frozen=True, kw_only=True)
class ConversationItemTruncate:
    type: Literal["conversation.item.truncate"] = "conversation.item.truncate"
    event_id: str | MISSING = MISSING
    item_id: str
    content_index: NonNegInt = 0
    audio_end_ms: NonNegInt
    """How much of the item's audio the user heard, in milliseconds."""


@dataclass(frozen=True, kw_only=True)
class ConversationItemRetrieve:
    type: Literal["conversation.item.retrieve"] = "conversation.item.retrieve"
    event_id: str | MISSING = MISSING
    item_id: str


@dataclass(frozen=True, kw_only=True)
class ConversationItemDelete:
    """Parsed so that the refusal names the event; deleting from the middle of the
    cached context is not supported (see DESIGN.md section 5)."""

    type: Literal["conversation.item.delete"] = "conversation.item.delete"
    event_id: str | MISSING = MISSING
    item_id: str


@dataclass(frozen=True, kw_only=True)
class ResponseParam:
    instructions: str | MISSING = MISSING
    output_modalities: tuple[Modality, ...] | MISSING = MISSING
    modalities: tuple[Modality, ...] | MISSING = MISSING
    max_output_tokens: MaxTokens | MISSING = MISSING
    max_response_output_tokens: MaxTokens | MISSING = MISSING
    conversation: str | MISSING = MISSING
    """Only ``auto`` (the default conversation) is supported."""
    metadata: dict[str, str] | None | MISSING = MISSING
    """Echoed back on the response object."""


@dataclass(frozen=True, kw_only=True)
class ResponseCreate:
    type: Literal["response.create"] = "response.create"
    event_id: str | MISSING = MISSING
    response: ResponseParam | MISSING = MISSING


@dataclass(frozen=True, kw_only=True)
class ResponseCancel:
    type: Literal["response.cancel"] = "response.cancel"
    event_id: str | MISSING = MISSING
    response_id: str | MISSING = MISSING


@dataclass(frozen=True, kw_only=True)
class OutputAudioBufferClear:
    """WebRTC-only in the Realtime API; accepted and answered with an error here."""

    type: Literal["output_audio_buffer.clear"] = "output_audio_buffer.clear"
    event_id: str | MISSING = MISSING


ClientEvent = Annotated[
    SessionUpdate
    | InputAudioBufferAppend
    | InputAudioBufferCommit
    | InputAudioBufferClear
    | ConversationItemCreate
    | ConversationItemTruncate
    | ConversationItemRetrieve
    | ConversationItemDelete
    | ResponseCreate
    | ResponseCancel
    | OutputAudioBufferClear,
    Field(discriminator="type"),
]

CLIENT_EVENT_TYPES: tuple[type, ...] = (
    SessionUpdate,
    InputAudioBufferAppend,
    InputAudioBufferCommit,
    InputAudioBufferClear,
    ConversationItemCreate,
    ConversationItemTruncate,
    ConversationItemRetrieve,
    ConversationItemDelete,
    ResponseCreate,
    ResponseCancel,
    OutputAudioBufferClear,
)
