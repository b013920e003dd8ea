"""When has the user finished? The end-of-turn decision, as a pure function.

A fixed silence rule (``vad.end_of_turn_ms``) cannot tell a thinking pause ("how much
there might be ... prudently in his power") from the end of a question. The semantic
rule asks our own language model: at a short pause the speculative fork already holds
the conversation and the user's words, so the probability that the user's sentence ends
right there -- the next token a sentence end (``.``, ``?``, ``!``) or the end of the
message -- comes at no extra prefill (:meth:`assistant.dialogue.dialogue.Dialogue.speculate`).
The text is scored *without* its trailing punctuation: ASR punctuation at a pause is a
guess, the model's own is the signal (as LiveKit's turn detector also drops it).

Measured on SmolLM2-135M-Instruct (our default model), P(sentence ends) after complete
sentences is 0.5-0.93, after short requests 0.009-0.4 ("Name a big animal" 0.009,
"Thanks" 0.03, "Hello" 0.16) and after cut ones 0.0001-0.03 ("I was wondering how much
there might be" 0.003, "What I really want to know is" 0.028), so the silence required
falls from ``max_silence_ms`` at ``p_incomplete`` (0.003) to ``min_silence_ms`` at
``p_complete`` (0.1), linearly in log-probability between: a short request waits
longer than a long sentence, a cut one longest (bench/bench_turns.py).

A short request (at most ``short_words`` words, 3) is held to a lower bar,
``p_complete_short`` (0.03), tuned on half of bench/bench_turns.py's set (its even-numbered
entries) as the lowest bar that cut off no more cut sentences there: lower ones (0.01, or
4 words) cut off "Turn the" heard as "turn the light" (0.0095) and "Set a timer for" heard
as "Shoutout timer for 12" (0.056). The gain is small: the long waits of short requests
on that set are mostly the audio model's veto (below) and scores under 0.01.

One mark of the ASR's is taken: a transcript that *trails off* -- Whisper ends it with
an ellipsis, a comma or a dash ("What I really want to know is...") -- waits
``max_silence_ms`` whatever the score. Whisper writes that mark where the speech stops
mid-phrase: on bench/bench_turns.py's speech (Piper at two rates, in -35 dBFS noise, and
espeak-ng; the 10 s window) 7 of 32 cut sentences ended so and 0 of 80 complete ones,
and "What I really want to know is" scored 0.029 (721 ms: cut off at a 900 ms pause).

A second, audio signal may veto a short wait: Smart Turn v3 (`audio.smart_turn`), asked
at the same pause, hears whether the speech *sounds* finished. When it calls the turn
unfinished (P(complete) < 0.5) the turn ends after ``audio_wait_ms`` at the least --
``audio_wait_short_ms`` for a short request the text model is sure of ("Yes, please",
"What time is it?"), long enough to outlast the inner pause of "Five, [pause] five"
(tuned as the bar above; a wait shorter than that pause cut such requests off). The
text model alone misses pauses inside a sentence whose words could end one ("My sister
and I were thinking about" 0.09), and there the audio model is often sure (0.02). On
bench/bench_turns.py's set, with the pause opened inside the sentence spoken whole (as a
speaker pausing mid-thought keeps the sentence's pitch), the text score alone cut off 27
of 96 pauses, the audio model alone (pipecat's rule) 45, the two together 3. The cost: a
finished sentence that the audio model misjudges waits ``audio_wait_ms`` (on the set's
synthetic voices, 8 of 32; on the bundled demo conversation, in Piper's voice, it calls
every pause inside a turn unfinished and every turn's end finished; on recordings of
people: docs/benchmarks.md, "Real human speech").

The audio model also caps a long wait, where it is sure (P >= ``audio_sure_p``, 0.9)
that the turn is complete: at most ``audio_sure_ms`` (800). The text model scores what
Whisper heard, and a misheard short request reads as a cut one ("Name a big animal" as
"Name a Beginimal", P 0.005: 1360 ms; "Tell me a joke" as "Tell me that Joe": 1300 ms).
Not for a score at or under ``p_incomplete`` or a transcript that trails off. The text
score cannot tell a misheard request from a sentence cut by a pause ("Turn the" heard as
"turn the light"), so the cap cuts some of those off; the user's going on repairs them
(``turns.continue_within_ms``: the reply is withdrawn and the sentence answered whole).
What it gains and costs on bench/bench_turns.py's set: docs/benchmarks.md, "End of turn".

Before the score is known (or when there is none: nothing transcribed, speculation
off) the ``fallback_ms`` rule applies.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["EndOfTurnOptions", "EndOfTurnMode", "endpoint_silence_ms", "is_end_of_turn",
           "AUDIO_COMPLETE_P",
           "scoring_text", "trails_off", "EAGERNESS"]

EndOfTurnMode = Literal["fixed", "semantic"]

AUDIO_COMPLETE_P = 0.5
"""The audio model's P(complete) below which it calls the turn unfinished."""


