"""Model stand-ins for hermetic pipeline tests: no Whisper, no Piper, no LLM weights.

- :class:`ToneClassifier`: VAD frame classifier that calls any loud frame speech.
- :class:`CountingTranscriber`: "transcribes" an utterance as one code word per 100 ms
  of loud audio, so the same audio always gives the same text and more speech gives a
  longer text (a speculation on a pause misses, one on the whole utterance hits).
- :class:`ToneSynthesizer`: speaks each word as ``word_ms`` of tone with exact word
  timings, so the words heard at a barge-in are known to the sample.
- :func:`scripted_dialogue`: the real engine over the fake runner, replying
  ``You said <words>. Fine, thanks for asking!``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueOptions
from assistant.speech.voice import ClauseRule
from audio.word_timing import TTSChunk, WordTiming, split_words
from engine.chat_template import ChatTemplate, Message
from tests.engine.fake_runner import ByteTokenizer, make_engine

if TYPE_CHECKING:
    from assistant.llm.protocol import LLMBackend
    from engine.engine import Engine

RATE = 16_000
CODE_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
              "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
              "quebec", "romeo", "sierra", "tango")
START, END = "<|im_start|>", "<|im_end|>"


class ToneClassifier:
    def is_speech(self, frame: npt.NDArray[np.float32]) -> bool:
        return float(np.sqrt(np.mean(frame.astype(np.float64) ** 2))) > 0.01

    def reset(self) -> None:
        pass


@dataclass(frozen=True)
class _Text:
    text: str
    words: tuple[object, ...] = ()
    trusted: bool = True


class CountingTranscriber:
    """One code word per loud 100 ms block; none at all for fewer than
    ``min_loud_blocks`` of them (a cough is not words)."""

    sample_rate = RATE

    def __init__(self, min_loud_blocks: int = 0) -> None:
        self.calls = 0
        self.min_loud_blocks = min_loud_blocks
        self.guards: list[object] = []
        """The ``guard`` of every call (None: the transcriber's default)."""

    def transcribe(self, pcm: npt.NDArray[np.float32], **kw: object) -> _Text:
        self.calls += 1
        self.guards.append(kw.get("guard"))
        block = RATE // 10
        n = pcm.size // block
        loud = sum(1 for i in range(n)
                   if np.sqrt(np.mean(pcm[i * block:(i + 1) * block] ** 2)) > 0.01)
        if loud < self.min_loud_blocks:
            loud = 0
        return _Text(" ".join(CODE_WORDS[i % len(CODE_WORDS)] for i in range(loud)))


class ToneSynthesizer:
    sample_rate = RATE

    def __init__(self, word_ms: int = 150, amplitude: float = 0.05) -> None:
        self.word = RATE * word_ms // 1000
        self.amplitude = amplitude
        self.spans: list[str] = []

    def synthesize_span(self, text: str, *, turn_id: int = 0, char_start: int = 0,
                        start_sample: int = 0, word_index: int = 0,
                        token_start: int | None = None,
                        token_end: int | None = None) -> TTSChunk | None:
        words = split_words(text)
        if not words:
            return None
        self.spans.append(text)
        n = self.word * len(words)
        t = np.arange(n) / RATE
        pcm = (np.sin(2 * np.pi * 440 * t) * self.amplitude * 32767).astype(np.int16)
        timings = tuple(WordTiming(w.word, w.char_start + char_start, w.char_end + char_start,
                                   i * self.word, (i + 1) * self.word)
                        for i, w in enumerate(words))
        return TTSChunk(turn_id=turn_id, pcm=pcm, sample_rate=RATE, text=text,
                        char_start=char_start, char_end=char_start + len(text), words=timings,
                        start_sample=start_sample, token_start=token_start,
                        token_end=token_end, word_index=word_index)


def scripted_reply(user: str) -> str:
    return f"You said {user.strip()}. Fine, thanks for asking!"


def chatml(messages: Sequence[Message], add_generation_prompt: bool) -> str:
    text = "".join(f"{START}{m['role']}\n{m['content']}{END}\n" for m in messages)
    return text + (f"{START}assistant\n" if add_generation_prompt else "")


def scripted_next_token(tok: ByteTokenizer,
                        reply: Callable[[str], str]) -> Callable[[tuple[int, ...]], int | None]:
    """A fake model over ChatML ids: after the last assistant header it spells out
    ``reply(<last user message>)`` and then the end-of-turn id."""
    start_id, end_id = tok.special_ids[START], tok.special_ids[END]
    header = [start_id, *tok.encode("assistant\n")]
    user_head = [start_id, *tok.encode("user\n")]

    def next_token(ctx: tuple[int, ...]) -> int | None:
        i = last_header(ctx, header)
        if i is None:
            return None
        for j in range(i - 1, -1, -1):
            if list(ctx[j:j + len(user_head)]) == user_head:
                break
        user = tok.decode([t for t in ctx[j + len(user_head):i] if t < 256])
        return spell(tok.encode(reply(user)), list(ctx[i + len(header):]), end_id)

    return next_token


def last_header(ctx: Sequence[int], header: Sequence[int]) -> int | None:
    """Where the last assistant header starts in ``ctx`` (None: there is none)."""
    for i in range(len(ctx) - len(header), -1, -1):
        if list(ctx[i:i + len(header)]) == list(header):
            return i
    return None


def spell(target: list[int], done: list[int], end_id: int) -> int:
    """The next id of ``target`` after ``done`` (the end of turn once it is spelt, or
    once the reply went elsewhere)."""
    if done == target[:len(done)] and len(done) < len(target):
        return target[len(done)]
    return end_id


def scripted_engine() -> tuple[Engine, ChatTemplate]:
    """A fake-runner engine whose model answers with :func:`scripted_reply`."""
    tok = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
    end_id = tok.special_ids[END]
    next_token = scripted_next_token(tok, scripted_reply)
    engine, _ = make_engine(page_size=8, num_pages=1024, vocab_size=tok.vocab_size,
                            eos_token_ids=(end_id,), next_token=next_token, tokenizer=tok)
    return engine, ChatTemplate(tok, render=chatml)


def scripted_dialogue(template: ChatTemplate, **options: object
                      ) -> Callable[[LLMBackend], Dialogue]:
    """Builds the conversation (on the engine thread) over the scripted engine."""
    base: dict[str, object] = {"system_prompt": "Be brief.", "max_new_tokens": 400,
                               "clauses": ClauseRule(min_chars=6)}
    opts = DialogueOptions(**{**base, **options})  # type: ignore[arg-type]
    return lambda backend: Dialogue(backend, template, opts)


def voice(ms: int, *, amplitude: float = 0.3) -> npt.NDArray[np.float32]:
    """A harmonic, amplitude-modulated tone: loud and voiced (low spectral flatness)."""
    t = np.arange(RATE * ms // 1000) / RATE
    sig = sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 8))
    env = 0.75 + 0.25 * np.sin(2 * np.pi * 4 * t)
    return (amplitude * sig * env / 2.0).astype(np.float32)


def silence(ms: int) -> npt.NDArray[np.float32]:
    return np.zeros(RATE * ms // 1000, np.float32)
