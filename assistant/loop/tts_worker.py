"""The TTS worker: one reply voice per turn, and pre-synthesis of speculative clauses.

A :class:`~assistant.loop.workers.Worker` thread around one loaded Piper voice.
Methods are called from the event loop and only queue commands; audio comes back
through ``post`` as :class:`SpeechChunk` / :class:`SpeechDone` / :class:`Presynthesized`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from assistant.loop.workers import Post, Worker
from assistant.speech.voice import DEFAULT_CLAUSES, AdoptsPremade, ClauseRule, ReplyVoice

if TYPE_CHECKING:
    from assistant.llm.step_gate import StepGate
    from audio.tts import SpanSynthesizer
    from audio.word_timing import TTSChunk

__all__ = ["SpeechChunk", "SpeechDone", "Presynthesized", "TtsWorker"]


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


class TtsWorker(Worker):
    """One :class:`ReplyVoice` per turn; pre-synthesises speculative clauses at low priority.

    With a ``gate``, the engine's steps wait while a reply's first clause (or a
    speculation's, made ahead for it) is synthesised: the first audio waits for it, and
    on a CPU the decode beside it doubled its time (:mod:`assistant.llm.step_gate`)."""

    def __init__(self, synthesizer: SpanSynthesizer, post: Post, *,
                 clauses: ClauseRule = DEFAULT_CLAUSES, gate: StepGate | None = None) -> None:
        self.synthesizer = synthesizer
        self.clauses = clauses
        self.gate = gate
        self._voices: dict[int, ReplyVoice] = {}
        self._cancelled: set[int] = set()
        self._premade: dict[int, TTSChunk] = {}
        self._replies_begun = 0
        """Counted on the caller's side: a pre-synthesis queued before a reply began is
        skipped (the reply speaks its clauses itself; one running then is used)."""
        super().__init__("tts", post)

    def begin(self, turn_id: int, spec_id: int | None = None) -> None:
        """A reply starts; ``spec_id``: the speculation it adopted, whose pre-synthesised
        first clause it speaks if that clause is the one it cuts (a pre-synthesis still
        running is waited for: it is further along than starting again)."""
        self._replies_begun += 1

        def command() -> None:
            premade = [self._premade[spec_id]] if spec_id in self._premade else []
            self._premade.clear()
            adopt = (self.synthesizer.adopt if isinstance(self.synthesizer, AdoptsPremade)
                     else None)
            self._voices[turn_id] = ReplyVoice(self.synthesizer, turn_id,
                                               clauses=self.clauses,
                                               premade=premade, adopt=adopt)
        self.submit(command)

    def feed(self, turn_id: int, delta: str, done: bool) -> None:
        def command() -> None:
            voice = self._voices.get(turn_id)
            if voice is None or turn_id in self._cancelled:
                return
            with self._urgent(voice.total_samples == 0):  # nothing of it made yet
                chunks = voice.feed(delta) if delta else []
            for chunk in chunks:
                self.post(SpeechChunk(turn_id, chunk))
            if done:
                with self._urgent(voice.total_samples == 0):
                    chunks = voice.finish()
                for chunk in chunks:
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
        begun = self._replies_begun

        def command() -> None:
            if begun != self._replies_begun:
                return  # queued behind a reply that has begun: stale
            with self._urgent(True):
                chunk = self.synthesizer.synthesize_span(text, turn_id=0, char_start=0)
            if chunk is not None:
                self._premade[spec_id] = chunk
                self.post(Presynthesized(spec_id, chunk))
        self.submit(command, priority="low")

    def _urgent(self, first: bool) -> contextlib.AbstractContextManager[None]:
        return self.gate.hold() if first and self.gate is not None else contextlib.nullcontext()
