"""Tentative interruptions: is speech over the reply a real interruption or not?

When the user speaks over the reply long enough to count (``barge_in_min_ms``), the
``tentative`` mode pauses playback at once but does not cut the reply: a listener's
"mm-hmm", "right", a cough or a door slam should not cost the rest of the answer. The
decision comes from what is known a few hundred milliseconds later -- how long the
speech lasted, whether it stopped, and what was said -- as a pure function,
:func:`decide`:

- words that are not all backchannels ("stop", "wait, what about...") -> **commit**:
  the cut becomes final, exactly as an immediate barge-in (truncate to the heard words);
  one such word heard while the speech goes on and unsure (``interim_word_min_p``:
  "Hmm." heard "done.") is not known yet;
- speech still going after ``max_backchannel_ms`` -> **commit**: a listener's
  acknowledgement is short, a turn is not, whatever the words;
- speech that stopped and is only backchannels or no words at all (a cough, a click;
  a few words ASR only guessed at, see :func:`guessed`, count as none; a word that asks
  for the floor -- "stop", "wait", "no", :data:`INTERRUPT_WORDS` -- is trusted at a lower
  probability than others) -> **resume**:
  playback continues from the start of the interrupted word, with no new generation
  and no re-synthesis, and the history never shows the pause (words decoded while the
  speech went on count as all of it only if they are whole backchannel phrases: "okay
  I" of "Okay, I see." and no words yet wait for the transcript of the pause);
- otherwise **wait** (the words are not known yet).

Words that are a run of the reply's own, just played, through a speaker the microphone
is known to hear (:func:`echoes`: echo cancellation leaves a residual, and Whisper turns
it into the reply's words -- "but also") count as no words too. A transcript made only of
words that ask for the floor is trusted even so: "stop" is the user's, whatever the
reply said.

Backchannel lists: what listeners say without taking the floor (Ward & Tsukahara,
"Prosodic features which cue back-channel responses in English and Japanese", 2000;
the words Pipecat's and LiveKit's interruption filters key on). ``immediate`` mode is
the old rule: any speech that counts cuts the reply for good.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "InterruptionMode",
    "InterruptionOptions",
    "InterruptionFacts",
    "Decision",
    "decide",
    "backchannel_only",
    "guessed",
    "echoes",
    "BACKCHANNELS",
    "INTERRUPT_WORDS",
    "INTERRUPT_PHRASES",
]

InterruptionMode = Literal["immediate", "tentative"]

BACKCHANNELS: tuple[str, ...] = (
    "mm-hmm", "mm hmm", "mm", "uh-huh", "uh huh", "uh-uh", "yeah", "yes", "yep", "yup",
    "right", "okay", "ok", "sure", "i see", "uh", "um", "oh", "ah", "aha", "wow", "cool",
    "got it", "alright", "all right", "nice", "true", "exactly", "indeed", "go on",
)
"""Phrases a listener says without taking the floor (lower case, no punctuation). Any
word that is a hum counts as "mm": m's and h's, after at most one "e" or "u", in parts
joined by hyphens -- Whisper's spellings of one ("mmm", "hmm", "mhm", "mm-hm", "umm", and
"Emm..." for part of Piper's "Mm-hmm.")."""

INTERRUPT_WORDS: tuple[str, ...] = (
    "stop", "wait", "no", "nope", "nah", "hold", "hang", "actually", "sorry", "excuse",
    "pardon", "hey", "but", "quiet", "shh",
)
"""Words that ask for the floor. Whisper hears them at a quarter of a second of speech
as often as it hears anything, but unsure of itself: "Stop." at word probability
0.10-0.42, "Wait." 0.21-0.53, "No." 0.19-0.72 (Piper and espeak-ng, quiet and in room
noise; ``bench/bench_asr.py --bursts``). One of them is a guess only under
``interrupt_word_min_p``, lower than other words' ``min_word_p``. The bar comes from
``bench/bench_interrupt_words.py``: 1,760 interim decodes of 30 backchannels and real
interruptions (Piper at three rates, four espeak-ng voices, quiet and in -40 dBFS
noise; coughs and clicks) 200-400 ms in. At 0.15 the real ones cut at an interim by
300 ms went from 240 to 289 of 588, and no backchannel or noise cut that did not
before; at 0.10 (295), in a run with the speech 5 dB quieter, Piper's "Oh." in noise
came out "No." at 0.11-0.13. "Mm-hmm." came out "enough" at 0.07-0.09, so that word is
not one."""
INTERRUPT_PHRASES: tuple[str, ...] = ("hold on", "hang on")
"""Phrases that ask for the floor, trusted lower still (``interrupt_phrase_min_p``):
Whisper can write "Hold on." word for word and still be unsure of each word, under the
bar of a single interrupt word, while no backchannel or noise in
``bench/bench_interrupt_words.py`` was heard as either phrase."""
_HUM = re.compile(r"^[eu]?[mh]+(?:-[mh]+)*$")


