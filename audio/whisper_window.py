"""A shorter Whisper encoder window for short utterances, with a guard.

Whisper encodes a fixed 30 s window: faster-whisper pads every segment's log-mel
features to 3000 frames, so a 2 s question costs the encoder as much as 30 s of
speech, and on a small CPU the encoder is most of a decode. CTranslate2's encoder
accepts fewer frames (the positional embedding is simply cut), which is what
whisper.cpp's ``audio_ctx`` does: encoding 10 s instead of 30 s is several times faster
end to end (`bench/bench_asr.py` measures it).

The catch is accuracy: the model was trained on full windows, and on a cut window it
sometimes loops ("Stop please. Stop please. ...") or mishears more in noise. So:

- :class:`audio.whisper_model.WindowedWhisper` encodes ``max(window, speech + margin)`` frames, never
  fewer (a long utterance keeps its whole content, up to the full 30 s);
- :func:`looks_wrong` flags a result with the signs of a cut-window failure (a high
  compression ratio: repetition; more tokens than the audio can hold; a low average
  log-probability, lower for numerals), and the caller re-decodes on the full window --
  or, for a glance (:data:`GLANCE`, a display partial), drops the result;
- a cut window's decode stops a little past the tokens :func:`token_budget` allows, so
  a loop costs a few tokens, not hundreds (see :meth:`audio.asr.Transcriber.transcribe`).

``bench/bench_asr.py`` measures both effects (decode time, WER, fallback rate) on
several voices, rates and noise levels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["GLANCE", "LOOPS_ONLY", "WindowGuard", "content_frames", "cut_window", "looks_wrong",
           "token_budget", "FULL_FRAMES"]

FULL_FRAMES = 3000
"""Log-mel frames in Whisper's 30 s window (10 ms each)."""


@dataclass(frozen=True)
class WindowGuard:
    """When a cut-window decode is not trusted (then the full window decodes again)."""

    max_compression_ratio: float = 2.0
    """gzip ratio of the text; repetition loops compress well (faster-whisper: 2.4)."""
    min_avg_logprob: float = -1.0
    min_avg_logprob_numerals: float = -1.5
    """The floor for a segment with a numeral in it ("Room 204 please", "29340"): Whisper
    splits a number's probability between its spellings ("12" / "twelve", "6.30" /
    "630"), so its average log-probability sits lower on any window, and under
    ``min_avg_logprob`` such results were decoded again on the full window (a pause's
    transcript later) with no better text (``bench/bench_asr.py --numbers``,
    bench/results/asr-numbers.md). A loop is still caught by the ratio and the token
    budget. The lower of the two floors applies."""
    max_tokens_per_s: float = 6.0
    """Text tokens per second of audio, plus ``extra_tokens``: more is a loop."""
    extra_tokens: int = 8
    redo: bool = True
    """False: an untrusted result is dropped (`audio.asr.Transcript.trusted`), not decoded
    again on the full window."""


LOOPS_ONLY = WindowGuard(min_avg_logprob=-math.inf)
"""The guard of a quick look at a short burst (an interim transcript of speech over a
paused reply; the final transcript keeps the full guard): only a loop is decoded again.
A sub-second burst comes out with little confidence on any window, so the full guard
sent most of them to the full window (78 of 144 bursts of backchannels and real
interruptions, Piper and espeak-ng, quiet and in -45 dBFS noise, 250-600 ms long) for
~400 ms more on 2 cores and the same decision: ``bench/bench_asr.py --bursts`` decoded
them in 136 ms p50 with this guard against 542 ms with the full one, no backchannel cut
the reply with either, and 46 against 48 of 72 real interruptions were cut at that
interim rather than the next."""


GLANCE = WindowGuard(min_avg_logprob=-math.inf, redo=False)
"""The guard of a display partial: a loop is dropped, and the partial shown stays as it
was. The first half second of "Name a big animal." looped on the cut window ("Name. Name.
Name. ..."); decoding it again on the full window cost ~0.4 s more on 2 cores, with the
pause's transcript queued behind it, for a partial nobody needs then."""


def content_frames(features: npt.NDArray[np.float32]) -> int:
    """Frames before the zero padding faster-whisper appends (``pad_or_trim``).

    A real log-mel frame is never all zeros: features are ``(max(log10 mel, peak - 8) +
    4) / 4`` per bin, zero only if all 80 bins sit exactly at 1e-4.
    """
    nonzero = np.flatnonzero(np.any(features[-1] != 0, axis=0))
    return int(nonzero[-1]) + 1 if nonzero.size else 0


def cut_window(features: npt.NDArray[np.float32], window_frames: int,
               margin_frames: int) -> npt.NDArray[np.float32]:
    """The first ``max(window, content + margin)`` frames of a (padded) segment's
    features, or all of them when ``window_frames`` is 0 or not shorter."""
    if not 0 < window_frames < features.shape[-1]:
        return features
    keep = max(window_frames, content_frames(features) + margin_frames)
    return np.ascontiguousarray(features[..., :keep]) if keep < features.shape[-1] else features


def token_budget(audio_s: float, guard: WindowGuard) -> int:
    """The most text tokens a cut-window decode of ``audio_s`` seconds may hold; more is
    a loop (`looks_wrong`)."""
    return math.floor(guard.extra_tokens + guard.max_tokens_per_s * audio_s)


def looks_wrong(segments: Sequence[Any], audio_s: float, guard: WindowGuard) -> bool:
    """Whether faster-whisper ``segments`` show a cut-window failure (see the module)."""
    tokens = sum(len(s.tokens) for s in segments)
    if tokens > token_budget(audio_s, guard):
        return True
    return any(s.compression_ratio > guard.max_compression_ratio
               or s.avg_logprob < _logprob_floor(s, guard) for s in segments)


def _logprob_floor(segment: Any, guard: WindowGuard) -> float:
    """The average log-probability under which ``segment`` is not trusted."""
    if any(ch.isdigit() for ch in getattr(segment, "text", "")):
        return min(guard.min_avg_logprob, guard.min_avg_logprob_numerals)
    return guard.min_avg_logprob
