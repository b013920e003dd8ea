"""Voice activity detection on audio: per-frame decisions feeding :mod:`audio.vad_machine`.

Per frame (10, 20 or 30 ms), a classifier says "speech" (WebRTC VAD by default, or
Silero in :mod:`audio.silero_vad`). The frame must also be above an absolute energy
floor and ``noise_margin_db`` above the background level, tracked as the quietest frame
of the last ``noise_window_ms`` (minimum statistics, after R. Martin, "Noise power
spectral density estimation based on optimal smoothing and minimum statistics", 2001,
reduced to one band); speech already going on continues down to ``hold_margin_db``
above it (hysteresis, as Silero's reference iterator ends speech at a lower threshold
than it starts it). A speech frame counts as *voiced* when its spectral flatness is
low: white noise and clicks are flat (~0.5-1), voiced speech is not (~0.01-0.2); the
feature is the one used by Moattar & Homayounpour, "A simple but efficient real-time
voice activity detection algorithm" (EUSIPCO 2009). The decisions drive the pure
:class:`VadStateMachine`, whose options and events are re-exported here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from audio.chunk import AudioChunk
from audio.errors import AudioValueError
from audio.vad_machine import (
    PauseOnset,
    ShortPause,
    SpeechResumed,
    SpeechStarted,
    SpeechStopped,
    VadBackend,
    VadEvent,
    VadOptions,
    VadStateMachine,
)

__all__ = [
    "VadBackend",
    "VadOptions",
    "VadEvent",
    "SpeechStarted",
    "PauseOnset",
    "ShortPause",
    "SpeechResumed",
    "SpeechStopped",
    "FrameClassifier",
    "WebRtcClassifier",
    "FrameFeatures",
    "frame_features",
    "frame_energy_dbfs",
    "spectral_flatness",
    "VadStateMachine",
    "Vad",
    "make_classifier",
]


# ---------------------------------------------------------------------- frame level


@dataclass(frozen=True)
class FrameFeatures:
    energy_dbfs: float
    """RMS level, dB relative to a full-scale (1.0) constant."""
    flatness: float
    """Spectral flatness over 100-4000 Hz: geometric / arithmetic mean power, 0..1."""


def frame_energy_dbfs(frame: npt.NDArray[np.float32]) -> float:
    """RMS level of one float frame in dB re full scale."""
    energy = float(np.dot(frame, frame)) / frame.size if frame.size else 0.0
    return 10.0 * float(np.log10(energy + 1e-12))


def spectral_flatness(frame: npt.NDArray[np.float32], sample_rate: int) -> float:
    """Geometric / arithmetic mean of the 100-4000 Hz power spectrum (1.0 for silence)."""
    n = frame.size
    if n < 8 or not np.any(frame):
        return 1.0
    power = np.abs(np.fft.rfft(frame.astype(np.float64) * np.hanning(n))) ** 2
    lo = max(1, int(100 * n / sample_rate))
    hi = min(power.size, int(4000 * n / sample_rate) + 1)
    band = power[lo:hi] + 1e-20
    return float(np.exp(np.mean(np.log(band))) / np.mean(band))


def frame_features(frame: npt.NDArray[np.float32], sample_rate: int) -> FrameFeatures:
    """Level and spectral flatness of one float frame in [-1, 1]."""
    return FrameFeatures(frame_energy_dbfs(frame), spectral_flatness(frame, sample_rate))


class FrameClassifier(Protocol):
    """Says whether one frame (float32 mono at the VAD rate) contains speech."""

    def is_speech(self, frame: npt.NDArray[np.float32]) -> bool: ...

    def reset(self) -> None: ...


class WebRtcClassifier:
    """The WebRTC VAD (``webrtcvad-wheels``), one frame at a time."""

    def __init__(self, aggressiveness: int, sample_rate: int) -> None:
        import webrtcvad

        self._vad = webrtcvad.Vad(int(aggressiveness))
        self._aggressiveness = int(aggressiveness)
        self._rate = int(sample_rate)

    def is_speech(self, frame: npt.NDArray[np.float32]) -> bool:
        pcm = np.clip(np.round(frame.astype(np.float64) * 32768.0), -32768, 32767)
        return bool(self._vad.is_speech(pcm.astype("<i2").tobytes(), self._rate))

    def reset(self) -> None:
        import webrtcvad

        self._vad = webrtcvad.Vad(self._aggressiveness)


def make_classifier(options: VadOptions) -> FrameClassifier:
    """The classifier named by ``options.backend``."""
    if options.backend == "silero":
        from audio.silero_vad import SileroClassifier

        return SileroClassifier(options.silero_threshold, options.sample_rate)
    return WebRtcClassifier(options.aggressiveness, options.sample_rate)


# ------------------------------------------------------------------------ audio VAD


_DIGITAL_SILENCE_DBFS = -100.0


class _NoiseFloor:
    """Running minimum of frame levels over a trailing window (monotonic deque)."""

    def __init__(self, window_frames: int) -> None:
        self._window = max(1, window_frames)
        self._index = 0
        self._mins: deque[tuple[int, float]] = deque()

    @property
    def level_dbfs(self) -> float:
        return self._mins[0][1] if self._mins else -120.0

    def push(self, level_dbfs: float) -> float:
        """Add one frame's level; returns the floor including it."""
        while self._mins and self._mins[-1][1] >= level_dbfs:
            self._mins.pop()
        self._mins.append((self._index, level_dbfs))
        while self._mins[0][0] <= self._index - self._window:
            self._mins.popleft()
        self._index += 1
        return self._mins[0][1]


