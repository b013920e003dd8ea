"""Server -> client events, in the GA (``openai`` SDK ``types/realtime/``) shapes.

The beta spellings (``response.audio.delta``, a flat session object, ``audio`` /
``text`` content parts) are produced from these by the codec in
:mod:`assistant.serve.protocol.codec` when a client connects with ``OpenAI-Beta: realtime=v1``.

Every event carries a server ``event_id``. Times are milliseconds of audio: input
times count from the first sample the client appended in this session; ``audio_end_ms``
of a truncate counts from the start of that item's audio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, get_args

from pydantic import Field

from assistant.serve.protocol.server_objects import (
    AudioFormat,
    ContentPart,
    ConversationItem,
    ErrorDetail,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputTokenDetails,
    Item,
    OutputTokenDetails,
    Response,
    SemanticTurnDetection,
    Session,
    SessionAudio,
    SessionAudioInput,
    SessionAudioOutput,
    SessionTool,
    StatusDetails,
    ToolChoiceFunction,
    TranscriptionConfig,
    TranscriptionUsage,
    TurnDetection,
    Usage,
)

__all__ = [
    "ErrorDetail",
    "Error",
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
    "SessionCreated",
    "SessionUpdated",
    "SpeechStarted",
    "SpeechStopped",
    "InputAudioBufferCommitted",
    "InputAudioBufferCleared",
    "ContentPart",
    "Item",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "ConversationItem",
    "ConversationItemAdded",
    "ConversationItemDone",
    "ConversationItemRetrieved",
    "ConversationItemDeleted",
    "ConversationItemTruncated",
    "TranscriptionDelta",
    "TranscriptionUsage",
    "TranscriptionCompleted",
    "InputTokenDetails",
    "OutputTokenDetails",
    "Usage",
    "StatusDetails",
    "Response",
    "ResponseCreated",
    "ResponseDone",
    "OutputItemAdded",
    "OutputItemDone",
    "ContentPartAdded",
    "ContentPartDone",
    "OutputAudioDelta",
    "OutputAudioDone",
    "OutputAudioTranscriptDelta",
    "OutputAudioTranscriptDone",
    "OutputTextDelta",
    "OutputTextDone",
    "FunctionCallArgumentsDelta",
    "FunctionCallArgumentsDone",
    "ServerEvent",
    "SERVER_EVENT_TYPES",
]


@dataclass(frozen=True, kw_only=True)
class Error:
    type: Literal["error"] = "error"
    event_id: str
    error: ErrorDetail


@dataclass(frozen=True, kw_only=True)
class SessionCreated:
    type: Literal["session.created"] = "session.created"
    event_id: str
    session: Session


@dataclass(frozen=True, kw_only=True)
class SessionUpdated:
    type: Literal["session.updated"] = "session.updated"
    event_id: str
    session: Session


@dataclass(frozen=True, kw_only=True)
class SpeechStarted:
    type: Literal["input_audio_buffer.speech_started"] = "input_audio_buffer.speech_started"
    event_id: str
    audio_start_ms: int
    """Session input time of the onset, including the prefix padding."""
    item_id: str
    """The user item that will hold this speech."""


@dataclass(frozen=True, kw_only=True)
class SpeechStopped:
    type: Literal["input_audio_buffer.speech_stopped"] = "input_audio_buffer.speech_stopped"
    event_id: str
    audio_end_ms: int
    """Session input time at which the turn ended (after the silence duration)."""
    item_id: str


@dataclass(frozen=True, kw_only=True)
class InputAudioBufferCommitted:
    type: Literal["input_audio_buffer.committed"] = "input_audio_buffer.committed"
    event_id: str
    previous_item_id: str | None = None
    item_id: str


@dataclass(frozen=True, kw_only=True)
class InputAudioBufferCleared:
    type: Literal["input_audio_buffer.cleared"] = "input_audio_buffer.cleared"
    event_id: str


@dataclass(frozen=True, kw_only=True)
class ConversationItemAdded:
    """An item joined the conversation (beta name: ``conversation.item.created``): a
    committed user turn, a created item, or an assistant item as its response starts
    (``status`` ``in_progress``, empty content)."""

    type: Literal["conversation.item.added"] = "conversation.item.added"
    event_id: str
    previous_item_id: str | None = None
    item: ConversationItem


@dataclass(frozen=True, kw_only=True)
class ConversationItemDone:
    """An item is final (GA only; beta clients never get it): a user item as soon as it
    is added, an assistant item when its response ends."""

    type: Literal["conversation.item.done"] = "conversation.item.done"
    event_id: str
    previous_item_id: str | None = None
    item: ConversationItem


@dataclass(frozen=True, kw_only=True)
class ConversationItemRetrieved:
    type: Literal["conversation.item.retrieved"] = "conversation.item.retrieved"
    event_id: str
    item: ConversationItem


@dataclass(frozen=True, kw_only=True)
class ConversationItemDeleted:
    """An item left the conversation: a reply the server withdrew because the user went
    on with their turn as it began (their words join the turn it answered)."""

    type: Literal["conversation.item.deleted"] = "conversation.item.deleted"
    event_id: str
    item_id: str


@dataclass(frozen=True, kw_only=True)
class ConversationItemTruncated:
    type: Literal["conversation.item.truncated"] = "conversation.item.truncated"
    event_id: str
    item_id: str
    content_index: int = 0
    audio_end_ms: int


@dataclass(frozen=True, kw_only=True)
class TranscriptionDelta:
    type: Literal["conversation.item.input_audio_transcription.delta"] = (
        "conversation.item.input_audio_transcription.delta"
    )
    event_id: str
    item_id: str
    content_index: int = 0
    delta: str


@dataclass(frozen=True, kw_only=True)
class TranscriptionCompleted:
    type: Literal["conversation.item.input_audio_transcription.completed"] = (
        "conversation.item.input_audio_transcription.completed"
    )
    event_id: str
    item_id: str
    content_index: int = 0
    transcript: str
    usage: TranscriptionUsage


@dataclass(frozen=True, kw_only=True)
class ResponseCreated:
    type: Literal["response.created"] = "response.created"
    event_id: str
    response: Response


@dataclass(frozen=True, kw_only=True)
class ResponseDone:
    type: Literal["response.done"] = "response.done"
    event_id: str
    response: Response


@dataclass(frozen=True, kw_only=True)
class OutputItemAdded:
    type: Literal["response.output_item.added"] = "response.output_item.added"
    event_id: str
    response_id: str
    output_index: int = 0
    item: ConversationItem


@dataclass(frozen=True, kw_only=True)
class OutputItemDone:
    type: Literal["response.output_item.done"] = "response.output_item.done"
    event_id: str
    response_id: str
    output_index: int = 0
    item: ConversationItem


@dataclass(frozen=True, kw_only=True)
class ContentPartAdded:
    type: Literal["response.content_part.added"] = "response.content_part.added"
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    part: ContentPart


@dataclass(frozen=True, kw_only=True)
class ContentPartDone:
    type: Literal["response.content_part.done"] = "response.content_part.done"
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    part: ContentPart


@dataclass(frozen=True, kw_only=True)
class OutputAudioDelta:
    type: Literal["response.output_audio.delta"] = "response.output_audio.delta"
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    delta: str
    """Base64 of little-endian 16-bit PCM, 24 kHz, mono."""


@dataclass(frozen=True, kw_only=True)
class OutputAudioDone:
    type: Literal["response.output_audio.done"] = "response.output_audio.done"
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0


@dataclass(frozen=True, kw_only=True)
class OutputAudioTranscriptDelta:
    type: Literal["response.output_audio_transcript.delta"] = (
        "response.output_audio_transcript.delta"
    )
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    delta: str


@dataclass(frozen=True, kw_only=True)
class OutputAudioTranscriptDone:
    type: Literal["response.output_audio_transcript.done"] = (
        "response.output_audio_transcript.done"
    )
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    transcript: str


@dataclass(frozen=True, kw_only=True)
class OutputTextDelta:
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    delta: str


@dataclass(frozen=True, kw_only=True)
class OutputTextDone:
    type: Literal["response.output_text.done"] = "response.output_text.done"
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    text: str


@dataclass(frozen=True, kw_only=True)
class FunctionCallArgumentsDelta:
    """Part of a function call's arguments (JSON text)."""

    type: Literal["response.function_call_arguments.delta"] = (
        "response.function_call_arguments.delta"
    )
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    call_id: str
    delta: str