@dataclass(frozen=True)
class EndOfTurnOptions:
    """Mapped from ``config.yaml``'s ``vad:`` section (``end_of_turn`` and ``semantic_*``)."""

    mode: EndOfTurnMode = "semantic"
    fallback_ms: int = 550
    """Silence that ends a turn in ``fixed`` mode, and in ``semantic`` mode when there is
    no score (yet)."""
    min_silence_ms: int = 250
    """Silence that ends a turn the model is sure is complete."""
    max_silence_ms: int = 1600
    """Silence that ends a turn the model is sure is not complete (the user may simply
    have stopped mid-sentence)."""
    p_complete: float = 0.1
    """P(sentence ends) at or above which ``min_silence_ms`` applies."""
    p_incomplete: float = 0.003
    """P(sentence ends) at or below which ``max_silence_ms`` applies."""
    audio_wait_ms: int = 0
    """The least silence that ends a turn the audio model calls unfinished; 0: no audio
    model (``vad.smart_turn``)."""
    audio_wait_short_ms: int = 0
    """That least silence for a short request whose text score is at or above its bar
    (``p_complete_short``); 0: ``audio_wait_ms`` (never more than it)."""
    short_words: int = 3
    """A transcript of at most this many words is a short request (0: none is)."""
    p_complete_short: float = 0.03
    """``p_complete`` for a short request: the model is least sure that a short request
    is complete ("Thanks" 0.03, "Two plus two" 0.018)."""
    audio_sure_ms: int = 0
    """The most silence a turn waits when the audio model is sure it is complete (P at or
    above ``audio_sure_p``), the text score is over ``p_incomplete`` and the transcript
    does not trail off; 0: no such cap."""
    audio_sure_p: float = 0.9
    """The audio model's P(complete) from which ``audio_sure_ms`` caps the wait."""

    def __post_init__(self) -> None:
        if self.mode not in ("fixed", "semantic"):
            raise ValueError(f"end_of_turn must be 'fixed' or 'semantic', got {self.mode!r}")
        if not 0 < self.min_silence_ms <= self.max_silence_ms:
            raise ValueError(f"need 0 < min_silence_ms ({self.min_silence_ms}) <= "
                             f"max_silence_ms ({self.max_silence_ms})")
        if self.fallback_ms <= 0:
            raise ValueError(f"fallback_ms must be positive, got {self.fallback_ms}")
        if self.audio_wait_ms < 0:
            raise ValueError(f"audio_wait_ms must be >= 0, got {self.audio_wait_ms}")
        if self.audio_wait_short_ms < 0:
            raise ValueError(
                f"audio_wait_short_ms must be >= 0, got {self.audio_wait_short_ms}")
        if not 0.0 < self.p_incomplete < self.p_complete < 1.0:
            raise ValueError(f"need 0 < p_incomplete ({self.p_incomplete}) < p_complete "
                             f"({self.p_complete}) < 1")
        if self.short_words < 0:
            raise ValueError(f"short_words must be >= 0, got {self.short_words}")
        if not 0.0 < self.p_complete_short < 1.0:
            raise ValueError(f"need 0 < p_complete_short ({self.p_complete_short}) < 1")
        if self.audio_sure_ms < 0:
            raise ValueError(f"audio_sure_ms must be >= 0, got {self.audio_sure_ms}")
        if not AUDIO_COMPLETE_P <= self.audio_sure_p < 1.0:
            raise ValueError(f"need {AUDIO_COMPLETE_P} <= audio_sure_p ({self.audio_sure_p}) < 1")

    def p_complete_for(self, text: str) -> float:
        """The ``p_complete`` that applies to ``text``: ``p_complete_short`` for a short
        request (never above ``p_complete``, and only while above ``p_incomplete``);
        ``p_complete`` when the text is not known ("")."""
        if self.is_short(text) and self.p_incomplete < self.p_complete_short:
            return min(self.p_complete_short, self.p_complete)
        return self.p_complete

    def audio_wait_for(self, text: str, p_end: float | None) -> int:
        """The least silence when the audio model calls ``text`` unfinished: shorter
        (``audio_wait_short_ms``) for a short request scored at or above its bar that
        does not trail off."""
        sure = (self.audio_wait_short_ms > 0 and self.is_short(text) and p_end is not None
                and not math.isnan(p_end) and not trails_off(text)
                and p_end >= self.p_complete_for(text))
        return min(self.audio_wait_short_ms, self.audio_wait_ms) if sure else self.audio_wait_ms

    def is_short(self, text: str) -> bool:
        """Whether `text` is a short request: 1 to ``short_words`` words."""
        return 0 < len(scoring_text(text).split()) <= self.short_words

    @property
    def longest_ms(self) -> int:
        """The longest silence any rule may wait (the VAD's own end-of-turn limit)."""
        return self.fallback_ms if self.mode == "fixed" else max(
            self.max_silence_ms, self.fallback_ms, self.audio_wait_ms)

    @property
    def semantic(self) -> bool:
        """Whether the model's scores set the silence (else the fixed fallback)."""
        return self.mode == "semantic"

    @property
    def uses_audio(self) -> bool:
        """Whether the audio model is asked at each pause."""
        return self.semantic and self.audio_wait_ms > 0


