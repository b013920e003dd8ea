"""Session settings: apply a ``session.update`` patch, and describe the effective session.

`apply_update` merges a client's partial session (GA or beta spelling) into the current
`SessionSettings`, refusing what we cannot honour with a `ProtocolError` that names the
field (``session.audio.input.format.type``); tools are checked in
:mod:`~assistant.serve.protocol.tools`. `describe_session` builds the session
object that ``session.created`` / ``session.updated`` report back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pydantic import MISSING

from assistant.serve.backend.contract import PROTOCOL_RATE, SessionSettings, TurnDetectionSettings
from assistant.serve.protocol import server_events as S
from assistant.serve.protocol.client_events import (
    AudioFormatParam,
    AudioInputParam,
    AudioOutputParam,
    SessionParam,
    TurnDetectionParam,
)
from assistant.serve.protocol.codec import ProtocolError
from assistant.serve.protocol.tools import (
    check_tool_choice,
    describe_tool_choice,
    describe_tools,
    parse_tool_choice,
    parse_tools,
)

__all__ = ["OPENAI_VOICES", "SEMANTIC_SILENCE_MS", "ServedModels", "apply_update", "describe_session"]

OPENAI_VOICES = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"}
)
"""Realtime built-in voice names; accepted as aliases of the daemon's default voice."""

SEMANTIC_SILENCE_MS = {"low": 800, "medium": 500, "auto": 500, "high": 300}
"""``semantic_vad`` eagerness: the silence that ends a turn with nothing to score (ms)."""


@dataclass(frozen=True, kw_only=True)
class ServedModels:
    """What the daemon serves, for the session object and voice checks."""

    model: str
    """Name reported as the session's model (the LLM)."""
    transcription_model: str
    default_voice: str
    voices: frozenset[str] = frozenset()
    """Every voice name a session may select (the default included)."""


def _check_format(fmt: AudioFormatParam, param: str) -> None:
    if fmt.type is not MISSING and fmt.type != "audio/pcm":
        raise ProtocolError(
            "unsupported_audio_format",
            f"audio format {fmt.type!r} is not supported; use audio/pcm (24 kHz, 16-bit mono)",
            param=f"{param}.type",
        )
    if fmt.rate is not MISSING and fmt.rate != PROTOCOL_RATE:
        raise ProtocolError(
            "unsupported_audio_format",
            f"audio/pcm rate {fmt.rate} is not supported; only {PROTOCOL_RATE} Hz",
            param=f"{param}.rate",
        )


def _check_beta_format(value: str, param: str) -> None:
    if value != "pcm16":
        raise ProtocolError(
            "unsupported_audio_format",
            f"audio format {value!r} is not supported; use pcm16 (24 kHz, 16-bit mono)",
            param=param,
        )


def _turn_detection(
    current: TurnDetectionSettings | None, patch: TurnDetectionParam | None
) -> TurnDetectionSettings | None:
    if patch is None:
        return None
    base = current or TurnDetectionSettings()
    updates: dict[str, object] = {}
    for name in (
        "threshold",
        "prefix_padding_ms",
        "silence_duration_ms",
        "create_response",
        "interrupt_response",
    ):
        value = getattr(patch, name)
        if value is not MISSING:
            updates[name] = value
    updates["type"] = patch.type
    if patch.type == "semantic_vad" and patch.eagerness is not MISSING:
        updates["eagerness"] = patch.eagerness
        updates["silence_duration_ms"] = SEMANTIC_SILENCE_MS[patch.eagerness]
    return dataclasses.replace(base, **updates)  # type: ignore[arg-type]


def _voice(name: str, served: ServedModels, param: str) -> str:
    if name in served.voices:
        return name
    if name in OPENAI_VOICES:
        return served.default_voice
    known = ", ".join(sorted(served.voices))
    raise ProtocolError(
        "unknown_voice",
        f"unknown voice {name!r} (known: {known}, or an OpenAI voice name for the default)",
        param=param,
    )


def _first(*values: object) -> object:
    for value in values:
        if value is not MISSING:
            return value
    return MISSING


