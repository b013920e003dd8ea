"""Text to speech with Piper, streamed per sentence or clause, with word timings.

:class:`Synthesizer` wraps one loaded ``PiperVoice`` (loaded once; voice *resolution*
is the caller's job, this takes paths). Each synthesized span becomes a
:class:`~audio.word_timing.TTSChunk` whose ``words`` table comes from Piper's phoneme
alignments (see :mod:`audio.word_timing`). :class:`StreamingTTS` takes LLM text
deltas, cuts them into clauses with :class:`~audio.clauses.ClauseChunker` and yields
chunks with offsets relative to the whole reply.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from audio.chunk import float_to_int16
from audio.clauses import Clause, ClauseChunker, split_sentences
from audio.errors import AudioValueError, ModelLoadError
from audio.word_timing import TTSChunk, align_words, estimate_words, split_words

if TYPE_CHECKING:
    from piper import PiperVoice

__all__ = ["TTSOptions", "Synthesizer", "SpanSynthesizer", "StreamingTTS", "load_piper_voice"]

_WORD_CACHE_MAX = 4096


@dataclass(frozen=True)
class TTSOptions:
    """Synthesis settings; ``None`` keeps the voice's own default."""

    length_scale: float | None = None
    """Phoneme duration scale (> 1 is slower)."""
    noise_scale: float | None = None
    noise_w_scale: float | None = None
    volume: float = 1.0
    normalize_audio: bool = True
    """Scale each sentence to full range (Piper's default)."""
    speaker_id: int | None = None
    use_cuda: bool = False


class SpanSynthesizer(Protocol):
    """What :class:`StreamingTTS` needs: turn one span of a reply into a chunk."""

    @property
    def sample_rate(self) -> int: ...

    def synthesize_span(
        self,
        text: str,
        *,
        turn_id: int = 0,
        char_start: int = 0,
        start_sample: int = 0,
        word_index: int = 0,
        token_start: int | None = None,
        token_end: int | None = None,
    ) -> TTSChunk | None: ...


