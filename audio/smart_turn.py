"""Smart Turn v3: does the user's speech *sound* finished? (an audio end-of-turn model)

Pipecat's Smart Turn v3.2 (BSD-2-Clause) is a Whisper-tiny-sized encoder with a
classifier head, exported as an 8 MB int8 ONNX (``smart-turn-v3.2-cpu.onnx``) that
ships inside the ``pipecat-ai`` wheel (installed ``--no-deps``: we only read that file).
It hears what a transcript loses -- a falling pitch, a drawn-out last word -- so it tells
"My sister and I were thinking about ..." from a finished sentence where our language
model's score cannot (`assistant.turns.end_of_turn`).

How the model is fed (facts from pipecat's ``local_smart_turn_v3.py``): the utterance
from its start up to now (its trailing silence included) at 16 kHz, the *last* 8 s,
zero-padded on the left when shorter, as Whisper log-mel features (80 x 800, from the
waveform normalised to zero mean and unit variance); the output is P(the turn is
complete). Pipecat asks at its VAD's stop, after 200 ms of silence; so do we, at the
short pause. ~35 ms a call on one core here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from audio.errors import ModelLoadError

__all__ = ["SmartTurn", "COMPLETE_P"]

RATE = 16_000
WINDOW_SAMPLES = 8 * RATE
COMPLETE_P = 0.5
"""P(complete) above which the model calls the turn finished (pipecat's threshold)."""


class SmartTurn:
    """One loaded Smart Turn v3 ONNX model; :meth:`p_complete` is thread-safe."""

    def __init__(self, model_path: Path, *, threads: int = 1) -> None:
        try:
            import onnxruntime as ort  # faster-whisper's dependency
            from transformers import WhisperFeatureExtractor
        except ImportError as exc:
            raise ModelLoadError(f"Smart Turn needs onnxruntime and transformers: {exc}") from exc
        if not model_path.is_file():
            raise ModelLoadError(f"{model_path}: no Smart Turn model file")
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        try:
            self._session: Any = ort.InferenceSession(
                str(model_path), sess_options=so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise ModelLoadError(f"cannot load Smart Turn model {model_path}: {exc}") from exc
        self._features: Any = WhisperFeatureExtractor(chunk_length=8)
        self.model_path = model_path

    def p_complete(self, pcm16k: npt.NDArray[np.float32]) -> float:
        """P(the turn is complete) for an utterance so far (float32 mono at 16 kHz, its
        trailing silence included); NaN for audio that is empty or not finite."""
        x = np.asarray(pcm16k, np.float32).reshape(-1)[-WINDOW_SAMPLES:]
        if x.size == 0 or not np.isfinite(x).all():
            return float("nan")
        x = np.pad(x, (WINDOW_SAMPLES - x.size, 0))
        feats = self._features(x, sampling_rate=RATE, padding="max_length",
                               max_length=WINDOW_SAMPLES, truncation=True, do_normalize=True,
                               return_tensors="np").input_features.astype(np.float32)
        out = self._session.run(None, {"input_features": feats})
        return float(np.asarray(out[0]).reshape(-1)[0])
