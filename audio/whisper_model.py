"""faster-whisper's model with a shorter encoder window (see :mod:`audio.whisper_window`).

Imports faster-whisper, so :mod:`audio.asr` imports this only when it loads a model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from faster_whisper import WhisperModel

from audio.whisper_window import cut_window

__all__ = ["WindowedWhisper"]


class WindowedWhisper(WhisperModel):  # type: ignore[misc]
    """``WhisperModel`` whose encoder sees at most ``max(window, content + margin)``
    frames of a segment (faster-whisper calls ``encode`` once per 30 s segment, on
    features it zero-padded to 3000 frames). ``window_frames = 0`` is the stock model.

    Not thread-safe to reconfigure: :class:`audio.asr.Transcriber` changes
    ``window_frames`` only under its decode lock.
    """

    def __init__(self, *args: Any, window_frames: int = 0, margin_frames: int = 100,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window_frames = window_frames
        self.margin_frames = margin_frames
        self.last_encoded_frames = 0
        """Frames the latest ``encode`` ran on (for the fallback, tests and the bench)."""

    def encode(self, features: np.ndarray) -> Any:
        f = features if features.ndim == 3 else features[None]
        f = cut_window(f, self.window_frames, self.margin_frames)
        self.last_encoded_frames = int(f.shape[-1])
        return super().encode(f)