def apply_update(
    current: SessionSettings, patch: SessionParam, served: ServedModels
) -> SessionSettings:
    """Merge ``patch`` into ``current``; fields the patch leaves out keep their value."""
    if patch.type == "transcription":
        raise ProtocolError(
            "unsupported_session_type",
            "transcription-only sessions are not supported; use type 'realtime'",
            param="session.type",
        )
    updates: dict[str, object] = {}
    if patch.instructions is not MISSING:
        updates["instructions"] = patch.instructions
    modalities = _first(patch.output_modalities, patch.modalities)
    if modalities is not MISSING:
        updates["output_modalities"] = _modalities(modalities)  # type: ignore[arg-type]
    max_tokens = _first(patch.max_output_tokens, patch.max_response_output_tokens)
    if max_tokens is not MISSING:
        updates["max_output_tokens"] = None if max_tokens == "inf" else max_tokens
    if patch.temperature is not MISSING:
        updates["temperature"] = patch.temperature
    audio_in: AudioInputParam | MISSING = MISSING
    audio_out: AudioOutputParam | MISSING = MISSING
    if patch.audio is not MISSING:
        audio_in, audio_out = patch.audio.input, patch.audio.output
    if audio_in is not MISSING:
        if audio_in.format is not MISSING:
            _check_format(audio_in.format, "session.audio.input.format")
        if audio_in.turn_detection is not MISSING:
            updates["turn_detection"] = _turn_detection(
                current.turn_detection, audio_in.turn_detection
            )
    if audio_out is not MISSING:
        if audio_out.format is not MISSING:
            _check_format(audio_out.format, "session.audio.output.format")
        if audio_out.voice is not MISSING:
            updates["voice"] = _voice(audio_out.voice, served, "session.audio.output.voice")
        if audio_out.speed is not MISSING:
            updates["speed"] = audio_out.speed
    if patch.input_audio_format is not MISSING:
        _check_beta_format(patch.input_audio_format, "session.input_audio_format")
    if patch.output_audio_format is not MISSING:
        _check_beta_format(patch.output_audio_format, "session.output_audio_format")
    if patch.voice is not MISSING:
        updates["voice"] = _voice(patch.voice, served, "session.voice")
    if patch.turn_detection is not MISSING:
        updates["turn_detection"] = _turn_detection(current.turn_detection, patch.turn_detection)
    tools = current.tools
    if patch.tools is not MISSING:
        tools = updates["tools"] = parse_tools(patch.tools)
    if patch.tool_choice is not MISSING:
        updates["tool_choice"] = parse_tool_choice(patch.tool_choice, tools)
    else:
        check_tool_choice(current.tool_choice, tools, "session.tools")
    return dataclasses.replace(current, **updates)  # type: ignore[arg-type]


def _modalities(values: tuple[str, ...]) -> tuple[str, ...]:
    unique = tuple(dict.fromkeys(values))
    if len(unique) != 1:
        # The Realtime API answers with audio *and* its transcript for ["audio"]; a
        # beta client's ["text", "audio"] means the same thing.
        return ("audio",) if "audio" in unique else ("text",)
    return unique


def describe_session(
    settings: SessionSettings, *, session_id: str, served: ServedModels
) -> S.Session:
    """The session object reported in ``session.created`` / ``session.updated``."""
    td = settings.turn_detection
    return S.Session(
        id=session_id,
        model=served.model,
        output_modalities=settings.output_modalities,
        instructions=settings.instructions,
        max_output_tokens="inf" if settings.max_output_tokens is None else settings.max_output_tokens,
        audio=S.SessionAudio(
            input=S.SessionAudioInput(
                transcription=S.TranscriptionConfig(model=served.transcription_model),
                turn_detection=None
                if td is None
                else S.SemanticTurnDetection(
                    eagerness=td.eagerness,  # type: ignore[arg-type]
                    create_response=td.create_response,
                    interrupt_response=td.interrupt_response,
                )
                if td.type == "semantic_vad"
                else S.TurnDetection(
                    threshold=td.threshold,
                    prefix_padding_ms=td.prefix_padding_ms,
                    silence_duration_ms=td.silence_duration_ms,
                    create_response=td.create_response,
                    interrupt_response=td.interrupt_response,
                ),
            ),
            output=S.SessionAudioOutput(voice=settings.voice, speed=settings.speed),
        ),
        tools=describe_tools(settings.tools),
        tool_choice=describe_tool_choice(settings.tool_choice),
    )