class Vad:
    """Frames audio chunks, classifies each frame and runs :class:`VadStateMachine`.

    Accepts chunks of any length at ``options.sample_rate`` (int16 or float32, mono or
    multi-channel, which is averaged). Time comes from each chunk's ``start_sample``;
    a chunk that does not continue the previous one re-anchors the frame grid.
    """

    def __init__(self, options: VadOptions | None = None, classifier: FrameClassifier | None = None) -> None:
        self.options = options if options is not None else VadOptions()
        self.classifier = classifier if classifier is not None else make_classifier(self.options)
        self.machine = VadStateMachine(self.options)
        keep_ms = self.options.prefix_padding_ms + 4 * max(
            self.options.min_speech_ms + self.options.onset_gap_ms, 500
        )
        self._keep = self.options.ms_to_samples(keep_ms)
        self._history = np.zeros(0, np.float32)
        self._history_start = 0
        self._pending = np.zeros(0, np.float32)
        self._next_sample: int | None = None
        self._noise = _NoiseFloor(self.options.noise_window_ms // self.options.frame_ms)
        self.frames_seen = 0
        """Frames classified so far."""

    def reset(self) -> None:
        self.machine.reset()
        self.classifier.reset()
        self._history = np.zeros(0, np.float32)
        self._pending = np.zeros(0, np.float32)
        self._next_sample = None
        self._noise = _NoiseFloor(self.options.noise_window_ms // self.options.frame_ms)

    @property
    def noise_floor_dbfs(self) -> float:
        """Current background level estimate (dBFS)."""
        return self._noise.level_dbfs

    @property
    def in_speech(self) -> bool:
        return self.machine.in_turn

    def process(self, chunk: AudioChunk) -> list[VadEvent]:
        """Feed one chunk; returns the events decided by the frames it completed."""
        if chunk.sample_rate != self.options.sample_rate:
            raise AudioValueError(
                f"VAD expects {self.options.sample_rate} Hz audio, got a {chunk.sample_rate} Hz "
                "chunk (resample it first)"
            )
        pcm = chunk.to_mono().to_float32().pcm
        if self._next_sample is None or chunk.start_sample != self._next_sample:
            self._pending = np.zeros(0, np.float32)
            self._history = np.zeros(0, np.float32)
            self._history_start = chunk.start_sample
        self._next_sample = chunk.end_sample
        self._history = np.concatenate([self._history, pcm])
        if self._history.size > self._keep:
            drop = self._history.size - self._keep
            self._history = self._history[drop:]
            self._history_start += drop
        self._pending = np.concatenate([self._pending, pcm])
        frame_len = self.options.frame_samples
        n_frames = self._pending.size // frame_len
        events: list[VadEvent] = []
        first_start = chunk.end_sample - self._pending.size
        for i in range(n_frames):
            frame = self._pending[i * frame_len : (i + 1) * frame_len]
            events.extend(self._classify_and_step(first_start + i * frame_len, frame))
        self._pending = self._pending[n_frames * frame_len :]
        return events

    def process_all(self, chunks: Sequence[AudioChunk]) -> list[VadEvent]:
        """Convenience: feed every chunk, then :meth:`flush`."""
        events: list[VadEvent] = []
        for chunk in chunks:
            events.extend(self.process(chunk))
        events.extend(self.flush())
        return events

    def flush(self) -> list[VadEvent]:
        """End of stream: closes an open turn. The partial last frame is ignored."""
        now = self._next_sample if self._next_sample is not None else 0
        self._pending = np.zeros(0, np.float32)
        return list(self.machine.finish(now))

    def _classify_and_step(self, frame_start: int, frame: npt.NDArray[np.float32]) -> list[VadEvent]:
        self.frames_seen += 1
        opts = self.options
        level = frame_energy_dbfs(frame)
        # A frame of digital silence (the echo gate muted it, or a muted device) says
        # nothing about the room: counted as is, it would pull the floor to nothing for a
        # whole window, and room noise after the gate opens would pass as speech. It
        # counts as the floor known so far.
        floor = self._noise.push(level if level > _DIGITAL_SILENCE_DBFS else self._noise.level_dbfs)
        margin = opts.hold_margin_db if self.machine.continues(frame_start) else opts.noise_margin_db
        loud = level >= max(opts.energy_floor_dbfs, floor + margin)
        # The classifier sees every frame so that a stateful model keeps its context.
        speech = self.classifier.is_speech(frame) and loud
        # Voicing only matters for opening a turn; skip the FFT otherwise.
        voiced = (
            speech
            and not self.machine.in_turn
            and spectral_flatness(frame, opts.sample_rate) <= opts.max_flatness
        )
        events = self.machine.step(frame_start, speech, voiced)
        return [self._attach_audio(e) if isinstance(e, SpeechStarted) else e for e in events]

    def _attach_audio(self, event: SpeechStarted) -> SpeechStarted:
        padding = self.options.ms_to_samples(self.options.prefix_padding_ms)
        audio_start = max(event.start_sample - padding, self._history_start)
        lo = audio_start - self._history_start
        hi = event.detected_sample - self._history_start
        pcm = self._history[lo:hi].copy()
        return replace(event, audio_start_sample=audio_start, pcm=pcm)
