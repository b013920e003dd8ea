"""The three model workers of the live loop: engine, ASR and TTS.

Each wraps one loaded model in a :class:`~assistant.loop.workers.Worker` thread. Methods are
called from the event loop and only queue commands; results come back through
``post`` as the frozen events below (or the :mod:`assistant.dialogue.dialogue` outputs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from assistant.dialogue.dialogue import Dialogue
from assistant.loop.workers import Post, Worker
from assistant.speech.voice import ReplyVoice

if TYPE_CHECKING:
    from audio.asr import Transcriber
    from audio.streaming_asr import StreamingASROptions, StreamingTranscriber
    from audio.tts import SpanSynthesizer
    from audio.word_timing import TTSChunk

__all__ = [
    "TurnWithdrawn",
    "AsrPartial",
    "AsrPreview",
    "AsrFinal",
    "SpeechChunk",
    "SpeechDone",
    "Presynthesized",
    "EngineWorker",
    "AsrWorker",
    "TtsWorker",
]

# ---------------------------------------------------------------------------- events


@dataclass(frozen=True)
class TurnWithdrawn:
    turn_id: int


@dataclass(frozen=True)
class AsrPartial:
    """Display transcript of an open utterance (stable prefix + unconfirmed tail)."""

    utt_id: int
    text: str
    stable_text: str


@dataclass(frozen=True)
class AsrPreview:
    """What the final transcript would be if the utterance ended at ``end_sample``."""

    utt_id: int
    text: str
    end_sample: int


@dataclass(frozen=True)
class AsrFinal:
    utt_id: int
    text: str
    audio_ms: int
    """Utterance audio decoded."""


@dataclass(frozen=True)
class SpeechChunk:
    turn_id: int
    chunk: TTSChunk


@dataclass(frozen=True)
class SpeechDone:
    """No more audio for ``turn_id``."""

    turn_id: int
    total_samples: int
    """Samples of the whole reply (at the chunks' rate)."""


@dataclass(frozen=True)
class Presynthesized:
    spec_id: int
    chunk: TTSChunk


# ---------------------------------------------------------------------------- engine


class EngineWorker(Worker):
    """Owns the :class:`Dialogue` (and so the engine); steps generation in background."""

    def __init__(self, dialogue: Dialogue, post: Post) -> None:
        self.dialogue = dialogue
        self._withdrawn: set[int] = set()  # turns withdrawn before they started
        super().__init__("engine", post)

    def has_background_work(self) -> bool:
        return self.dialogue.has_work()

    def background_step(self) -> None:
        try:
            outputs = self.dialogue.step()
        except Exception:
            # Never spin on a failing step: drop the work, then report.
            self.dialogue.cancel_all_speculations()
            raise
        for out in outputs:
            self.post(out)

    def on_close(self) -> None:
        self.dialogue.close()

    def call(self, fn: Callable[[Dialogue], Any], *, priority: str = "normal") -> None:
        """Run ``fn(dialogue)`` on the engine thread and post its result if not None."""
        def command() -> None:
            result = fn(self.dialogue)
            if result is not None:
                self.post(result)
        self.submit(command, priority=priority)

    def speculate(self, spec_id: int, user_text: str) -> None:
        self.call(lambda d: d.speculate(spec_id, user_text), priority="low")

    def cancel_speculation(self, spec_id: int) -> None:
        self.call(lambda d: d.cancel_speculation(spec_id), priority="control")

    def start_turn(self, turn_id: int, user_text: str, spec_id: int | None) -> None:
        def command() -> None:
            if turn_id in self._withdrawn:  # a withdrawal (control) overtook the start
                if spec_id is not None:
                    self.dialogue.cancel_speculation(spec_id)
                return
            self.post(self.dialogue.start_turn(turn_id, user_text, spec_id))
            for out in self.dialogue.step():  # a hit's drafted text goes out at once
                self.post(out)
        self.submit(command)

    def cut_turn(self, turn_id: int, heard_chars: int, spoken_ms: int) -> None:
        self.call(lambda d: d.cut_turn(turn_id, heard_chars, spoken_ms), priority="control")

    def finish_turn(self, turn_id: int, spoken_ms: int) -> None:
        self.call(lambda d: d.finish_turn(turn_id, spoken_ms))

    def withdraw_turn(self, turn_id: int) -> None:
        def command() -> None:
            if self.dialogue.live_turn_id == turn_id:
                self.dialogue.withdraw_turn(turn_id)
            else:
                self._withdrawn.add(turn_id)
            self.post(TurnWithdrawn(turn_id))
        self.submit(command, priority="control")


# ---------------------------------------------------------------------------- ASR


@dataclass
class _Utterance:
    start_sample: int
    streaming: StreamingTranscriber
    audio: list[npt.NDArray[np.float32]] = field(default_factory=list)
    unfed: list[npt.NDArray[np.float32]] = field(default_factory=list)
    partials: bool = True
    preview: tuple[int, int, str] | None = None
    """(end sample, samples decoded, text) of the latest preview decode."""

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
                 *, sample_rate: int = 16000) -> None:
        self.transcriber = transcriber
        self.options = options
        self.sample_rate = sample_rate
        self._utts: dict[int, _Utterance] = {}
        super().__init__("asr", post)

    # All state is touched on the worker thread only (commands and background steps).

    def has_background_work(self) -> bool:
        return any(u.unfed and u.partials for u in list(self._utts.values()))

    def background_step(self) -> None:
        for utt_id, utt in list(self._utts.items()):
            if not utt.unfed or not utt.partials:
                continue
            pcm = np.concatenate(utt.unfed)
            utt.unfed.clear()
            for p in utt.streaming.feed(pcm):
                self.post(AsrPartial(utt_id, p.text, p.stable_text))
            return

    def open(self, utt_id: int, pcm: npt.NDArray[np.float32], start_sample: int) -> None:
        from audio.streaming_asr import StreamingTranscriber

        def command() -> None:
            streaming = StreamingTranscriber.from_transcriber(self.transcriber, self.options)
            utt = _Utterance(start_sample, streaming)
            self._utts[utt_id] = utt
            if pcm.size:
                utt.audio.append(pcm)
                utt.unfed.append(pcm)
        self.submit(command)

    def feed(self, utt_id: int, pcm: npt.NDArray[np.float32]) -> None:
        def command() -> None:
            utt = self._utts.get(utt_id)
            if utt is not None:
                utt.audio.append(pcm)
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

    def preview(self, utt_id: int, end_sample: int) -> None:
        # Normal priority on purpose: the audio up to end_sample is in earlier feeds.
        def command() -> None:
            utt = self._utts.get(utt_id)
            if utt is not None:
                pcm = utt.samples(end_sample)
                text = self._decode(pcm)
                utt.preview = (end_sample, pcm.size, text)
                self.post(AsrPreview(utt_id, text, end_sample))
        self.submit(command)

    def finalize(self, utt_id: int, end_sample: int) -> None:
        def command() -> None:
            utt = self._utts.pop(utt_id, None)
            if utt is None:
                self.post(AsrFinal(utt_id, "", 0))
                return
            utt.streaming.cancel()
            pcm = utt.samples(end_sample)
            audio_ms = pcm.size * 1000 // self.sample_rate
            if utt.preview is not None and utt.preview[:2] == (end_sample, pcm.size):
                # The same audio was decoded at the pause: the same text, no new decode.
                self.post(AsrFinal(utt_id, utt.preview[2], audio_ms))
                return
            self.post(AsrFinal(utt_id, self._decode(pcm), audio_ms))
        self.submit(command)

    def discard(self, utt_id: int) -> None:
        def command() -> None:
            utt = self._utts.pop(utt_id, None)
            if utt is not None:
                utt.streaming.cancel()
        self.submit(command, priority="control")

    def _decode(self, pcm: npt.NDArray[np.float32]) -> str:
        if pcm.size == 0:
            return ""
        return self.transcriber.transcribe(pcm, word_timestamps=False).text.strip()


