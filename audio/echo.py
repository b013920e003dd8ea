"""Echo handling: keep the assistant from hearing (and interrupting) itself.

The far-end reference is exactly what the sink reports as heard (its ``tap``), placed
on the microphone's timeline by :class:`EchoReference`. Then, by ``mode``:

- ``off``: the mic passes unchanged.
- ``gate`` (half duplex): while the far end is active, a mic frame passes only if it is
  ``gate_margin_db`` louder than the loudest far-end frame of the last
  ``reference_window_ms`` (the window covers the acoustic path's delay); other frames
  become silence, so neither the VAD nor the ASR hears the echo. A user who talks
  clearly louder than the playback still gets through (barge-in). With
  ``gate_stands_down`` it also listens for the echo itself
  (:class:`~audio.echo_presence.EchoPresence`): when the first few hundred ms of the
  reply's speech (or, failing that, ~1.5 s of playback) bring nothing into the
  microphone that could be speech and no echo is found in it -- headphones, a speaker
  too quiet to reach the microphone -- there is nothing to gate, and it stands down
  (full duplex: the user is heard at any level). The moment an echo is found it
  gates again, for the rest of the session.
- ``aec``: acoustic echo cancellation with WebRTC's AEC3 through LiveKit's
  ``rtc.AudioProcessingModule`` (pip ``livekit``; the native library ships in the
  wheel and runs offline). It is fed the reference 10 ms at a time
  (``process_reverse_stream``) before each mic frame (``process_stream``), as the
  WebRTC APM expects, ``aec_lead_ms`` ahead of the mic frame's time (AEC3 cancels only
  an echo that comes after its reference, so live devices get a margin).

Everything here is synchronous and deterministic given its inputs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from audio.chunk import AudioChunk
from audio.echo_delay import EchoDelay, EchoDelayEstimator, holds_echo
from audio.echo_presence import EchoPresence, PresenceOptions
from audio.echo_reference import EchoReference
from audio.errors import AudioError, AudioValueError

__all__ = [
    "EchoMode",
    "EchoOptions",
    "EchoReference",
    "EchoGate",
    "EchoCanceller",
    "LiveKitAec",
    "EchoProcessor",
    "level_dbfs",
]

EchoMode = Literal["off", "gate", "aec"]
_SILENT_DBFS = -120.0
_log = logging.getLogger(__name__)

ALIGNED_MS = (10.0, 300.0)
"""``aec``: the echo's delay after the reference fed to AEC3 that needs no correction
(AEC3 cancels from about 0 to 400 ms; an echo before its reference not at all)."""
ALIGN_TO_MS = 60.0
"""Where a measured delay outside :data:`ALIGNED_MS` is moved to."""
SETTLE_WINDOWS = 10
"""``aec``: windows of playback (150 ms apart) without an echo found that end the
half-duplex start (see :attr:`EchoProcessor.settled`)."""
UNSETTLED_AHEAD_MS = 150
"""``aec``: until settled, how far past a mic frame the half-duplex gate looks."""
LEAD_RANGE_MS = (-1000, 300)
"""Where alignment may move the lead (negative: the reference is fed from behind the mic)."""
MIN_ECHO_LAG_MS, MAX_ECHO_LAG_MS = -250, 800
"""The lags :meth:`EchoProcessor.may_be_echo` searches: those the delay search allows
(:class:`audio.echo_delay.EchoDelayEstimator`), for devices whose reported times are off."""


def level_dbfs(pcm: npt.NDArray[np.floating[Any]]) -> float:
    """RMS level of float samples in dB re full scale (``-120`` for silence)."""
    if pcm.size == 0:
        return _SILENT_DBFS
    energy = float(np.mean(np.square(pcm, dtype=np.float64)))
    return max(_SILENT_DBFS, 10.0 * float(np.log10(energy + 1e-12)))


@dataclass(frozen=True)
class EchoOptions:
    """Mirrors ``config.yaml``'s ``echo:`` section plus timing details."""

    mode: EchoMode = "gate"
    gate_margin_db: float = 10.0
    """During playback, mic frames must be this much louder than the far end to pass."""
    sample_rate: int = 16000
    """Hz of the mic audio (and of the reference as stored)."""
    frame_ms: int = 10
    """Gate / canceller frame."""
    reference_window_ms: int = 200
    """Far-end history compared against each mic frame (covers the echo path delay)."""
    active_floor_dbfs: float = -60.0
    """A far end quieter than this counts as not playing."""
    keep_ms: int = 3000
    """Reference history kept."""
    aec_lead_ms: int = 0
    """``aec``: the canceller gets the reference this much ahead of the time it was
    heard. AEC3 only cancels echo that comes after its reference (it finds a positive
    delay itself), so a lead keeps the delay positive when the heard time is late. The
    mic is held back while the reference that far ahead is not known yet (a virtual
    clock); a live sink hands audio over well before it is heard, so nothing waits."""
    aec_align: bool = True
    """``aec``: measure where the echo really is (:mod:`audio.echo_delay`) and, when
    the reported times put it outside what AEC3 can cancel, move the reference."""
    gate_stands_down: bool = True
    """``gate``: gate nothing once playback showed no echo in the microphone; gate again
    from the first echo found on (:mod:`audio.echo_presence`)."""
    stand_down_probe_ms: int = 150
    """``gate_stands_down``: the early answer's reply speech (``PresenceOptions.probe_ms``;
    0: only the late one)."""

    def __post_init__(self) -> None:
        if self.mode not in ("off", "gate", "aec"):
            raise AudioValueError(f"echo mode must be off, gate or aec, got {self.mode!r}")
        if self.frame_ms not in (10, 20, 30) or self.sample_rate <= 0:
            raise AudioValueError("echo frame_ms must be 10, 20 or 30 and sample_rate positive")
        if self.keep_ms < self.reference_window_ms + 100:
            raise AudioValueError("echo keep_ms must exceed reference_window_ms by at least 100 ms")
        if not 0 <= self.aec_lead_ms <= 200:
            raise AudioValueError("echo aec_lead_ms must be 0..200")

    @property
    def frame_samples(self) -> int:
        return self.sample_rate * self.frame_ms // 1000