class Synthesizer:
    """A loaded Piper voice.

    Thread-safety: :meth:`synthesize_span` may run in a worker thread while
    :meth:`cancel` is called from another; ``cancel`` only flips a counter.
    """

    def __init__(
        self,
        model_path: str | Path,
        config_path: str | Path | None = None,
        options: TTSOptions | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        self.config_path = Path(config_path) if config_path is not None else Path(f"{model_path}.json")
        self.options = options if options is not None else TTSOptions()
        self._setup(load_piper_voice(self.model_path, self.config_path, self.options.use_cuda))

    @classmethod
    def from_voice(cls, voice: PiperVoice, options: TTSOptions | None = None) -> Synthesizer:
        """Wrap an already loaded ``PiperVoice`` (load it with ``include_alignments=True``)."""
        self = cls.__new__(cls)
        self.model_path = Path("<preloaded>")
        self.config_path = Path("<preloaded>")
        self.options = options if options is not None else TTSOptions()
        self._setup(voice)
        return self

    def _setup(self, voice: PiperVoice) -> None:
        self._voice = voice
        self._syn_config = self._make_syn_config()
        self._word_cache: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()
        self._epoch = 0

    @property
    def sample_rate(self) -> int:
        """Hz (22,050 for the packaged voice)."""
        return int(self._voice.config.sample_rate)

    def cancel(self) -> None:
        """Stop every :meth:`synthesize` generator started before this call. Idempotent."""
        self._epoch += 1

    # -- whole text --------------------------------------------------------------------
    def synthesize(
        self,
        text: str,
        *,
        turn_id: int = 0,
        token_range: tuple[int, int] | None = None,
    ) -> Iterator[TTSChunk]:
        """Yield one chunk per sentence of ``text`` as soon as each is synthesized.

        Offsets (chars, samples, word indices) are relative to ``text``. ``token_range``
        (generated-token indices covering ``text``) is copied onto every chunk.
        Stops early, between sentences, once :meth:`cancel` is called.
        """
        epoch = self._epoch
        start_sample = 0
        word_index = 0
        tok0, tok1 = token_range if token_range is not None else (None, None)
        for clause in split_sentences(text):
            if self._epoch != epoch:
                return
            chunk = self.synthesize_span(
                clause.text,
                turn_id=turn_id,
                char_start=clause.char_start,
                start_sample=start_sample,
                word_index=word_index,
                token_start=tok0,
                token_end=tok1,
            )
            if chunk is None or self._epoch != epoch:
                continue
            start_sample = chunk.end_sample
            word_index += len(chunk.words)
            yield chunk

    # -- one span ----------------------------------------------------------------------
    def synthesize_span(
        self,
        text: str,
        *,
        turn_id: int = 0,
        char_start: int = 0,
        start_sample: int = 0,
        word_index: int = 0,
        token_start: int | None = None,
        token_end: int | None = None,
    ) -> TTSChunk | None:
        """Synthesize ``text`` as one chunk (None if nothing in it is speakable)."""
        words = split_words(text)
        if not words:
            return None
        pieces: list[np.ndarray] = []
        phonemes: list[str] = []
        samples: list[int] = []
        aligned = True
        for audio_chunk in self._voice.synthesize(text, syn_config=self._syn_config, include_alignments=True):
            audio = np.asarray(audio_chunk.audio_float_array, dtype=np.float32).reshape(-1)
            pieces.append(audio)
            alignment = audio_chunk.phoneme_alignments
            if not alignment or sum(int(a.num_samples) for a in alignment) != audio.shape[0]:
                aligned = False
                continue
            phonemes.extend(a.phoneme for a in alignment)
            samples.extend(int(a.num_samples) for a in alignment)
        if not pieces:
            return None
        pcm = float_to_int16(np.concatenate(pieces))
        if aligned:
            word_phonemes = [self._phonemize_word(w.word) for w in words]
            timings = align_words(words, word_phonemes, phonemes, samples, char_offset=char_start)
        else:
            timings = estimate_words(words, int(pcm.shape[0]), char_offset=char_start)
        return TTSChunk(
            turn_id=turn_id,
            pcm=pcm,
            sample_rate=self.sample_rate,
            text=text,
            char_start=char_start,
            char_end=char_start + len(text),
            words=timings,
            start_sample=start_sample,
            token_start=token_start,
            token_end=token_end,
            word_index=word_index,
        )

    def _phonemize_word(self, word: str) -> tuple[str, ...]:
        with self._lock:
            hit = self._word_cache.get(word)
        if hit is not None:
            return hit
        phs = tuple(ph for sentence in self._voice.phonemize(word) for ph in sentence)
        with self._lock:
            if len(self._word_cache) >= _WORD_CACHE_MAX:
                self._word_cache.clear()
            self._word_cache[word] = phs
        return phs

    def _make_syn_config(self) -> Any:
        from piper import SynthesisConfig

        o = self.options
        return SynthesisConfig(
            speaker_id=o.speaker_id,
            length_scale=o.length_scale,
            noise_scale=o.noise_scale,
            noise_w_scale=o.noise_w_scale,
            normalize_audio=o.normalize_audio,
            volume=o.volume,
        )


def load_piper_voice(model_path: Path, config_path: Path, use_cuda: bool = False) -> PiperVoice:
    """``PiperVoice.load(..., include_alignments=True)``, but with our session options
    (see :func:`_session_options`)."""
    if not model_path.is_file():
        raise ModelLoadError(f"{model_path}: voice model not found")
    if not config_path.is_file():
        raise ModelLoadError(f"{config_path}: voice config not found (expected next to the .onnx)")
    try:
        import onnx
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig
        from piper.patch_voice_with_alignment import add_alignment_output
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise ModelLoadError(f"piper-tts is not installed ({exc})") from None
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        model = onnx.load(str(model_path))
        # The phoneme alignments word timings come from, patched in memory (a ValueError:
        # the file is patched already).
        with contextlib.suppress(ValueError):
            add_alignment_output(model)
        providers: list[Any] = (
            [("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"})] if use_cuda
            else ["CPUExecutionProvider"])
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), sess_options=_session_options(onnxruntime),
            providers=providers)
        return PiperVoice(session=session, config=PiperConfig.from_dict(config))
    except Exception as exc:  # onnx / onnxruntime / json raise many types
        raise ModelLoadError(f"{model_path}: cannot load Piper voice ({type(exc).__name__}: {exc})") from None


