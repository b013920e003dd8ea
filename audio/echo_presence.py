"""Does the assistant's own voice reach the microphone? When may the echo gate stand down?

The half-duplex gate (:class:`audio.echo.EchoGate`) drops every mic frame during
playback that is not ``gate_margin_db`` louder than the far end as played. On a speaker
that keeps the assistant from interrupting itself; on headphones (or a speaker too quiet
to reach the microphone) there is no echo, and the gate only drops the user: a "stop"
said at a normal level over the reply passes in fragments, so it is heard late and
unsure. :class:`EchoPresence` watches the raw microphone during playback and answers:

- **no echo** (``heard`` False), early: ``probe_ms`` of speech-level playback whose
  echo, at any delay up to ``max_delay_ms``, has had time to reach the microphone (each
  mic frame looks at the far-end frame ``max_delay_ms`` before it), while not one mic
  frame of this playback was loud -- ``loud_margin_db`` over the noise floor (the
  quietest frame of the last ``floor_window_ms``, minimum statistics as in
  :mod:`audio.vad`) and over ``loud_floor_dbfs`` (3 dB under the VAD's absolute floor).
  A speaker that reaches the microphone at all makes the reply's loud syllables loud
  there; headphones leave it quiet. So the answer comes a few hundred milliseconds into
  the first reply, when people most often interrupt ("no, not that");
- **no echo**, late: when the probe was spoiled (a cough, the user talking), once
  ``settle_ms`` of playback brought nothing that could sound like speech -- under
  ``max_loud_share`` of its frames were loud -- and the correlation search found no
  echo in it. Whatever else sounds in the room (the user talking) keeps the answer
  open, never the other way: a doubt keeps the gate;
- **an echo** (``heard`` True, for good) as soon as the far end is found in the
  microphone by GCC-PHAT (:class:`audio.echo_delay.EchoDelayEstimator`; the user's
  own speech does not correlate with the reply, so talking over it does not count),
  before or after the gate stood down: headphones unplugged mid-session bring it back.

Deterministic given its inputs.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from audio.echo_delay import EchoDelay, EchoDelayEstimator, Reference
from audio.vad import frame_energy_dbfs

__all__ = ["PresenceOptions", "EchoPresence"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PresenceOptions:
    frame_ms: int = 10
    settle_ms: int = 1500
    """Playback the answer "no echo" needs (at ~150 ms a correlation window, the ten
    windows ``aec`` waits before it ends its own half-duplex start)."""
    floor_window_ms: int = 3000
    """The noise floor is the quietest frame of this much of the latest audio."""
    loud_margin_db: float = 6.0
    """A frame this far over the floor could be speech (the VAD's ``noise_margin_db``)."""
    loud_floor_dbfs: float = -58.0
    """... and must be over this (3 dB under the VAD's ``energy_floor_dbfs``)."""
    max_loud_share: float = 0.05
    """Playback with more of its frames loud than this may hold an echo: no answer yet."""
    active_floor_dbfs: float = -60.0
    """A far end quieter than this is not playing."""
    probe_ms: int = 150
    """The early answer: this much speech-level far end, each frame of it heard back
    ``max_delay_ms`` later with no loud mic frame in the playback so far (0: off)."""
    max_delay_ms: int = 200
    """The longest echo path the answer allows for (the gate's reference window)."""
    probe_peak_db: float = 10.0
    """A far-end frame counts as speech-level within this much of the loudest so far ..."""
    probe_floor_dbfs: float = -40.0
    """... and over this."""


class EchoPresence:
    """See the module docstring. ``far_dbfs(start, n)``: the far end's level over what
    can echo into mic samples ``[start, start + n)`` (the gate's window)."""

    def __init__(self, reference: Reference, far_dbfs: Callable[[int, int], float],
                 options: PresenceOptions | None = None) -> None:
        self.options = opts = options or PresenceOptions()
        self._far_dbfs = far_dbfs
        self._frame = reference.sample_rate * opts.frame_ms // 1000
        self._finder = EchoDelayEstimator(reference)
        self._levels: deque[float] = deque(maxlen=max(1, opts.floor_window_ms // opts.frame_ms))
        self._loud: deque[bool] = deque(maxlen=max(1, opts.settle_ms // opts.frame_ms))
        self._remainder = np.zeros(0, np.float32)
        self._remainder_start = 0
        self._reference = reference
        self._delay = reference.sample_rate * opts.max_delay_ms // 1000
        self._probe_frames = opts.probe_ms // opts.frame_ms
        self._probed = 0
        """Speech-level far-end frames of this playback whose echo had time to come."""
        self._spoiled = False
        """A loud mic frame in this playback: the early answer waits for the next one."""
        self._far_peak = -np.inf
        self._playing = False
        self.heard: bool | None = None
        """None until known; False: no echo (the gate may stand down); True: an echo was
        found (for good)."""
        self.delay: EchoDelay | None = None
        """Where the echo was found (after the reference as placed)."""

    def push(self, pcm: npt.NDArray[np.float32], start: int) -> bool | None:
        """The raw microphone from mic sample ``start`` (in order); returns :attr:`heard`."""
        if self.heard is True:
            return True
        found = self._finder.push(pcm, start)
        if found is not None:
            was, self.heard, self.delay = self.heard, True, found
            # Back on after standing down means the devices changed: worth a line at the
            # default level; the rest is normal operation, for -v.
            _log.log(logging.INFO if was is False else logging.DEBUG,
                     "echo: the speaker is heard in the microphone (%+.0f ms after its "
                     "reference, strength %.2f); the gate %s", found.lag_ms, found.strength,
                     "is back on" if was is False else "stays on")
            return True
        if self.heard is False:
            return False  # only the correlation search can change the answer now
        if self._remainder.size and self._remainder_start + self._remainder.size == start:
            pcm, start = np.concatenate([self._remainder, pcm]), self._remainder_start
        n = self._frame
        whole = pcm.size - pcm.size % n
        for lo in range(0, whole, n):
            self._frame_step(pcm[lo:lo + n], start + lo)
        self._remainder, self._remainder_start = pcm[whole:].copy(), start + whole
        return self.heard

    def _frame_step(self, frame: npt.NDArray[np.float32], start: int) -> None:
        opts = self.options
        level = frame_energy_dbfs(frame)  # the VAD's measure, as the thresholds are its
        self._levels.append(level)
        if self.heard is not None:
            return
        if self._far_dbfs(start, frame.size) < opts.active_floor_dbfs:
            self._playing = False
            return
        if not self._playing:  # a new stretch of playback: a new early probe
            self._playing, self._spoiled, self._probed = True, False, 0
        floor = min(self._levels)
        loud = level >= max(opts.loud_floor_dbfs, floor + opts.loud_margin_db)
        self._loud.append(loud)
        if self._probe(loud, start, frame.size):
            self.heard = False
            _log.debug("echo: none heard over %d ms of the reply's speech; the gate stands "
                       "down (full duplex) until one is", opts.probe_ms + opts.max_delay_ms)
            return
        if len(self._loud) == self._loud.maxlen and (
                sum(self._loud) <= opts.max_loud_share * len(self._loud)):
            self.heard = False
            _log.debug("echo: none heard over %.1f s of playback; the gate stands down (full "
                       "duplex) until one is", opts.settle_ms / 1000)

    def _probe(self, loud: bool, start: int, n: int) -> bool:
        """The early rule's step for the mic frame at ``start``; True: no echo."""
        if loud:
            self._spoiled = True
        if self._spoiled or not self._probe_frames:
            return False
        opts = self.options
        # The far-end frame whose echo, at the longest delay allowed, ends with this one.
        far = frame_energy_dbfs(self._reference.get(start - self._delay, n))
        self._far_peak = max(self._far_peak, far)
        if far >= max(opts.probe_floor_dbfs, self._far_peak - opts.probe_peak_db):
            self._probed += 1
        return self._probed >= self._probe_frames
