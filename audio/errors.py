"""Errors raised by the audio package.

Every user-facing error carries one line naming the file or thing and the problem, so
the CLI can print ``error: <message>`` without a traceback.
"""

from __future__ import annotations

__all__ = [
    "AudioError",
    "AudioFileError",
    "AudioFormatError",
    "AudioValueError",
    "ModelLoadError",
    "DeviceError",
]


class AudioError(Exception):
    """Base class for every error raised by :mod:`audio`."""


class AudioValueError(AudioError, ValueError):
    """Samples that cannot be used: NaN/inf, wrong shape or dtype, empty audio."""


class AudioFileError(AudioError):
    """A file that cannot be read or written (missing, truncated, not a WAV, ...)."""


class AudioFormatError(AudioFileError):
    """A well-formed file in a format we do not support (A-law, compressed, ...)."""


class ModelLoadError(AudioError):
    """An ASR or TTS model that cannot be found or loaded."""


class DeviceError(AudioError):
    """An audio device (PortAudio) that is missing or cannot be opened."""
