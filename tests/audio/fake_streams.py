"""Stand-ins for sounddevice's input and output streams: the test calls the stream's
callback itself, with the time info PortAudio would give."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from audio.errors import DeviceError


class FakeStream:
    """What both directions share: the callback, and the start / stop / close state."""

    def __init__(self, *, device: Any, samplerate: float, channels: int, blocksize: int,
                 callback: Any) -> None:
        self.samplerate = samplerate
        self.channels = channels
        self.blocksize = blocksize
        self.callback = callback
        self.started = False
        self.closed = False

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.started = False

    def close(self) -> None:
        self.closed = True


class FakeInputStream(FakeStream):
    """Stands in for sounddevice.InputStream; `feed` delivers one block."""

    def feed(self, block: np.ndarray, current: float = 0.0, adc: float = 0.0,
             overflow: bool = False) -> None:
        status = SimpleNamespace(input_overflow=overflow)
        self.callback(block, block.shape[0],
                      SimpleNamespace(currentTime=current, inputBufferAdcTime=adc), status)


class FakeOutputStream(FakeStream):
    """Stands in for sounddevice.OutputStream; `pull` asks the sink for one buffer.
    ``reject_rate``: opening at this rate fails as a device that does not support it."""

    def __init__(self, *, device: Any, samplerate: float, channels: int, blocksize: int,
                 callback: Any, reject_rate: float | None = None) -> None:
        if reject_rate is not None and samplerate == reject_rate:
            raise DeviceError(f"invalid sample rate {samplerate}")
        super().__init__(device=device, samplerate=samplerate, channels=channels,
                         blocksize=blocksize, callback=callback)
        self.time = 0.0
        self.latency = 0.03

    def pull(self, frames: int, current: float, dac: float, status: Any = None) -> np.ndarray:
        out = np.full((frames, 1), 9.0, np.float32)  # garbage the sink must overwrite
        self.callback(out, frames,
                      SimpleNamespace(currentTime=current, outputBufferDacTime=dac), status)
        return out[:, 0].copy()