class EchoGate:
    """Half-duplex gate; see the module docstring."""

    def __init__(self, options: EchoOptions, reference: EchoReference) -> None:
        self.options = options
        self.reference = reference
        self.frames_gated = 0
        """Mic frames replaced by silence because the far end was louder."""
        self.frames_passed_over_echo = 0
        """Mic frames let through during playback because they beat the margin."""

    def far_end_dbfs(self, start: int, n: int, ahead: int = 0) -> float:
        """Loudest far-end frame level over the window that can echo into ``[start, start+n)``
        (and ``ahead`` samples after it)."""
        opts = self.options
        window = opts.sample_rate * opts.reference_window_ms // 1000
        ref = self.reference.get(start - window, window + n + ahead)
        f = opts.frame_samples
        usable = ref.size - ref.size % f
        if usable == 0:
            return level_dbfs(ref)
        energies = np.mean(np.square(ref[:usable].reshape(-1, f), dtype=np.float64), axis=1)
        return max(_SILENT_DBFS, 10.0 * float(np.log10(float(energies.max()) + 1e-12)))

    def blocks(self, frame: npt.NDArray[np.float32], start: int, ahead: int = 0) -> bool:
        """Whether the mic ``frame`` at ``start`` is to be silenced (and count it)."""
        far = self.far_end_dbfs(start, frame.size, ahead)
        if far < self.options.active_floor_dbfs:
            return False
        if level_dbfs(frame) >= far + self.options.gate_margin_db:
            self.frames_passed_over_echo += 1
            return False
        self.frames_gated += 1
        return True

    def process(self, chunk: AudioChunk) -> AudioChunk:
        pcm = np.array(chunk.to_mono().to_float32().pcm, np.float32)
        f = self.options.frame_samples
        changed = False
        for lo in range(0, pcm.size, f):
            frame = pcm[lo : lo + f]
            if self.blocks(frame, chunk.start_sample + lo):
                frame[:] = 0.0
                changed = True
        if not changed and chunk.channels == 1 and chunk.pcm.dtype == np.float32:
            return chunk
        return AudioChunk(pcm, chunk.sample_rate, chunk.start_sample)


class EchoCanceller(Protocol):
    """Removes the echo of ``reference`` from ``mic``; both one 10 ms int16 frame."""

    def process(self, mic: npt.NDArray[np.int16], reference: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]: ...


