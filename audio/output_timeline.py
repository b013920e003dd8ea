"""Where an output stream's samples are heard, on the clock: one timeline for the stream.

A speaker's echo reference (:class:`audio.echo.EchoReference`) must stay where it was
while the stream plays: WebRTC's AEC3 locks onto the echo's delay behind the reference,
and if the reference then moves later by more than its few samples of headroom, the echo
comes before it and is not cancelled for seconds. Stamping each buffer with the time its
callback reports it heard moves it all the time:

- the callback reads the clock only once it holds the GIL, milliseconds late;
- the host's latency report wobbles (PulseAudio's ALSA plugin: 34 ms for one reply and
  47 ms for the next on the same stream, while the sound itself did not move).

Seen on the virtual audio server: a reply's second clause, after a pause in which the
stream played silence, was placed 5 ms later than its first, and AEC3 cancelled 4-14 dB
of it instead of ~50; the reply interrupted itself.

The stream's own sample count does not wobble: while it runs, device frame ``k`` is heard
``k`` samples after frame 0, silent buffers included. :class:`OutputTimeline` places
every frame there, from one anchor: the first report, refined to the median of the
reports while the stream plays silence, over its first ``settle`` callbacks (a stream is
opened before anything plays, and its first callbacks are the ones most likely to wait
for a busy interpreter). Once audio plays, the anchor moves only while the stream is
silent, so the reference never jumps under a playing reply. After an output underflow
(the device ran dry and played silence of its own) it is found again the same way,
never earlier than before, as such a gap only delays what follows.

Drift between the output device's clock and the microphone's is left to AEC3 (it tracks
slow drift) and to the echo alignment (:mod:`audio.echo_delay`), which moves the
reference when the echo leaves the canceller's range.
"""

from __future__ import annotations

__all__ = ["OutputTimeline"]


class OutputTimeline:
    """Maps an output stream's frame counter to clock time (both at the device rate)."""

    def __init__(self, settle: int = 50) -> None:
        if settle < 1:
            raise ValueError(f"settle must be >= 1 callback, got {settle}")
        self.settle = int(settle)
        self._reports: list[int] = []  # report - frame, since the (re)start
        self._anchor: int | None = None  # clock position of device frame 0
        self._floor: int | None = None  # the anchor before an underflow
        self.reanchored = 0
        """Underflows after which the anchor was estimated again."""

    @property
    def anchor(self) -> int | None:
        """Where device frame 0 is heard (clock time at the device rate); None before
        the first report."""
        return self._anchor

    def place(self, frame: int, heard_at: int, underflow: bool = False,
              audible: bool = True) -> int:
        """The clock position of device frame ``frame``, given that this callback says
        its buffer (starting at ``frame``) is heard at ``heard_at``.

        Call it for every callback, silent ones too (``audible=False``: they refine the
        anchor), with ``frame`` the device frames of all earlier callbacks, and
        ``underflow`` as the callback's status says."""
        report = int(heard_at) - int(frame)
        if underflow and self._anchor is not None:
            self._floor = self._anchor
            self._anchor = None
            self.reanchored += 1
        if self._anchor is None:
            self._reports = [report]
        elif not audible and len(self._reports) < self.settle:
            self._reports.append(report)
        else:
            return self._anchor + int(frame)
        ordered = sorted(self._reports)
        anchor = ordered[len(ordered) // 2]
        self._anchor = anchor if self._floor is None else max(anchor, self._floor)
        return self._anchor + int(frame)