EAGERNESS: dict[str, tuple[int, int]] = {
    "high": (200, 800),
    "medium": (250, 1600),
    "auto": (250, 1600),
    "low": (400, 3000),
}
"""The Realtime API's ``semantic_vad`` eagerness -> (min_silence_ms, max_silence_ms)."""


def endpoint_silence_ms(p_end: float | None, options: EndOfTurnOptions, text: str = "",
                        p_audio: float | None = None) -> int:
    """The silence after which the turn ends, given P(the user's sentence ends here), the
    transcript it was asked on (see :func:`trails_off`) and the audio model's
    P(the turn is complete) (None: not known)."""
    o = options
    if o.mode == "fixed":
        return o.fallback_ms
    silence = _text_silence_ms(p_end, o, text)
    if not o.uses_audio or p_audio is None or math.isnan(p_audio):
        return silence
    if p_audio < AUDIO_COMPLETE_P:
        return max(silence, o.audio_wait_for(text, p_end))
    if (o.audio_sure_ms and p_audio >= o.audio_sure_p and p_end is not None
            and p_end > o.p_incomplete and not trails_off(text)):
        return min(silence, o.audio_sure_ms)
    return silence


def _text_silence_ms(p_end: float | None, o: EndOfTurnOptions, text: str) -> int:
    if p_end is None or math.isnan(p_end):
        return o.fallback_ms
    if trails_off(text):
        return o.max_silence_ms
    p_complete = o.p_complete_for(text)
    if p_end >= p_complete:
        return o.min_silence_ms
    if p_end <= o.p_incomplete:
        return o.max_silence_ms
    where = ((math.log(p_end) - math.log(o.p_incomplete))
             / (math.log(p_complete) - math.log(o.p_incomplete)))
    return round(o.max_silence_ms - where * (o.max_silence_ms - o.min_silence_ms))


def is_end_of_turn(silence_ms: int, p_end: float | None, options: EndOfTurnOptions) -> bool:
    """Whether ``silence_ms`` of silence ends the user's turn."""
    return silence_ms >= endpoint_silence_ms(p_end, options)


_TRAILING = re.compile(r"[\s.?!,;:\u2026\u2014-]+$")
_TRAILS_OFF = re.compile(r"(\.\.\.|\u2026|,|-|\u2013|\u2014)[\s\"')\u201d\u2019]*$")


def trails_off(text: str) -> bool:
    """Whether the ASR ended ``text`` as speech that stops mid-phrase: an ellipsis, a
    comma or a dash."""
    return _TRAILS_OFF.search(text) is not None


def scoring_text(text: str) -> str:
    """``text`` without trailing punctuation (what the end-of-turn score is asked on)."""
    return _TRAILING.sub("", text.strip())
