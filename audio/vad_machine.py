"""The VAD's turn logic: options, events and a pure state machine over frame decisions.

:class:`VadStateMachine` is pure (no audio, no clock): ``step(frame_start_sample,
speech, voiced)`` in, events out, so every timing rule is testable on synthetic
decision sequences (the shape of pipecat's VAD analyzer, a state machine run per frame).
:mod:`audio.vad` computes the decisions from audio and re-exports everything here.

Timing rules (all in samples at ``VadOptions.sample_rate``):

- A *candidate* opens at the first speech frame. It tolerates gaps of up to
  ``onset_gap_ms`` of non-speech; a longer gap drops it. It is confirmed once it holds
  ``min_speech_ms`` of speech frames, at least half of them voiced (only to open a
  turn: inside one, unvoiced frames count, so a final fricative is kept). Then
  :class:`SpeechStarted` is emitted with ``start_sample`` back-dated to the candidate's
  first frame (:class:`audio.vad.Vad` attaches ``prefix_padding_ms`` of audio before it).
- Inside a turn, silence is measured from the end of the last confirmed speech frame.
  After ``short_pause_ms`` one :class:`ShortPause` is emitted (once per pause); speech
  confirmed again after it emits :class:`SpeechResumed` (resuming needs only half of
  ``min_speech_ms``: the turn is already open, a lower bar is the usual hysteresis).
  After ``end_of_turn_ms`` with no open candidate, :class:`SpeechStopped` ends the turn;
  :meth:`VadStateMachine.set_pause_limit` changes that limit for the pause in progress
  (the semantic end of turn), back to ``end_of_turn_ms`` once speech resumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from audio.errors import AudioValueError

__all__ = [
    "VadBackend",
    "VadOptions",
    "VadEvent",
    "SpeechStarted",
    "PauseOnset",
    "ShortPause",
    "SpeechResumed",
    "SpeechStopped",
    "VadStateMachine",
]

VadBackend = Literal["webrtc", "silero"]
_RATES_WEBRTC = (8000, 16000, 32000, 48000)


@dataclass(frozen=True)
class VadOptions:
    """VAD parameters; mirrors ``config.yaml``'s ``vad:`` section plus frame settings."""

    backend: VadBackend = "webrtc"
    aggressiveness: int = 2
    """WebRTC mode 0 (least aggressive) .. 3."""
    silero_threshold: float = 0.5
    """Silero speech probability at or above which a frame is speech."""
    min_speech_ms: int = 120
    """Speech needed to open a turn (half of it to resume inside a turn)."""
    prefix_padding_ms: int = 300
    """Audio kept before the back-dated onset and attached to SpeechStarted."""
    short_pause_ms: int = 200
    """Silence inside a turn that emits one ShortPause (speculation hook)."""
    pause_onset_ms: int = 100
    """Silence inside a turn that emits one PauseOnset, before the ShortPause (0, or not
    below ``short_pause_ms``: none)."""
    end_of_turn_ms: int = 550
    """Silence that ends the turn (SpeechStopped)."""
    energy_floor_dbfs: float = -55.0
    """Frames quieter than this (RMS, dB re full scale) are never speech."""
    noise_margin_db: float = 6.0
    """Frames must also be this far above the tracked noise floor to be speech."""
    hold_margin_db: float = 3.0
    """The margin for a frame that continues speech without a gap (hysteresis): the
    quiet end of a word (a fading vowel, a final "m") stays speech in a noisy room, so
    the pause and the turn's end are not called in the middle of it. Starting or
    resuming speech needs ``noise_margin_db``."""
    noise_window_ms: int = 3000
    """The noise floor is the quietest frame in this trailing window (minimum statistics)."""
    max_flatness: float = 0.3
    """Spectral flatness at or below which a speech frame counts as voiced; 1.0 disables."""
    onset_gap_ms: int = 60
    """Non-speech a pending candidate tolerates before it is dropped."""
    sample_rate: int = 16000
    """Hz of the audio the VAD accepts."""
    frame_ms: int = 20
    """10, 20 or 30."""

    def __post_init__(self) -> None:
        if self.backend not in ("webrtc", "silero"):
            raise AudioValueError(f"vad backend must be 'webrtc' or 'silero', got {self.backend!r}")
        if self.frame_ms not in (10, 20, 30):
            raise AudioValueError(f"vad frame_ms must be 10, 20 or 30, got {self.frame_ms}")
        if self.backend == "webrtc" and self.sample_rate not in _RATES_WEBRTC:
            raise AudioValueError(
                f"webrtc VAD needs a sample rate in {_RATES_WEBRTC}, got {self.sample_rate}"
            )
        if self.backend == "silero" and self.sample_rate != 16000:
            raise AudioValueError(f"silero VAD needs 16000 Hz audio, got {self.sample_rate}")
        if not 0 <= self.aggressiveness <= 3:
            raise AudioValueError(f"vad aggressiveness must be 0..3, got {self.aggressiveness}")
        if not 0.0 < self.silero_threshold < 1.0:
            raise AudioValueError(f"vad silero_threshold must be in (0, 1), got {self.silero_threshold}")
        for name in ("min_speech_ms", "short_pause_ms", "end_of_turn_ms"):
            if getattr(self, name) <= 0:
                raise AudioValueError(f"vad {name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.hold_margin_db <= self.noise_margin_db:
            raise AudioValueError(
                f"vad hold_margin_db must be in [0, noise_margin_db ({self.noise_margin_db})], "
                f"got {self.hold_margin_db}")
        if self.noise_window_ms < self.frame_ms:
            raise AudioValueError(f"vad noise_window_ms must be >= frame_ms, got {self.noise_window_ms}")
        for name in ("prefix_padding_ms", "onset_gap_ms", "pause_onset_ms"):
            if getattr(self, name) < 0:
                raise AudioValueError(f"vad {name} must be >= 0, got {getattr(self, name)}")
        if self.end_of_turn_ms < self.short_pause_ms:
            raise AudioValueError(
                f"vad end_of_turn_ms ({self.end_of_turn_ms}) must be >= short_pause_ms "
                f"({self.short_pause_ms})"
            )

    @property
    def frame_samples(self) -> int:
        return self.sample_rate * self.frame_ms // 1000

    def ms_to_samples(self, ms: int) -> int:
        return self.sample_rate * int(ms) // 1000


# ---------------------------------------------------------------------------- events


@dataclass(frozen=True)
class VadEvent:
    """Base of every VAD event. Times are samples at ``sample_rate`` on the input clock."""

    start_sample: int
    """When the thing the event reports began (back-dated, see each event)."""
    detected_sample: int
    """End of the frame at which the event was decided (start + detection latency)."""
    sample_rate: int
    """Hz."""

    @property
    def start_ms(self) -> float:
        return 1000.0 * self.start_sample / self.sample_rate

    @property
    def detected_ms(self) -> float:
        return 1000.0 * self.detected_sample / self.sample_rate


@dataclass(frozen=True)
class SpeechStarted(VadEvent):
    """A turn opened. ``start_sample`` is the onset (first frame of the speech run)."""

    audio_start_sample: int = 0
    """First sample of ``pcm``: the onset minus the prefix padding (clipped to the stream)."""
    pcm: npt.NDArray[np.float32] = field(
        default_factory=lambda: np.zeros(0, np.float32), repr=False, compare=False
    )
    """Float32 mono audio from ``audio_start_sample`` to ``detected_sample``."""


@dataclass(frozen=True)
class PauseOnset(VadEvent):
    """``pause_onset_ms`` of silence inside a turn (it may become a ShortPause);
    ``start_sample`` is where the silence began, as the ShortPause will report it."""


@dataclass(frozen=True)
class ShortPause(VadEvent):
    """``short_pause_ms`` of silence inside a turn; ``start_sample`` is where it began."""


@dataclass(frozen=True)
class SpeechResumed(VadEvent):
    """Speech again after a ShortPause; ``start_sample`` is the back-dated onset."""


@dataclass(frozen=True)
class SpeechStopped(VadEvent):
    """End of the user's turn. ``start_sample`` is the turn's onset."""

    end_sample: int = 0
    """End of the last speech frame (back-dated end of speech)."""

    @property
    def end_ms(self) -> float:
        return 1000.0 * self.end_sample / self.sample_rate


# ---------------------------------------------------------------------- state machine


@dataclass
class _Candidate:
    start_sample: int
    speech_frames: int = 0
    voiced_frames: int = 0
    gap_frames: int = 0


class VadStateMachine:
    """Pure turn logic over per-frame decisions; see the module docstring for the rules."""

    def __init__(self, options: VadOptions) -> None:
        self.options = options
        f = options.frame_ms
        self._frame = options.frame_samples
        self._start_frames = -(-options.min_speech_ms // f)
        self._resume_frames = max(1, -(-(options.min_speech_ms // 2) // f))
        self._gap_frames = options.onset_gap_ms // f
        self._short_pause = options.ms_to_samples(options.short_pause_ms)
        onset = options.ms_to_samples(options.pause_onset_ms)
        self._pause_onset = onset if 0 < onset < self._short_pause else None
        self._end_of_turn = options.ms_to_samples(options.end_of_turn_ms)
        self.reset()

    def reset(self) -> None:
        self._in_turn = False
        self._turn_start = 0
        self._last_speech_end = 0
        self._pause_sent = False
        self._onset_sent = False
        self._cand: _Candidate | None = None
        self._pause_limit = self._end_of_turn
        self._held = 0

    def hold(self, samples: int, cap: int) -> None:
        """Do not count ``samples`` of the pause in progress towards ending the turn, up
        to ``cap`` in all for this pause: silence that was made, not heard (the echo
        gate muted the mic, and the user may be talking under the reply's echo)."""
        if self._in_turn:
            self._held = min(cap, self._held + samples)

    def set_pause_limit(self, ms: int) -> None:
        """End the turn after ``ms`` of silence in the pause in progress (takes effect at
        the next frame; ignored outside a pause)."""
        if self._in_turn and self._pause_sent:
            self._pause_limit = self.options.ms_to_samples(max(1, ms))

    @property
    def in_turn(self) -> bool:
        """True between SpeechStarted and SpeechStopped."""
        return self._in_turn

    def continues(self, frame_start: int) -> bool:
        """Whether a frame starting at ``frame_start`` would continue the turn's speech
        without a gap (the previous frame was speech)."""
        return self._in_turn and self._cand is None and frame_start <= self._last_speech_end

    @property
    def pending_onset(self) -> int | None:
        """Start sample of an unconfirmed speech candidate, if any."""
        return None if self._cand is None else self._cand.start_sample

    def step(self, frame_start: int, speech: bool, voiced: bool) -> list[VadEvent]:
        """Advance by one frame starting at ``frame_start``; returns the events it caused."""
        rate = self.options.sample_rate
        frame_end = frame_start + self._frame
        events: list[VadEvent] = []
        if speech and self.continues(frame_start):
            self._last_speech_end = frame_end  # speech continues without a gap
            return events
        confirmed = self._update_candidate(frame_start, speech, voiced)
        if confirmed is not None:
            if not self._in_turn:
                self._in_turn = True
                self._turn_start = confirmed.start_sample
                events.append(SpeechStarted(confirmed.start_sample, frame_end, rate))
            elif self._pause_sent:
                events.append(SpeechResumed(confirmed.start_sample, frame_end, rate))
            self._pause_sent = self._onset_sent = False
            self._pause_limit = self._end_of_turn
            self._held = 0
            self._last_speech_end = frame_end
            return events
        if not self._in_turn:
            return events
        # A pending candidate may be speech: the pause so far ends where it began.
        pause_end = frame_end if self._cand is None else self._cand.start_sample
        if self._pause_onset is not None and not self._onset_sent \
                and pause_end - self._last_speech_end >= self._pause_onset:
            self._onset_sent = True
            events.append(PauseOnset(self._last_speech_end, frame_end, rate))
        if pause_end - self._last_speech_end >= self._short_pause and not self._pause_sent:
            self._pause_sent = True
            events.append(ShortPause(self._last_speech_end, frame_end, rate))
        if frame_end - self._last_speech_end >= self._pause_limit + self._held and self._cand is None:
            events.append(
                SpeechStopped(self._turn_start, frame_end, rate, end_sample=self._last_speech_end)
            )
            self.reset()
        return events

    def finish(self, now_sample: int) -> list[VadEvent]:
        """End of stream: close an open turn at the last speech frame."""
        if not self._in_turn:
            self._cand = None
            return []
        event = SpeechStopped(
            self._turn_start, max(now_sample, self._last_speech_end), self.options.sample_rate,
            end_sample=self._last_speech_end,
        )
        self.reset()
        return [event]

    def _update_candidate(self, frame_start: int, speech: bool, voiced: bool) -> _Candidate | None:
        cand = self._cand
        if not speech:
            if cand is not None:
                cand.gap_frames += 1
                if cand.gap_frames > self._gap_frames:
                    self._cand = None
            return None
        if cand is None:
            cand = self._cand = _Candidate(frame_start)
        cand.speech_frames += 1
        cand.voiced_frames += int(voiced)
        cand.gap_frames = 0
        if self._in_turn:
            # Inside a turn unvoiced sounds (a final "s") count: noise is kept out by the
            # noise-floor margin, and the turn is already open.
            confirmed = cand.speech_frames >= self._resume_frames
        else:
            need = self._start_frames
            confirmed = cand.speech_frames >= need and 2 * cand.voiced_frames >= need
        if confirmed:
            self._cand = None
            return cand
        return None
