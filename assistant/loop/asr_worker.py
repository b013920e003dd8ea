"""The ASR worker: open utterances, display partials, previews and final transcripts.

A :class:`~assistant.loop.workers.Worker` thread around one loaded Whisper model.
Methods are called from the event loop and only queue commands; results come back
through ``post`` as the frozen events below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from assistant.loop.workers import Post, Worker
from audio.streaming_asr import lowest_word_p
from audio.whisper_window import GLANCE, LOOPS_ONLY, WindowGuard

if TYPE_CHECKING:
    from audio.asr import Transcriber
    from audio.smart_turn import SmartTurn
    from audio.streaming_asr import StreamingASROptions, StreamingTranscriber

__all__ = ["AsrPartial", "AsrPreview", "AsrOnsetPreview", "AsrFinal", "AsrAudioScore",
           "AsrWorker"]


@dataclass(frozen=True)
class AsrPartial:
    """Display transcript of an open utterance (stable prefix + unconfirmed tail)."""

    utt_id: int
    text: str
    stable_text: str
    word_p: float = 1.0
    """The lowest word probability of ``text`` (see ``TranscriptPartial.word_p``)."""


@dataclass(frozen=True)
class AsrPreview:
    """What the final transcript would be if the utterance ended at ``end_sample``."""

    utt_id: int
    text: str
    end_sample: int
    word_p: float = 1.0


@dataclass(frozen=True)
class AsrOnsetPreview:
    """The decode made at a silence's onset (:meth:`AsrWorker.prepare`): what the preview
    will be if the silence becomes a pause (and the final, if it ends the turn)."""

    utt_id: int
    text: str
    end_sample: int
    word_p: float = 1.0


@dataclass(frozen=True)
class AsrFinal:
    utt_id: int
    text: str
    audio_ms: int
    """Utterance audio decoded."""
    word_p: float = 1.0
    """The lowest word probability (1.0 when decoded without word probabilities)."""


@dataclass(frozen=True)
class AsrAudioScore:
    """The audio end-of-turn model's P(complete) for an utterance so far, at ``pause``."""

    utt_id: int
    pause: int
    p_complete: float


@dataclass(frozen=True)
class _Decoded:
    """One decode of an utterance's audio up to ``end_sample``."""

    end_sample: int
    samples: int
    """Samples it decoded (fewer than asked when the audio had not all come)."""
    text: str
    word_p: float
    with_p: bool
    """Whether ``word_p`` was measured (else 1.0)."""

    def covers(self, end_sample: int, samples: int, with_p: bool) -> bool:
        """Whether this decode is the one asked for: the same audio, with word
        probabilities if those are asked for."""
        return (self.end_sample, self.samples) == (end_sample, samples) \
            and (self.with_p or not with_p)


@dataclass
class _Utterance:
    start_sample: int
    streaming: StreamingTranscriber
    audio: list[npt.NDArray[np.float32]] = field(default_factory=list)
    unfed: list[npt.NDArray[np.float32]] = field(default_factory=list)
    partials: bool = True
    """Display partials run now (held during a pause)."""
    display: bool = True
    """Display partials run at all for this utterance (else its audio is not fed to them)."""
    preview: _Decoded | None = None
    """The latest preview decode."""

    def samples(self, end_sample: int | None = None) -> npt.NDArray[np.float32]:
        pcm = np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)
        if end_sample is not None:
            pcm = pcm[: max(0, end_sample - self.start_sample)]
        return pcm


