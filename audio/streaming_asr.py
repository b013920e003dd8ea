"""Streaming transcription of an open utterance with a stable, only-growing prefix.

While the user talks, the utterance so far is re-decoded every ``partial_interval_ms``.
Consecutive decodes disagree near the end (the last word is often cut), so we commit
only what two consecutive hypotheses agree on: the *LocalAgreement-2* policy of
Machacek et al., "Turning Whisper into Real-Time Transcription System" (2023), as in
their whisper_streaming ``HypothesisBuffer``: drop hypothesis words that start before
the committed end (minus a tolerance), drop an n-gram overlap with the committed tail,
then commit the longest common prefix with the previous hypothesis. Committed words
never change, so ``stable_text`` only grows.

:class:`LocalAgreement` is pure logic on word lists; :class:`StreamingTranscriber`
adds the audio buffer and calls an injected ``decode`` function, so both are testable
without a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from audio.asr import TranscribedWord, Transcriber, as_asr_input
from audio.whisper_window import WindowGuard

__all__ = [
    "lowest_word_p",
    "StreamingASROptions",
    "TranscriptPartial",
    "TranscriptFinal",
    "LocalAgreement",
    "StreamingTranscriber",
    "DecodeFn",
    "normalize_word",
]

SAMPLE_RATE = 16_000

DecodeFn = Callable[[npt.NDArray[np.float32], str | None], Sequence[TranscribedWord] | None]
"""``decode(audio16k, prompt) -> words`` with times in ms relative to the audio start, or
None when this decode's result is not trusted (the partial stays as it was)."""


@dataclass(frozen=True)
class StreamingASROptions:
    partial_interval_ms: int = 500
    """Re-decode the open utterance after this much new audio."""
    min_audio_ms: int = 300
    """No partial before the utterance has this much audio."""
    agreement: int = 2
    """Hypotheses that must agree before words are committed (LocalAgreement-n)."""
    max_buffer_ms: int = 20_000
    """Past this, audio up to the last committed word is dropped from re-decoding."""
    prompt_chars: int = 200
    """Committed text (before the buffer) passed to the decoder as a prompt."""
    overlap_tolerance_ms: int = 100


@dataclass(frozen=True)
class TranscriptPartial:
    """The open utterance so far."""

    text: str
    """Stable text plus the latest unconfirmed words."""
    stable_text: str
    """Committed words; each partial's stable_text starts with the previous one's."""
    audio_ms: int
    """Utterance audio decoded for this partial."""
    word_p: float = 1.0
    """The lowest probability Whisper gave a word of ``text`` (1.0 with no words): from
    a fraction of a second of audio it guesses ("Right" as "Run!")."""


@dataclass(frozen=True)
class TranscriptFinal:
    """The closed utterance."""

    text: str
    words: tuple[TranscribedWord, ...]
    """Times in ms from the utterance start."""
    audio_ms: int


def normalize_word(text: str) -> str:
    """Lower-case, punctuation stripped (apostrophes kept): the agreement key."""
    return re.sub(r"[^\w']+", "", text.lower()).strip("'")


def lowest_word_p(words: Sequence[TranscribedWord]) -> float:
    """How sure Whisper was of ``words``: the lowest word probability (1.0 for none)."""
    return min((w.probability for w in words), default=1.0)


def _join(words: Sequence[TranscribedWord]) -> str:
    return " ".join(w.text for w in words if w.text).strip()


class LocalAgreement:
    """Commit words two consecutive hypotheses agree on (pure, no audio)."""

    def __init__(self, agreement: int = 2, overlap_tolerance_ms: int = 100, max_ngram: int = 5) -> None:
        if agreement < 1:
            raise ValueError("agreement must be >= 1")
        self.agreement = agreement
        self.tolerance_ms = overlap_tolerance_ms
        self.max_ngram = max_ngram
        self._committed: list[TranscribedWord] = []
        self._history: list[list[TranscribedWord]] = []  # recent "new part" hypotheses
        self._tail: list[TranscribedWord] = []

    @property
    def committed(self) -> tuple[TranscribedWord, ...]:
        return tuple(self._committed)

    @property
    def tail(self) -> tuple[TranscribedWord, ...]:
        """Uncommitted words of the latest hypothesis."""
        return tuple(self._tail)

    @property
    def committed_end_ms(self) -> int:
        return self._committed[-1].end_ms if self._committed else 0

    def new_part(self, hypothesis: Sequence[TranscribedWord]) -> list[TranscribedWord]:
        """Words of ``hypothesis`` past the committed prefix (by time, then by n-gram)."""
        if not self._committed:
            return [w for w in hypothesis if normalize_word(w.text)]
        cut = self.committed_end_ms - self.tolerance_ms
        new = [w for w in hypothesis if w.start_ms > cut and normalize_word(w.text)]
        # The head may repeat the committed tail with shifted timestamps; drop it.
        done = [normalize_word(w.text) for w in self._committed]
        for n in range(min(self.max_ngram, len(done), len(new)), 0, -1):
            if done[-n:] == [normalize_word(w.text) for w in new[:n]]:
                return new[n:]
        return new

    def insert(self, hypothesis: Sequence[TranscribedWord]) -> list[TranscribedWord]:
        """Add a hypothesis (times on one timeline); return the newly committed words."""
        new = self.new_part(hypothesis)
        self._history.append(new)
        self._history = self._history[-self.agreement :]
        if len(self._history) < self.agreement:
            self._tail = new
            return []
        keys = [[normalize_word(w.text) for w in h] for h in self._history]
        n = 0
        while all(n < len(k) for k in keys) and all(k[n] == keys[-1][n] for k in keys):
            n += 1
        fresh = new[:n]
        self._committed.extend(fresh)
        self._tail = new[n:]
        # Earlier hypotheses' agreed words are now committed: keep only their rest.
        self._history = [h[n:] for h in self._history]
        return fresh

    def finish(self, hypothesis: Sequence[TranscribedWord] | None = None) -> tuple[TranscribedWord, ...]:
        """Commit everything: the new part of ``hypothesis`` (or the latest tail)."""
        rest = self.new_part(hypothesis) if hypothesis is not None else list(self._tail)
        self._committed.extend(rest)
        self._tail = []
        self._history = []
        return tuple(self._committed)