def _session_options(onnxruntime: Any) -> Any:
    """onnxruntime's defaults, except that its idle worker threads sleep instead of
    spinning: the loop shares two cores among Whisper, the LLM and Piper, and a spinning
    Piper thread takes a core from the LLM drafting the next clause (on 2 cores both the
    clause and the engine's decode beside it are faster with sleeping threads)."""
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class StreamingTTS:
    """Synthesize a reply while it is being generated (synchronous core).

    Feed text deltas (optionally with the generated-token count after each delta);
    each call returns the chunks completed so far, with char offsets, sample offsets and
    word indices relative to the whole reply. Run it off the event loop: each completed
    clause is synthesized inside :meth:`feed`.
    """

    def __init__(
        self,
        synthesizer: SpanSynthesizer,
        turn_id: int = 0,
        min_clause_chars: int = 12,
        max_clause_chars: int = 240,
    ) -> None:
        self.synthesizer = synthesizer
        self.turn_id = turn_id
        self._chunker = ClauseChunker(min_clause_chars, max_clause_chars)
        self._chunks: list[TTSChunk] = []
        self._token_marks: list[tuple[int, int]] = []  # (char offset after delta, tokens so far)
        self._next_sample = 0
        self._next_word = 0
        self._cancelled = False

    @property
    def chunks(self) -> Sequence[TTSChunk]:
        """Chunks produced so far, in playback order."""
        return tuple(self._chunks)

    @property
    def text(self) -> str:
        """The reply text fed so far."""
        return self._chunker.text

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Stop: later feeds and finish produce nothing. Idempotent."""
        self._cancelled = True

    def feed(self, delta: str, token_count: int | None = None) -> list[TTSChunk]:
        """Add a delta; ``token_count`` is the number of tokens generated once it is included."""
        if self._cancelled:
            return []
        if delta and token_count is not None:
            self._token_marks.append((len(self._chunker.text) + len(delta), int(token_count)))
        return self._synthesize(self._chunker.feed(delta))

    def finish(self) -> list[TTSChunk]:
        """End of reply: synthesize whatever is pending."""
        if self._cancelled:
            return []
        return self._synthesize(self._chunker.flush())

    def _synthesize(self, clauses: list[Clause]) -> list[TTSChunk]:
        out: list[TTSChunk] = []
        for clause in clauses:
            if self._cancelled:
                break
            tok0, tok1 = self._token_range(clause.char_start, clause.char_end)
            chunk = self.synthesizer.synthesize_span(
                clause.text,
                turn_id=self.turn_id,
                char_start=clause.char_start,
                start_sample=self._next_sample,
                word_index=self._next_word,
                token_start=tok0,
                token_end=tok1,
            )
            if chunk is None or self._cancelled:
                continue
            if chunk.sample_rate <= 0 or chunk.pcm.ndim != 1:
                raise AudioValueError("synthesizer returned malformed audio")
            self._next_sample = chunk.end_sample
            self._next_word += len(chunk.words)
            self._chunks.append(chunk)
            out.append(chunk)
        return out

    def _token_range(self, char_start: int, char_end: int) -> tuple[int | None, int | None]:
        """Tokens whose deltas overlap the span's non-blank text, when counts were given."""
        if not self._token_marks:
            return None, None
        text = self._chunker.text
        while char_end > char_start and text[char_end - 1].isspace():
            char_end -= 1
        while char_start < char_end and text[char_start].isspace():
            char_start += 1
        start: int | None = None
        end: int | None = None
        prev_tokens = 0
        for chars, tokens in self._token_marks:
            if start is None and chars > char_start:
                start = prev_tokens
            if chars >= char_end:
                end = tokens
                break
            prev_tokens = tokens
        return start, end