class AsrWorker(Worker):
    """Open utterances: display partials in background, preview and final on request.

    Preview and final transcripts are plain decodes of the utterance audio up to a
    given sample (the end of speech plus a short tail), so a final transcript of the
    same audio as a preview is the same text -- what makes a speculation hit possible.
    """

    def __init__(self, transcriber: Transcriber, options: StreamingASROptions, post: Post,
                 *, sample_rate: int = 16000, end_model: SmartTurn | None = None) -> None:
        self.transcriber = transcriber
        self.end_model = end_model
        """The audio end-of-turn model (`audio.smart_turn`), if any: asked on this thread,
        after the pause's transcript, which it must not hold up (on a thread of its own
        it ran beside the decode on two cores and made the transcript later:
        docs/benchmarks.md, real human speech)."""
        self.options = options
        self.sample_rate = sample_rate
        self._utts: dict[int, _Utterance] = {}
        self._ended_through = 0
        """Set on the caller's side: the utterances up to this id were finalized or
        discarded (ids only grow, and one is open at a time)."""
        super().__init__("asr", post)

    # All other state is touched on the worker thread only (commands and background steps).

    def has_background_work(self) -> bool:
        return any(u.unfed and u.partials for u in list(self._utts.values()))

    def background_step(self) -> None:
        for utt_id, utt in list(self._utts.items()):
            if not utt.unfed or not utt.partials:
                continue
            pcm = np.concatenate(utt.unfed)
            utt.unfed.clear()
            for p in utt.streaming.feed(pcm):
                self.post(AsrPartial(utt_id, p.text, p.stable_text, p.word_p))
            return

    def open(self, utt_id: int, pcm: npt.NDArray[np.float32], start_sample: int, *,
             partials: bool = True) -> None:
        """A new utterance; ``partials``: with display partials in the background."""
        from audio.streaming_asr import StreamingTranscriber

        def command() -> None:
            # Display partials are glances: a first half second is unsure on any window,
            # and a full-window decode of it (~0.5 s here) would hold up the pause's
            # transcript behind it; one that loops is dropped.
            streaming = StreamingTranscriber.from_transcriber(self.transcriber, self.options,
                                                              guard=GLANCE)
            utt = _Utterance(start_sample, streaming, display=partials)
            self._utts[utt_id] = utt
            if pcm.size:
                utt.audio.append(pcm)
                if partials:
                    utt.unfed.append(pcm)
        self.submit(command)

    def feed(self, utt_id: int, pcm: npt.NDArray[np.float32]) -> None:
        def command() -> None:
            utt = self._utts.get(utt_id)
            if utt is not None:
                utt.audio.append(pcm)
                if utt.display:
                    utt.unfed.append(pcm)
        self.submit(command)

    def hold_partials(self, utt_id: int, hold: bool) -> None:
        """Pause display partials (during a pause in speech: the preview and the final
        must not wait behind a partial re-decode) or resume them."""
        def command() -> None:
            utt = self._utts.get(utt_id)
            if utt is not None:
                utt.partials = not hold
        self.submit(command, priority="control")

    def prepare(self, utt_id: int, end_sample: int, *, with_p: bool = False,
                post: bool = False) -> None:
        """Decode up to ``end_sample`` and keep it: the preview (or the final) of the same
        audio, if asked for, is then ready at once. ``post``: also post it now
        (:class:`AsrOnsetPreview`, for a speculation that need not wait for the pause)."""
        # Normal priority on purpose: the audio up to end_sample is in earlier feeds.
        def command() -> None:
            utt = self._utts.get(utt_id)
            if utt is not None:
                decoded = self._preview_decode(utt, end_sample, with_p)
                if post:
                    self.post(AsrOnsetPreview(utt_id, decoded.text, end_sample,
                                              decoded.word_p))
        self.submit(command)

    def preview(self, utt_id: int, end_sample: int, *, with_p: bool = False) -> None:
        """Decode up to ``end_sample``; ``with_p``: with word probabilities (speech over
        a paused reply: a guess must not cut it)."""
        def command() -> None:
            utt = self._utts.get(utt_id)
            if utt is not None:
                decoded = self._preview_decode(utt, end_sample, with_p)
                self.post(AsrPreview(utt_id, decoded.text, end_sample, decoded.word_p))
        self.submit(command)

    def _preview_decode(self, utt: _Utterance, end_sample: int, with_p: bool) -> _Decoded:
        """The decode of the audio up to ``end_sample``: the kept one if it is that audio
        (the same audio: the same text), else a new one, kept."""
        pcm = utt.samples(end_sample)
        decoded = utt.preview
        if decoded is None or not decoded.covers(end_sample, pcm.size, with_p):
            text, word_p = self._decode(pcm, with_p)
            decoded = utt.preview = _Decoded(end_sample, pcm.size, text, word_p, with_p)
        return decoded

    def audio_score(self, utt_id: int, pause: int) -> None:
        """Ask the audio end-of-turn model about the utterance's audio so far (its
        speech and the pause's silence); posts :class:`AsrAudioScore`, NaN (no answer)
        without a model, for a 16 kHz-only model at another rate, or for an utterance
        already gone or finalized: the pause that asked waits for an answer."""
        model = self.end_model
        if model is None or self.sample_rate != 16000:
            self.post(AsrAudioScore(utt_id, pause, math.nan))
            return

        def command() -> None:
            utt = self._utts.get(utt_id)
            p = math.nan
            # Asked before the turn ended but reached after, the answer is read by
            # nobody: eight sessions stopping at once on two cores ran it between the
            # pause's transcript and the final that reuses it.
            if utt is not None and utt_id > self._ended_through:
                p = model.p_complete(utt.samples())
            self.post(AsrAudioScore(utt_id, pause, p))
        self.submit(command)

    def interim(self, utt_id: int) -> None:
        """Decode all the utterance's audio so far now, posted as a partial."""
        def command() -> None:
            utt = self._utts.get(utt_id)
            if utt is None:
                return
            # A quick look (speech over a paused reply; the final decides on the full
            # guard): no full-window decode for a burst only decoded with low confidence.
            text, word_p = self._decode(utt.samples(), with_p=True, guard=LOOPS_ONLY)
            self.post(AsrPartial(utt_id, text, text, word_p))
        self.submit(command)

    def finalize(self, utt_id: int, end_sample: int, *, with_p: bool = False) -> None:
        self._ended_through = max(self._ended_through, utt_id)

        def command() -> None:
            utt = self._utts.pop(utt_id, None)
            if utt is None:
                self.post(AsrFinal(utt_id, "", 0))
                return
            utt.streaming.cancel()
            pcm = utt.samples(end_sample)
            audio_ms = pcm.size * 1000 // self.sample_rate
            decoded = utt.preview
            if decoded is not None and decoded.covers(end_sample, pcm.size, with_p):
                # The same audio was decoded at the pause: the same text, no new decode.
                self.post(AsrFinal(utt_id, decoded.text, audio_ms, decoded.word_p))
                return
            text, word_p = self._decode(pcm, with_p)
            self.post(AsrFinal(utt_id, text, audio_ms, word_p))
        self.submit(command)

    def discard(self, utt_id: int) -> None:
        self._ended_through = max(self._ended_through, utt_id)

        def command() -> None:
            utt = self._utts.pop(utt_id, None)
            if utt is not None:
                utt.streaming.cancel()
        self.submit(command, priority="control")

    def _decode(self, pcm: npt.NDArray[np.float32], with_p: bool = False,
                guard: WindowGuard | None = None) -> tuple[str, float]:
        """The text, and its lowest word probability when ``with_p`` (else 1.0)."""
        if pcm.size == 0:
            return "", 1.0
        heard = self.transcriber.transcribe(pcm, word_timestamps=with_p, guard=guard)
        return heard.text.strip(), lowest_word_p(heard.words)