# ---------------------------------------------------------------------------- TTS


class TtsWorker(Worker):
    """One :class:`ReplyVoice` per turn; pre-synthesises speculative clauses at low priority."""

    def __init__(self, synthesizer: SpanSynthesizer, post: Post, *,
                 min_clause_chars: int = 12) -> None:
        self.synthesizer = synthesizer
        self.min_clause_chars = min_clause_chars
        self._voices: dict[int, ReplyVoice] = {}
        self._cancelled: set[int] = set()
        self._premade: dict[int, TTSChunk] = {}
        super().__init__("tts", post)

    def begin(self, turn_id: int, spec_id: int | None = None) -> None:
        def command() -> None:
            premade = [self._premade[spec_id]] if spec_id in self._premade else []
            self._premade.clear()
            self._voices[turn_id] = ReplyVoice(self.synthesizer, turn_id,
                                               min_clause_chars=self.min_clause_chars,
                                               premade=premade)
        self.submit(command)

    def feed(self, turn_id: int, delta: str, done: bool) -> None:
        def command() -> None:
            voice = self._voices.get(turn_id)
            if voice is None or turn_id in self._cancelled:
                return
            chunks = voice.feed(delta) if delta else []
            for chunk in chunks:
                self.post(SpeechChunk(turn_id, chunk))
            if done:
                for chunk in voice.finish():
                    self.post(SpeechChunk(turn_id, chunk))
                self._voices.pop(turn_id, None)
                self.post(SpeechDone(turn_id, voice.total_samples))
        self.submit(command)

    def cancel(self, turn_id: int) -> None:
        def command() -> None:
            self._cancelled.add(turn_id)
            voice = self._voices.pop(turn_id, None)
            if voice is not None:
                voice.cancel()
        self.submit(command, priority="control")

    def presynthesize(self, spec_id: int, text: str) -> None:
        def command() -> None:
            chunk = self.synthesizer.synthesize_span(text, turn_id=0, char_start=0)
            if chunk is not None:
                self._premade[spec_id] = chunk
                self.post(Presynthesized(spec_id, chunk))
        self.submit(command, priority="low")