class LiveKitAec:
    """WebRTC AEC3 via ``livekit.rtc.AudioProcessingModule`` (10 ms int16 frames)."""

    def __init__(self, sample_rate: int, noise_suppression: bool = False) -> None:
        try:
            from livekit import rtc
        except ImportError as exc:
            raise AudioError(
                "echo mode 'aec' needs the 'livekit' package (pip install livekit); "
                "or use echo mode 'gate'"
            ) from exc
        self._rtc = rtc
        self.sample_rate = int(sample_rate)
        self._frame = self.sample_rate // 100
        self._apm = rtc.AudioProcessingModule(
            echo_cancellation=True, noise_suppression=noise_suppression
        )
        # Our reference is already placed at the time it was heard: no extra delay.
        self._apm.set_stream_delay_ms(0)

    def process(self, mic: npt.NDArray[np.int16], reference: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
        n = self._frame
        if mic.size != n or reference.size != n:
            raise AudioValueError(f"AEC frames must be {n} samples (10 ms), got {mic.size}/{reference.size}")
        rtc = self._rtc
        far = rtc.AudioFrame(reference.astype("<i2").tobytes(), self.sample_rate, 1, n)
        self._apm.process_reverse_stream(far)
        near = rtc.AudioFrame(mic.astype("<i2").tobytes(), self.sample_rate, 1, n)
        self._apm.process_stream(near)
        return np.frombuffer(bytes(near.data.cast("B")), dtype="<i2").astype(np.int16)


def _to_i16(x: npt.NDArray[np.float32]) -> npt.NDArray[np.int16]:
    return np.clip(np.round(x.astype(np.float64) * 32768.0), -32768, 32767).astype(np.int16)


class EchoProcessor:
    """Applies ``options.mode`` to a stream of mic chunks (mono, ``options.sample_rate``).

    ``off`` and ``gate`` return one chunk per chunk. ``aec`` works in 10 ms frames and
    holds back a remainder, so an output chunk may be shorter than its input (it always
    continues the previous output's timeline).
    """

    def __init__(
        self,
        options: EchoOptions,
        reference: EchoReference | None = None,
        canceller: EchoCanceller | None = None,
    ) -> None:
        self.options = options
        self.reference = reference if reference is not None else EchoReference(
            options.sample_rate, options.keep_ms
        )
        self.gate = EchoGate(options, self.reference)
        self._canceller = canceller
        if options.mode == "aec" and canceller is None:
            self._canceller = LiveKitAec(options.sample_rate)
        self._pending = np.zeros(0, np.float32)
        self._pending_start = 0
        self._lead = options.sample_rate * options.aec_lead_ms // 1000
        self._finder = (EchoDelayEstimator(self.reference)
                        if options.mode == "aec" and options.aec_align else None)
        self._presence = (EchoPresence(self.reference, self.gate.far_end_dbfs,
                                       PresenceOptions(max_delay_ms=options.reference_window_ms,
                                                       probe_ms=options.stand_down_probe_ms))
                          if options.mode == "gate" and options.gate_stands_down else None)
        self.echo_delay: EchoDelay | None = None
        """``aec``: the echo's lag after the reference as placed, last measured."""
        self.realigned = 0
        """``aec``: times the reference was moved to where the echo was measured."""
        self.settled = self._finder is None
        """``aec``: the echo was found (and the reference aligned to it) or, after
        :data:`SETTLE_WINDOWS` windows of playback, none was heard. Until then the
        gate also applies (half duplex), so that a reply whose reference is misplaced
        cannot interrupt itself in the time it takes to measure where its echo is."""

    @property
    def lead_ms(self) -> float:
        """How far ahead of the mic the reference is fed to the canceller now."""
        return self._lead * 1000.0 / self.options.sample_rate

    def push_reference(self, chunk: AudioChunk) -> None:
        """The sink tap: give this to a sink as ``tap=processor.push_reference``."""
        self.reference.push(chunk)

    def process(self, chunk: AudioChunk) -> AudioChunk:
        if chunk.sample_rate != self.options.sample_rate:
            raise AudioValueError(
                f"echo processing expects {self.options.sample_rate} Hz mic audio, got {chunk.sample_rate} Hz"
            )
        if self.options.mode == "off":
            return chunk
        if self.options.mode == "gate":
            return self._gate(chunk)
        return self._cancel(chunk)

    def _gate(self, chunk: AudioChunk) -> AudioChunk:
        if self._presence is not None and self._presence.push(
                np.asarray(chunk.to_mono().to_float32().pcm, np.float32), chunk.start_sample) is False:
            return chunk  # no echo to gate (headphones)
        return self.gate.process(chunk)

    @property
    def echo_heard(self) -> bool | None:
        """Whether the speaker reaches the microphone: ``gate`` with ``gate_stands_down``
        asks :class:`~audio.echo_presence.EchoPresence`; ``aec`` with ``aec_align`` says
        True once its delay search found the echo. None: not known yet, or not asked."""
        if self._presence is not None:
            return self._presence.heard
        return True if self.echo_delay is not None else None

    def may_be_echo(self, raw: npt.NDArray[np.float32], start: int) -> bool:
        """Whether raw mic samples from ``start`` may be the speaker's echo: yes once an
        echo was found (it may be anywhere in them); else only if the far end, at any lag
        the delay search allows, correlates with them (:func:`audio.echo_delay.holds_echo`).
        What the gate muted and this denies is sound in the room: the user."""
        if self.echo_heard is True:
            return True
        return holds_echo(raw, start, self.reference, MAX_ECHO_LAG_MS,
                          min_lag_ms=MIN_ECHO_LAG_MS)

    def _cancel(self, chunk: AudioChunk) -> AudioChunk:
        assert self._canceller is not None
        pcm = np.asarray(chunk.to_mono().to_float32().pcm, np.float32)
        if self._finder is not None:
            found = self._finder.push(pcm, chunk.start_sample)
            if found is not None:
                self._realign(found)
            if not self.settled and (found is not None
                                     or self._finder.measured >= SETTLE_WINDOWS):
                self.settled = True
                heard = f"echo found at {found.lag_ms:+.0f} ms" if found else "no echo heard"
                _log.debug("echo: %s during playback; full duplex from now", heard)
        if self._pending.size == 0 or self._pending_start + self._pending.size != chunk.start_sample:
            self._pending = pcm
            self._pending_start = chunk.start_sample
        else:
            self._pending = np.concatenate([self._pending, pcm])
        n = self.options.sample_rate // 100
        lead = self._lead
        # Until the echo is found, the gate also looks at what plays up to this far after
        # a frame (an echo placed before its reference by wrong device times).
        ahead = lead if self.settled else max(lead, self.options.sample_rate * UNSETTLED_AHEAD_MS // 1000)
        mic_end = self._pending_start + self._pending.size
        known = self.reference.end_sample
        usable = 0
        while usable + n <= self._pending.size:
            t = self._pending_start + usable
            # The reference for this frame is final once it is stored that far, once the
            # mic itself is that far (a sink reports audio by the time it is heard), or
            # when the far end went quiet before the frame.
            if ahead > 0 and not (known >= t + ahead + n or mic_end >= t + ahead + n or known <= t):
                break
            usable += n
        out = np.zeros(usable, np.float32)
        for lo in range(0, usable, n):
            t = self._pending_start + lo
            raw = self._pending[lo : lo + n]
            clean = self._canceller.process(_to_i16(raw), _to_i16(self.reference.get(t + lead, n)))
            out[lo : lo + n] = clean.astype(np.float32) / np.float32(32768.0)
            if not self.settled and self.gate.blocks(raw, t, ahead=ahead):
                out[lo : lo + n] = 0.0
        start = self._pending_start
        self._pending = self._pending[usable:]
        self._pending_start += usable
        return AudioChunk(out, chunk.sample_rate, start)

    def _realign(self, found: EchoDelay) -> None:
        """Feed the reference so that the measured echo comes ``ALIGN_TO_MS`` after it,
        if it is outside :data:`ALIGNED_MS` now."""
        self.echo_delay = found
        rate = self.options.sample_rate
        if ALIGNED_MS[0] <= found.lag_ms + self.lead_ms <= ALIGNED_MS[1]:
            return
        was = self.lead_ms
        lead_ms = min(float(LEAD_RANGE_MS[1]), max(float(LEAD_RANGE_MS[0]), ALIGN_TO_MS - found.lag_ms))
        self._lead = int(round(rate * lead_ms / 1000))
        self.realigned += 1
        _log.info("echo: the mic hears the speaker %+.0f ms from its reported time (strength "
                  "%.2f); the canceller's reference now leads by %.0f ms (was %.0f)",
                  found.lag_ms, found.strength, self.lead_ms, was)