@dataclass(frozen=True, kw_only=True)
class FunctionCallArgumentsDone:
    """A function call's arguments are complete (``name``: GA only)."""

    type: Literal["response.function_call_arguments.done"] = (
        "response.function_call_arguments.done"
    )
    event_id: str
    response_id: str
    item_id: str
    output_index: int = 0
    call_id: str
    name: str
    arguments: str


ServerEvent = Annotated[
    Error
    | SessionCreated
    | SessionUpdated
    | SpeechStarted
    | SpeechStopped
    | InputAudioBufferCommitted
    | InputAudioBufferCleared
    | ConversationItemAdded
    | ConversationItemDone
    | ConversationItemRetrieved
    | ConversationItemDeleted
    | ConversationItemTruncated
    | TranscriptionDelta
    | TranscriptionCompleted
    | ResponseCreated
    | ResponseDone
    | OutputItemAdded
    | OutputItemDone
    | ContentPartAdded
    | ContentPartDone
    | OutputAudioDelta
    | OutputAudioDone
    | OutputAudioTranscriptDelta
    | OutputAudioTranscriptDone
    | OutputTextDelta
    | OutputTextDone
    | FunctionCallArgumentsDelta
    | FunctionCallArgumentsDone,
    Field(discriminator="type"),
]

SERVER_EVENT_TYPES: tuple[type, ...] = get_args(get_args(ServerEvent)[0])
"""Every server event class, in `ServerEvent`'s order."""