@dataclass(frozen=True)
class InterruptionOptions:
    mode: InterruptionMode = "tentative"
    backchannels: tuple[str, ...] = BACKCHANNELS
    max_backchannel_ms: int = 1200
    """Speech over the reply lasting this long is a real interruption, whatever it says."""
    max_words: int = 4
    """More words than this is a real interruption, even if each is a backchannel."""
    interim_every_ms: int = 200
    """While a reply is paused, ask ASR for the speech's words at the pause and again
    after each this much more speech (0: wait for the display partials)."""
    min_words_ms: int = 150
    """A burst of speech over the reply this long, too short to pause it ("Stop!" said
    crisply, ~180 ms voiced; "Wait," in a noisy room, ~160 ms), has its words asked for
    as soon as it ends: real words interrupt, a click or a cough has none."""
    min_word_p: float = 0.3
    """A transcript of at most ``max_words`` words whose lowest word probability is under
    this is a guess (:func:`guessed`): Whisper guesses at a fraction of a second of
    audio ("Right" as "Run!") and at hums (Piper's "Mm-hmm" as "in my mom", 0.14 / 0.22
    / 0.53), and a guess must not cut the reply. A guessed interim transcript is passed
    over (more audio comes); a guessed final one counts as a sound."""
    interim_word_min_p: float = 0.5
    """One word decoded while the speech goes on, neither a backchannel nor a word that
    asks for the floor, cuts the reply only from this lowest word probability; under it
    the decision waits for more audio (the next interim, or the transcript of the whole
    speech once it stops). The reply is paused meanwhile, so waiting costs little, and a
    cut that was wrong costs the rest of the reply: such words ("Hmm." heard "done.",
    "Oh." heard "So...") were most of the backchannels' false stops in
    ``bench/bench_interrupt_words.py`` (its results: ``interrupt-words.md``); a real
    interruption first heard as one unsure word ("What?") is cut at a later interim."""
    interrupt_words: tuple[str, ...] = INTERRUPT_WORDS
    interrupt_word_min_p: float = 0.15
    """A transcript with one of ``interrupt_words`` is a guess only under this lowest
    word probability (``min_word_p`` for other words)."""
    interrupt_phrases: tuple[str, ...] = INTERRUPT_PHRASES
    interrupt_phrase_min_p: float = 0.05
    """A transcript with one of ``interrupt_phrases`` is a guess only under this."""

    echo_window_ms: int = 3000
    """:func:`echoes` looks at the reply's words heard in this much of its audio before
    the furthest point heard (the echo's path and ASR's lag, with a margin for a
    speaker later than it reports)."""

    def __post_init__(self) -> None:
        if self.mode not in ("immediate", "tentative"):
            raise ValueError(f"interruption mode must be immediate or tentative, got {self.mode!r}")
        if self.max_backchannel_ms <= 0 or self.max_words <= 0:
            raise ValueError("max_backchannel_ms and max_words must be positive")
        if self.interim_every_ms < 0 or self.min_words_ms < 0 or self.echo_window_ms < 0:
            raise ValueError("interim_every_ms, min_words_ms and echo_window_ms must be >= 0")
        for name in ("interrupt_word_min_p", "interim_word_min_p", "interrupt_phrase_min_p"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")


@dataclass(frozen=True)
class InterruptionFacts:
    """What is known about the speech over a paused reply."""

    voiced_ms: int
    """Speech heard since it started (voiced frames)."""
    speech_ended: bool
    """The speech stopped (a pause after it, or its end of turn)."""
    text: str | None
    """Its transcript so far; None while none has been decoded."""
    word_p: float = 1.0
    """The lowest probability ASR gave a word of ``text``."""
    text_current: bool = True
    """``text`` was decoded once the speech had stopped, so it holds all of it. False: it
    was decoded while the speech went on, and its last words may be the start of a
    phrase ("Okay, I" of "Okay, I see") even though the speech has stopped since."""
    echo: bool = False
    """``text`` is the reply's own words heard back (:func:`echoes`): no words."""


class Decision(enum.Enum):
    WAIT = "wait"
    RESUME = "resume"
    COMMIT = "commit"


_SOUND_EVENT = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*")
"""How Whisper writes a non-speech sound: "[cough]", "(coughing)", "*sigh*"."""


def _words(text: str) -> list[str]:
    """The words of ``text``, lower case, sound events left out; a hum is "mm", and a run
    of hums is one (Whisper loops on a hum: "MM MM MM MM MM MM" for Piper's "Mm-hmm.")."""
    text = _SOUND_EVENT.sub(" ", text.lower())
    out: list[str] = []
    for word in re.sub(r"[^\w'\- ]+", " ", text).split():
        word = "mm" if _HUM.match(word) else word
        if not (word == "mm" and out and out[-1] == "mm"):
            out.append(word)
    return out


def backchannel_only(text: str, options: InterruptionOptions, *,
                     in_progress: bool = False) -> bool:
    """Whether ``text`` is empty, a sound event or only backchannel phrases (at most
    ``max_words`` words). ``in_progress``: the speech goes on, so its last words may be
    the start of a phrase ("Okay, I" of "Okay, I see")."""
    words = _words(text)
    if len(words) > options.max_words:
        return False
    phrases = sorted({tuple(_words(p)) for p in options.backchannels}, key=len, reverse=True)
    i = 0
    while i < len(words):
        for phrase in phrases:
            if phrase and tuple(words[i:i + len(phrase)]) == phrase:
                i += len(phrase)
                break
        else:
            rest = tuple(words[i:])
            return in_progress and any(len(p) > len(rest) and p[:len(rest)] == rest
                                       for p in phrases)
    return True


def guessed(text: str, word_p: float, options: InterruptionOptions) -> bool:
    """Whether ``text`` (lowest word probability ``word_p``) is words ASR only guessed
    at: a few words heard with little confidence. More words than a backchannel has are
    speech, however unclear (quiet "Stop, please. That is enough." through echo
    cancellation: "stop" 0.16-0.39). With a word that asks for the floor (``"Stop."``)
    the bar is ``interrupt_word_min_p``; with a phrase that does ("Hold on.")
    ``interrupt_phrase_min_p``."""
    words = _words(text)
    if len(words) > options.max_words:
        return False
    if _has_phrase(words, options.interrupt_phrases):
        floor = options.interrupt_phrase_min_p
    elif any(_asks_for_floor(words, options)):
        floor = options.interrupt_word_min_p
    else:
        floor = options.min_word_p
    return word_p < floor


def _has_phrase(words: list[str], phrases: Sequence[str]) -> bool:
    """Whether ``words`` (from `_words`) hold one of ``phrases``, word for word."""
    runs = (_words(phrase) for phrase in phrases)
    return any(run and _has_run(words, run) for run in runs)


def _has_run(words: list[str], run: list[str]) -> bool:
    """Whether ``run`` occurs in ``words``, in order and unbroken."""
    n = len(run)
    return any(words[i:i + n] == run for i in range(len(words) - n + 1))


def _unsure_word(text: str, word_p: float, options: InterruptionOptions) -> bool:
    """Whether ``text``, decoded while the speech goes on, is one word too unsure to cut
    on yet (``interim_word_min_p``): not a backchannel, not a word that asks for the floor."""
    words = _words(text)
    return (len(words) == 1 and word_p < options.interim_word_min_p
            and not _asks_for_floor(words, options)[0]
            and not backchannel_only(text, options, in_progress=True))


def _asks_for_floor(words: list[str], options: InterruptionOptions) -> list[bool]:
    """For each of ``words`` (from `_words`): is it one of ``interrupt_words``?"""
    asks = {w.lower().strip("'-") for w in options.interrupt_words}  # as the config has them
    return [w.strip("'-") in asks for w in words]


def echoes(text: str, played: Sequence[str], options: InterruptionOptions) -> bool:
    """Whether ``text``, heard over the reply, could be the reply's own voice: it has
    words, they are a run of ``played`` (the reply's words heard lately, through a
    speaker the microphone hears) in the same order, and not only words that ask for
    the floor. A user who says the reply's last words back goes on talking or is heard
    as a backchannel."""
    words = _words(text)
    if not words or all(_asks_for_floor(words, options)):
        return False
    return _has_run(_words(" ".join(played)), words)


def decide(facts: InterruptionFacts, options: InterruptionOptions) -> Decision:
    """The rule of the module docstring (pure; table-tested)."""
    text = facts.text
    in_progress = not (facts.speech_ended and facts.text_current)
    if text is not None and (facts.echo or guessed(text, facts.word_p, options)):
        text = ""  # a sound, not words
    elif text is not None and in_progress and _unsure_word(text, facts.word_p, options):
        text = None  # not known yet: more audio decides
    if text is not None and not backchannel_only(text, options, in_progress=in_progress):
        return Decision.COMMIT
    if facts.voiced_ms >= options.max_backchannel_ms:
        return Decision.COMMIT
    if facts.speech_ended and text is not None and (
            facts.text_current or (text and backchannel_only(text, options))):
        # Decoded before the speech ended, only whole backchannel phrases: no words then
        # were none *yet* ("Hold on." in noise: "" 400 ms in, then the pause heard it).
        return Decision.RESUME
    return Decision.WAIT