class StreamingTranscriber:
    """Feed 16 kHz audio of one open utterance; get partials; ``finalize`` at its end.

    Synchronous: each :meth:`feed` that crosses the interval runs one decode, so call
    it off the event loop. ``decode`` may be any :data:`DecodeFn` (tests use fakes).
    """

    def __init__(self, decode: DecodeFn, options: StreamingASROptions | None = None) -> None:
        self.decode = decode
        self.options = options if options is not None else StreamingASROptions()
        self._agreement = LocalAgreement(self.options.agreement, self.options.overlap_tolerance_ms)
        self._chunks: list[npt.NDArray[np.float32]] = []
        self._buffer = np.zeros(0, dtype=np.float32)
        self._buffer_start = 0  # samples of the utterance dropped before the buffer
        self._total = 0
        self._decoded_upto = 0
        self._last_text = ""
        self._last_stable = ""
        self._final: TranscriptFinal | None = None
        self._cancelled = False

    @classmethod
    def from_transcriber(
        cls, transcriber: Transcriber, options: StreamingASROptions | None = None,
        *, guard: WindowGuard | None = None,
    ) -> StreamingTranscriber:
        """Decode with a loaded :class:`~audio.asr.Transcriber` (silence gate on);
        ``guard``: when a cut-window decode is decoded again on the full window, or
        dropped (None: the transcriber's default; see :mod:`audio.whisper_window`)."""

        def decode(audio: npt.NDArray[np.float32], prompt: str | None
                   ) -> Sequence[TranscribedWord] | None:
            heard = transcriber.transcribe(audio, word_timestamps=True, initial_prompt=prompt,
                                           guard=guard)
            return heard.words if heard.trusted else None

        return cls(decode, options)

    @property
    def audio_ms(self) -> int:
        """Utterance audio received so far."""
        return self._total * 1000 // SAMPLE_RATE

    @property
    def stable_text(self) -> str:
        return _join(self._agreement.committed)

    def cancel(self) -> None:
        """Stop decoding; later feeds return nothing. Idempotent."""
        self._cancelled = True

    def feed(self, pcm16k: npt.ArrayLike) -> list[TranscriptPartial]:
        """Append audio; returns a partial when a re-decode ran and changed the text."""
        if self._cancelled or self._final is not None:
            return []
        audio = as_asr_input(pcm16k)
        if audio.size:
            self._chunks.append(audio)
            self._total += audio.shape[0]
        o = self.options
        interval = o.partial_interval_ms * SAMPLE_RATE // 1000
        if self._total * 1000 < o.min_audio_ms * SAMPLE_RATE or self._total - self._decoded_upto < interval:
            return []
        partial = self._decode_partial()
        return [partial] if partial is not None else []

    def finalize(self) -> TranscriptFinal:
        """Decode the whole utterance once more and commit everything. Idempotent."""
        if self._final is not None:
            return self._final
        words: tuple[TranscribedWord, ...]
        if self._cancelled:
            words = self._agreement.committed
        else:
            hyp = self._run_decode() if self._total > 0 else []
            words = self._agreement.finish(hyp)  # None (not trusted): the latest tail
        self._final = TranscriptFinal(_join(words), words, self.audio_ms)
        return self._final

    # -- internals ---------------------------------------------------------------------
    def _audio(self) -> npt.NDArray[np.float32]:
        if self._chunks:
            self._buffer = np.concatenate([self._buffer, *self._chunks])
            self._chunks = []
        return self._buffer

    def _run_decode(self) -> list[TranscribedWord] | None:
        audio = self._audio()
        self._decoded_upto = self._total
        committed = self._agreement.committed
        offset_ms = self._buffer_start * 1000 // SAMPLE_RATE
        before = [w for w in committed if w.end_ms <= offset_ms]
        prompt = _join(before)[-self.options.prompt_chars :] or None
        words = self.decode(audio, prompt)
        if words is None:
            return None
        return [
            TranscribedWord(w.text, w.start_ms + offset_ms, w.end_ms + offset_ms, w.probability) for w in words
        ]

    def _decode_partial(self) -> TranscriptPartial | None:
        hyp = self._run_decode()
        if hyp is None:
            return None  # not trusted: the last partial stands
        self._agreement.insert(hyp)
        self._maybe_trim()
        stable = _join(self._agreement.committed)
        words = [*self._agreement.committed, *self._agreement.tail]
        text = _join(words)
        if text == self._last_text and stable == self._last_stable:
            return None
        self._last_text, self._last_stable = text, stable
        return TranscriptPartial(text, stable, self._decoded_upto * 1000 // SAMPLE_RATE,
                                 lowest_word_p(words))

    def _maybe_trim(self) -> None:
        """Drop buffered audio up to the last committed word once the buffer is long."""
        if self._buffer.shape[0] * 1000 <= self.options.max_buffer_ms * SAMPLE_RATE:
            return
        end_sample = self._agreement.committed_end_ms * SAMPLE_RATE // 1000
        drop = end_sample - self._buffer_start
        if drop <= 0:
            return
        self._buffer = self._buffer[drop:]
        self._buffer_start += drop
