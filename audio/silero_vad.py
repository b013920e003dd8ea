"""Silero VAD v6 as a streaming frame classifier (optional backend).

The model ships inside faster-whisper (``faster_whisper/assets/silero_vad_v6.onnx``) and
runs with onnxruntime; nothing is downloaded. The ONNX graph takes rows of 64 context
samples + 512 new samples at 16 kHz and carries an LSTM state ``(h, c)``; we feed one
row per 32 ms window and keep the state and context across calls (the batch layout is
learned from faster-whisper's ``vad.py``, ``SileroVADModel.__call__``).

Frames of 10/20/30 ms do not line up with 32 ms windows, so each frame is judged by the
most recent window probability computed once the frame's samples were added.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from audio.errors import ModelLoadError

__all__ = ["SileroClassifier", "silero_model_path"]

_WINDOW = 512
_CONTEXT = 64


def silero_model_path() -> Path:
    """Path of the Silero ONNX file bundled with faster-whisper, without importing it."""
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("silero VAD needs the faster-whisper package (it bundles the model)")
    for location in spec.submodule_search_locations:
        path = Path(location) / "assets" / "silero_vad_v6.onnx"
        if path.is_file():
            return path
    raise ModelLoadError("faster-whisper is installed but has no assets/silero_vad_v6.onnx")


class SileroClassifier:
    """Streaming Silero speech probability; ``is_speech`` compares it with ``threshold``."""

    def __init__(
        self, threshold: float = 0.5, sample_rate: int = 16000, model_path: Path | None = None
    ) -> None:
        if sample_rate != 16000:
            raise ModelLoadError(f"silero VAD v6 runs at 16000 Hz, got {sample_rate}")
        try:
            import onnxruntime
        except ImportError as exc:
            raise ModelLoadError("silero VAD needs the onnxruntime package") from exc
        path = model_path if model_path is not None else silero_model_path()
        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 4
        try:
            self._session: Any = onnxruntime.InferenceSession(
                str(path), providers=["CPUExecutionProvider"], sess_options=opts
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise ModelLoadError(f"cannot load silero VAD model {path}: {exc}") from exc
        self.threshold = float(threshold)
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), np.float32)
        self._c = np.zeros((1, 1, 128), np.float32)
        self._context = np.zeros(_CONTEXT, np.float32)
        self._buffer = np.zeros(0, np.float32)
        self.probability = 0.0
        """Speech probability of the latest complete 32 ms window."""

    def push(self, pcm: npt.NDArray[np.float32]) -> list[float]:
        """Add samples; returns the probabilities of the windows they completed."""
        self._buffer = np.concatenate([self._buffer, pcm.astype(np.float32, copy=False)])
        probs: list[float] = []
        while self._buffer.size >= _WINDOW:
            window = self._buffer[:_WINDOW]
            self._buffer = self._buffer[_WINDOW:]
            row = np.concatenate([self._context, window])[None, :]
            out, self._h, self._c = self._session.run(
                None, {"input": row, "h": self._h, "c": self._c}
            )
            self._context = window[-_CONTEXT:].copy()
            probs.append(float(np.asarray(out).reshape(-1)[0]))
        if probs:
            self.probability = probs[-1]
        return probs

    def is_speech(self, frame: npt.NDArray[np.float32]) -> bool:
        probs = self.push(frame)
        best = max(probs) if probs else self.probability
        return best >= self.threshold
