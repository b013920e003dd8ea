"""audio: frames and clock, files, resampling, VAD, ASR, TTS, playback, echo.

The public names below are imported lazily (PEP 562 ``__getattr__``) so that
``import audio`` stays cheap: faster-whisper, piper and sounddevice load only when a
component that needs them is created.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    # errors
    "AudioError",
    "AudioFileError",
    "AudioFormatError",
    "AudioValueError",
    "DeviceError",
    "ModelLoadError",
    # frames
    "AudioChunk",
    "resample",
    "StreamResampler",
    # files
    "WavInfo",
    "read_wav",
    "write_wav",
    "load_for_asr",
    # tts
    "Synthesizer",
    "TTSChunk",
    "WordTiming",
    "StreamingTTS",
    "ClauseChunker",
    "HeardPosition",
    "heard_position",
    # asr
    "Transcriber",
    "Transcript",
    "TranscriptSegment",
    "TranscribedWord",
    "StreamingTranscriber",
    "TranscriptPartial",
    "TranscriptFinal",
    "LocalAgreement",
    # clock, VAD, devices and files as streams, echo (see their modules)
    "Clock",
    "VirtualClock",
    "DeviceClock",
    "Vad",
    "VadOptions",
    "VadEvent",
    "SpeechStarted",
    "PauseOnset",
    "ShortPause",
    "SpeechResumed",
    "SpeechStopped",
    "WavFileSource",
    "MicSource",
    "Sink",
    "NullSink",
    "WavSink",
    "SpeakerSink",
    "EchoOptions",
    "EchoProcessor",
]

_WHERE = {
    "AudioError": "audio.errors",
    "AudioFileError": "audio.errors",
    "AudioFormatError": "audio.errors",
    "AudioValueError": "audio.errors",
    "DeviceError": "audio.errors",
    "ModelLoadError": "audio.errors",
    "AudioChunk": "audio.chunk",
    "resample": "audio.resample",
    "StreamResampler": "audio.resample",
    "WavInfo": "audio.wav",
    "read_wav": "audio.wav",
    "write_wav": "audio.wav",
    "load_for_asr": "audio.wav",
    "Synthesizer": "audio.tts",
    "TTSChunk": "audio.word_timing",
    "WordTiming": "audio.word_timing",
    "HeardPosition": "audio.word_timing",
    "heard_position": "audio.word_timing",
    "StreamingTTS": "audio.tts",
    "ClauseChunker": "audio.clauses",
    "Transcriber": "audio.asr",
    "Transcript": "audio.asr",
    "TranscriptSegment": "audio.asr",
    "TranscribedWord": "audio.asr",
    "StreamingTranscriber": "audio.streaming_asr",
    "TranscriptPartial": "audio.streaming_asr",
    "TranscriptFinal": "audio.streaming_asr",
    "LocalAgreement": "audio.streaming_asr",
    "Clock": "audio.clock",
    "VirtualClock": "audio.clock",
    "DeviceClock": "audio.clock",
    "Vad": "audio.vad",
    "VadOptions": "audio.vad",
    "VadEvent": "audio.vad",
    "SpeechStarted": "audio.vad",
    "PauseOnset": "audio.vad",
    "ShortPause": "audio.vad",
    "SpeechResumed": "audio.vad",
    "SpeechStopped": "audio.vad",
    "WavFileSource": "audio.sources",
    "MicSource": "audio.sources",
    "Sink": "audio.sinks",
    "NullSink": "audio.sinks",
    "WavSink": "audio.sinks",
    "SpeakerSink": "audio.speaker_sink",
    "EchoOptions": "audio.echo",
    "EchoProcessor": "audio.echo",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from audio.asr import TranscribedWord, Transcriber, Transcript, TranscriptSegment
    from audio.chunk import AudioChunk
    from audio.clauses import ClauseChunker
    from audio.clock import Clock, DeviceClock, VirtualClock
    from audio.echo import EchoOptions, EchoProcessor
    from audio.errors import (
        AudioError,
        AudioFileError,
        AudioFormatError,
        AudioValueError,
        DeviceError,
        ModelLoadError,
    )
    from audio.resample import StreamResampler, resample
    from audio.sinks import NullSink, Sink, WavSink
    from audio.sources import MicSource, WavFileSource
    from audio.speaker_sink import SpeakerSink
    from audio.streaming_asr import (
        LocalAgreement,
        StreamingTranscriber,
        TranscriptFinal,
        TranscriptPartial,
    )
    from audio.tts import StreamingTTS, Synthesizer
    from audio.vad import (
        PauseOnset,
        ShortPause,
        SpeechResumed,
        SpeechStarted,
        SpeechStopped,
        Vad,
        VadEvent,
        VadOptions,
    )
    from audio.wav import WavInfo, load_for_asr, read_wav, write_wav
    from audio.word_timing import HeardPosition, TTSChunk, WordTiming, heard_position


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'audio' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
