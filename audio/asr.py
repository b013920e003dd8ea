"""Speech recognition with faster-whisper (CTranslate2 Whisper), loaded once.

``Transcriber.transcribe(pcm16k)`` decodes one utterance or file and returns a frozen
:class:`Transcript` (text, segments and words with millisecond times). Whisper
hallucinates on silence ("Thank you."), so audio with no energy or no speech is never
decoded: an RMS floor first, then the silero VAD bundled with faster-whisper. We keep
``vad_filter=False`` so an utterance that upstream VAD already cut is decoded whole;
for long files (over one 30 s window) the silero speech regions become
``clip_timestamps`` so hours of silence are skipped, with times kept on the original
timeline.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from audio.errors import AudioValueError, ModelLoadError
from audio.whisper_window import FULL_FRAMES, WindowGuard, looks_wrong, token_budget

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

__all__ = [
    "ASROptions",
    "TranscribedWord",
    "TranscriptSegment",
    "Transcript",
    "Transcriber",
    "SAMPLE_RATE",
    "rms_dbfs",
    "as_asr_input",
]

SAMPLE_RATE = 16_000
_WINDOW_S = 30.0
_WINDOW_LEAD = SAMPLE_RATE * 3 // 10
"""Silence put before audio decoded on a cut encoder window (300 ms). On a cut window
Whisper tiny.en is sensitive to how soon the speech starts: the daemon's "What is the
capital of France?" with 100 ms of digital silence before it came out as "... of friends"
on a 10 s or 20 s window and right on the stock 30 s one, and right on every window with
200 ms or more of silence first (the loop's utterances start with 250 ms)."""


@dataclass(frozen=True)
class ASROptions:
    """Decoder and silence-gate settings."""

    device: str = "cpu"
    compute_type: str = "int8"
    cpu_threads: int = 0
    """0 lets CTranslate2 choose."""
    beam_size: int = 1
    language: str | None = "en"
    temperature: tuple[float, ...] = (0.0,)
    """Greedy only by default: fallback re-decodes cost latency and add randomness."""
    word_timestamps: bool = True
    no_speech_threshold: float = 0.6
    log_prob_threshold: float = -1.0
    min_rms_dbfs: float = -60.0
    """Audio quieter than this (RMS, dB re full scale) is treated as silence."""
    speech_check: str = "silero"
    """``"silero"`` (RMS floor then silero VAD), ``"rms"`` (floor only) or ``"none"``."""
    silero_threshold: float = 0.5
    min_speech_ms: int = 90
    """Silero must find at least this much speech for the audio to be decoded."""
    window_s: float = 0.0
    """Encoder window for short audio (seconds; 0 = Whisper's full 30 s). A shorter
    window decodes a short utterance several times faster; a result that looks wrong
    is decoded again on the full window (:mod:`audio.whisper_window`)."""

    def __post_init__(self) -> None:
        if self.speech_check not in ("silero", "rms", "none"):
            raise ValueError(f"speech_check must be silero, rms or none, got {self.speech_check!r}")
        if self.beam_size < 1 or not self.temperature:
            raise ValueError("beam_size must be >= 1 and temperature non-empty")
        if not 0.0 <= self.window_s <= _WINDOW_S:
            raise ValueError(f"window_s must be in [0, {_WINDOW_S:g}], got {self.window_s}")


@dataclass(frozen=True)
class TranscribedWord:
    text: str
    """The word as Whisper wrote it, stripped (may carry punctuation)."""
    start_ms: int
    end_ms: int
    probability: float


@dataclass(frozen=True)
class TranscriptSegment:
    text: str
    start_ms: int
    end_ms: int
    words: tuple[TranscribedWord, ...] = ()
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0


@dataclass(frozen=True)
class Transcript:
    """The text of an utterance or file."""

    text: str
    segments: tuple[TranscriptSegment, ...] = ()
    language: str = "en"
    duration_ms: int = 0
    """Length of the audio that was given."""
    speech_found: bool = True
    """False when the silence gate skipped decoding."""
    trusted: bool = True
    """False when a cut window's result was not trusted and its guard says not to decode
    it again (`audio.whisper_window.WindowGuard.redo`): no text, and no text is known."""
    words: tuple[TranscribedWord, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "words", tuple(w for s in self.segments for w in s.words))

    @property
    def empty(self) -> bool:
        return not self.text.strip()


def rms_dbfs(pcm: npt.NDArray[np.float32]) -> float:
    """RMS level in dB relative to full scale (-inf for digital silence)."""
    if pcm.size == 0:
        return float("-inf")
    rms = float(np.sqrt(np.mean(np.square(pcm, dtype=np.float64))))
    return 20.0 * float(np.log10(rms)) if rms > 0 else float("-inf")


def as_asr_input(pcm: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Validate 16 kHz mono audio for Whisper: float32 1-D, finite (int16 is scaled)."""
    arr = np.asarray(pcm)
    if arr.ndim != 1:
        raise AudioValueError(f"ASR input must be mono 1-D audio, got shape {arr.shape}")
    if arr.dtype == np.int16:
        arr = arr.astype(np.float32) / 32768.0
    elif arr.dtype.kind == "f":
        arr = arr.astype(np.float32, copy=False)
    else:
        raise AudioValueError(f"ASR input must be float32 or int16, got {arr.dtype}")
    if arr.size and not np.isfinite(arr).all():
        raise AudioValueError("ASR input contains NaN or infinite samples")
    return np.ascontiguousarray(arr)


class Transcriber:
    """One loaded Whisper model. ``transcribe`` is thread-safe (serialised by a lock)."""

    sample_rate = SAMPLE_RATE

    def __init__(self, model_dir: str | Path, options: ASROptions | None = None) -> None:
        self.model_dir = Path(model_dir)
        self.options = options if options is not None else ASROptions()
        self._model = _load_model(self.model_dir, self.options)
        self._lock = threading.Lock()
        self.fallbacks = 0
        """Decodes on the cut window that were not trusted and ran again on the full one."""
        self.dropped = 0
        """Decodes on the cut window that were not trusted and dropped (`Transcript.trusted`)."""

    @classmethod
    def from_model(cls, model: WhisperModel, options: ASROptions | None = None) -> Transcriber:
        """Wrap an already loaded ``faster_whisper.WhisperModel``. The encoder window is
        the model's (`audio.whisper_model.WindowedWhisper`'s, set when it was loaded), so
        ``options.window_s`` on a model that cannot cut its window is an error rather
        than quietly the full 30 s."""
        self = cls.__new__(cls)
        self.model_dir = Path("<preloaded>")
        self.options = options if options is not None else ASROptions()
        if self.options.window_s > 0 and not hasattr(model, "window_frames"):
            raise ValueError(
                f"window_s={self.options.window_s:g} needs a model that cuts its encoder "
                "window (audio.whisper_model.WindowedWhisper, as Transcriber(path, options) "
                f"loads); {type(model).__name__} always encodes 30 s")
        self._model = model
        self._lock = threading.Lock()
        self.fallbacks = 0
        self.dropped = 0
        return self

    @property
    def model(self) -> WhisperModel:
        """The loaded faster-whisper model (`audio.asr_batch` shares it between threads)."""
        return self._model

    # -- silence gate ------------------------------------------------------------------
    def speech_regions(self, pcm16k: npt.NDArray[np.float32]) -> list[tuple[int, int]]:
        """Speech regions as (start, end) sample pairs, padded (silero VAD)."""
        from faster_whisper.vad import VadOptions, get_speech_timestamps

        opts = VadOptions(
            threshold=self.options.silero_threshold,
            min_speech_duration_ms=self.options.min_speech_ms,
            min_silence_duration_ms=2000,
            speech_pad_ms=400,
        )
        return [(int(r["start"]), int(r["end"])) for r in get_speech_timestamps(pcm16k, opts)]

    def has_speech(self, pcm16k: npt.ArrayLike) -> bool:
        """Whether the audio is worth decoding (see ``ASROptions.speech_check``)."""
        audio = as_asr_input(pcm16k)
        return self._gate(audio)[0]

    def _gate(self, audio: npt.NDArray[np.float32]) -> tuple[bool, list[tuple[int, int]] | None]:
        mode = self.options.speech_check
        if audio.size == 0:
            return False, None
        if mode == "none":
            return True, None
        if rms_dbfs(audio) < self.options.min_rms_dbfs:
            return False, None
        if mode == "rms":
            return True, None
        regions = self.speech_regions(audio)
        return bool(regions), regions

    # -- decoding ----------------------------------------------------------------------
    def transcribe(
        self,
        pcm16k: npt.ArrayLike,
        *,
        word_timestamps: bool | None = None,
        initial_prompt: str | None = None,
        check_speech: bool = True,
        guard: WindowGuard | None = None,
    ) -> Transcript:
        """Decode 16 kHz mono audio (float32 in [-1, 1], or int16).

        Returns an empty transcript (``speech_found=False``) for silent audio without
        running the decoder. ``check_speech=False`` skips the gate (the caller's VAD
        already found speech). ``guard``: when a cut-window result is decoded again on
        the full window (default `WindowGuard()`; `audio.whisper_window.LOOPS_ONLY` for a
        quick look at a short burst).
        """
        audio = as_asr_input(pcm16k)
        duration_ms = int(round(1000 * audio.shape[0] / SAMPLE_RATE))
        language = self.options.language or "en"
        regions: list[tuple[int, int]] | None = None
        if check_speech:
            found, regions = self._gate(audio)
            if not found:
                return Transcript("", (), language, duration_ms, speech_found=False)
        elif audio.size == 0:
            return Transcript("", (), language, duration_ms, speech_found=False)
        clips: list[float] | str = "0"
        if regions and audio.shape[0] > _WINDOW_S * SAMPLE_RATE:
            clips = [t / SAMPLE_RATE for r in regions for t in r]
        words_on = self.options.word_timestamps if word_timestamps is None else word_timestamps
        kwargs = self._decode_kwargs(initial_prompt, words_on, clips)
        lead = _WINDOW_LEAD if self._may_cut(audio) else 0
        guard = guard or WindowGuard()
        # A cut window's decode is capped a little past the text its guard accepts: a loop
        # ("Name. Name. Name. ..." from half a second of audio) ran to 224 tokens, 1.9-2.3 s
        # on 2 cores, before the guard could send it to the full window. The cap counts
        # the decoder's prefix and timestamp tokens too (CTranslate2's max_length), hence
        # the slack; a loop still passes the budget in text alone and is decoded again.
        budget = token_budget(duration_ms / 1000, guard) if lead else None
        cap = {} if budget is None else {"max_new_tokens": budget + 1 + _CAP_SLACK}
        with self._lock:
            segments, info = self._model.transcribe(_lead_in(audio, lead), **kwargs, **cap)
            raw = list(segments)
            if self._windowed() and looks_wrong(raw, duration_ms / 1000, guard):
                if not guard.redo:
                    self.dropped += 1
                    return Transcript("", (), str(info.language or language), duration_ms,
                                      trusted=False)
                self.fallbacks += 1
                raw, lead = self._full_window(audio, kwargs), 0
            shift_ms = _ms(lead / SAMPLE_RATE)
            segs = tuple(_segment(s, shift_ms) for s in raw)
        # A segment with no letter or digit ("." on near-silence) says nothing.
        segs = tuple(s for s in segs if any(ch.isalnum() for ch in s.text))
        text = " ".join(s.text for s in segs).strip()
        return Transcript(text, segs, str(info.language or language), duration_ms)

    def _decode_kwargs(self, prompt: str | None, words: bool, clips: list[float] | str) -> dict[str, Any]:
        o = self.options
        return dict(
            language=o.language,
            beam_size=o.beam_size,
            temperature=list(o.temperature),
            no_speech_threshold=o.no_speech_threshold,
            log_prob_threshold=o.log_prob_threshold,
            condition_on_previous_text=False,
            initial_prompt=prompt,
            word_timestamps=words,
            vad_filter=False,
            clip_timestamps=clips,
        )

    def _may_cut(self, audio: npt.NDArray[np.float32]) -> bool:
        """Whether the model cuts the encoder window for this audio (see `_WINDOW_LEAD`)."""
        frames = getattr(self._model, "window_frames", 0)
        return frames > 0 and audio.shape[0] + _WINDOW_LEAD < _WINDOW_S * SAMPLE_RATE

    def _windowed(self) -> bool:
        """Whether the latest encode ran on a cut window."""
        return 0 < getattr(self._model, "last_encoded_frames", FULL_FRAMES) < FULL_FRAMES

    def _full_window(self, audio: npt.NDArray[np.float32], kwargs: dict[str, Any]) -> list[Any]:
        model = self._model
        window, model.window_frames = model.window_frames, 0
        try:
            segments, _ = model.transcribe(audio, **kwargs)
            return list(segments)
        finally:
            model.window_frames = window


_CAP_SLACK = 16
"""Decoder tokens a cut window's decode may spend beyond its text budget (see
`AsrTranscriber.transcribe`)."""


def _lead_in(audio: npt.NDArray[np.float32], samples: int) -> npt.NDArray[np.float32]:
    """`audio` after `samples` of digital silence."""
    if samples <= 0:
        return audio
    return np.concatenate([np.zeros(samples, dtype=audio.dtype), audio])


def _segment(seg: Any, shift_ms: int = 0) -> TranscriptSegment:
    """Our segment from faster-whisper's, its times moved back by `shift_ms` (a lead-in)."""

    def at(seconds: float) -> int:
        return max(0, _ms(seconds) - shift_ms)

    words = tuple(
        TranscribedWord(w.word.strip(), at(w.start), at(w.end), float(w.probability))
        for w in (seg.words or ())
        if w.word.strip()
    )
    return TranscriptSegment(
        text=str(seg.text).strip(),
        start_ms=at(seg.start),
        end_ms=at(seg.end),
        words=words,
        avg_logprob=float(seg.avg_logprob),
        no_speech_prob=float(seg.no_speech_prob),
    )


def _ms(seconds: float) -> int:
    return int(round(float(seconds) * 1000.0))


def _load_model(model_dir: Path, options: ASROptions) -> WhisperModel:
    if not model_dir.is_dir():
        raise ModelLoadError(f"{model_dir}: ASR model directory not found")
    if not (model_dir / "model.bin").is_file():
        raise ModelLoadError(f"{model_dir}: not a CTranslate2 Whisper model (no model.bin)")
    try:
        from audio.whisper_model import WindowedWhisper
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise ModelLoadError(f"faster-whisper is not installed ({exc})") from None
    try:
        return WindowedWhisper(
            str(model_dir),
            device=options.device,
            compute_type=options.compute_type,
            cpu_threads=options.cpu_threads,
            local_files_only=True,
            window_frames=int(round(options.window_s * 100)),
        )
    except Exception as exc:  # CTranslate2 raises RuntimeError/ValueError variants
        raise ModelLoadError(f"{model_dir}: cannot load Whisper model ({type(exc).__name__}: {exc})") from None


def words_text(words: Sequence[TranscribedWord]) -> str:
    """Join words as Whisper would print them."""
    return " ".join(w.text for w in words).strip()
