"""Speech over the reply, as the turn manager follows it: how long it has gone on, and
when its words are due to be asked for.

A :class:`Candidate` is speech heard while the assistant holds the floor that has not
counted yet (under ``barge_in_min_ms``); a :class:`PausedReply` is a reply paused by
speech over it (tentative interruptions) whose cut is not decided yet. Both ask ASR for
the speech's words on a cadence of speech time (:class:`Span`), not of wall time: a
pause in the speech adds nothing to decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from assistant.turns.interruption import InterruptionFacts

__all__ = ["BURST_END_MS", "Span", "Candidate", "PausedReply"]

BURST_END_MS = 40
"""Unvoiced this long after voiced frames, a burst of speech has ended (for asking its
words; the VAD's short pause, which decides more, comes later)."""


@dataclass
class Span:
    """How long speech has been going on: its voiced frames and the unvoiced ones
    between them (a consonant, a dip under the room noise), not those in its pauses nor
    the trailing ones before a pause is detected."""

    ms: int = 0
    _gap: int = 0

    def add(self, duration_ms: int, voiced: bool, *, in_pause: bool) -> None:
        if voiced:
            self.ms += duration_ms + (0 if in_pause else self._gap)
            self._gap = 0
        elif not in_pause:
            self._gap += duration_ms

    def pause(self) -> None:
        self._gap = 0

    @property
    def gap_ms(self) -> int:
        """Unvoiced time since the last voiced frame (outside pauses)."""
        return self._gap


@dataclass
class Candidate:
    """Speech heard while the assistant holds the floor, not yet an interruption."""

    voiced_ms: int
    """Continuous voiced speech: a short pause resets it."""
    onset_ms: int = 0
    """When the speech began (the VAD's confirmation less what it heard before it)."""
    heard: Span = field(default_factory=Span)
    echo_free: bool = False
    """Heard with the echo gate stood down: not the reply's echo (see `SpeechStarted`)."""
    in_pause: bool = False
    bursts: int = 1
    interim_at_ms: int = 0
    """``heard.ms`` at which its words are next asked for (0: not yet set)."""
    text: str | None = None
    """Its latest interim transcript."""

    def burst_ended(self, voiced: bool) -> bool:
        """After a frame (``voiced`` or not): has the burst of speech just ended?"""
        return not voiced and (self.in_pause or self.heard.gap_ms >= BURST_END_MS)

    def pause_words_asked(self, every_ms: int) -> None:
        """Its words up to a pause were asked for (the pause's transcript, decoded from
        the pause's onset): the next ask is ``every_ms`` more speech away."""
        self.interim_at_ms = self.heard.ms + every_ms

    def words_due(self, *, ended: bool, min_words_ms: int, barge_in_min_ms: int,
                  every_ms: int) -> bool:
        """Whether to ask for its words now (and if so, when next: ``every_ms`` more
        speech). A burst of ``min_words_ms`` is asked about as it ends (a crisp "Stop!");
        bursts, each under ``barge_in_min_ms`` ("Stop, please." in a noisy room as two
        ~150 ms bursts), once they add up to it. One continuous burst still going on is
        never asked about: ``barge_in_min_ms`` decides it."""
        if every_ms <= 0:
            return False
        if ended:
            floor = min_words_ms
        elif self.bursts >= 2 or self.in_pause:
            floor = barge_in_min_ms
        else:
            return False
        if self.heard.ms < max(self.interim_at_ms, floor):
            return False
        self.interim_at_ms = self.heard.ms + every_ms
        return True


@dataclass
class PausedReply:
    """A reply paused by speech over it; whether the cut stands is not decided yet."""

    turn_id: int
    t_ms: int
    """When it paused."""
    voiced_ms: int
    onset_ms: int = 0
    """When the speech over it began (see :class:`Candidate`)."""
    speech_ended: bool = False
    text: str | None = None
    word_p: float = 1.0
    text_current: bool = False
    """``text`` was decoded after the speech stopped (see :class:`InterruptionFacts`)."""
    echo: bool = False
    """``text`` is the reply's own words heard back (see :class:`InterruptionFacts`)."""
    finalized: bool = False
    """The VAD ended the speech and its final transcript is pending."""
    speech_end_ms: int = 0
    speech: Span = field(default_factory=Span)
    """How long the speech has been going on since the reply paused."""
    interim_at_ms: int = 0
    """``speech.ms`` at which to ask for the next interim transcript."""

    def take_words(self, text: str, word_p: float, *, current: bool,
                   echo: bool = False) -> None:
        """A transcript of the speech: its words, lowest word probability, whether it
        holds all of the speech (``text_current``), and whether it is the reply's echo."""
        self.text, self.word_p, self.text_current, self.echo = text, word_p, current, echo

    def facts(self) -> InterruptionFacts:
        return InterruptionFacts(self.voiced_ms, self.speech_ended, self.text, self.word_p,
                                 self.text_current, self.echo)

    def words_due(self, every_ms: int) -> bool:
        """Whether to ask for the speech's words now: at the pause and every
        ``every_ms`` of speech after it (a guess is passed over: the next decode has
        more audio), until the speech ends (its words are asked for then, and its final
        decides)."""
        if (every_ms <= 0 or self.finalized or self.speech_ended
                or self.speech.ms < self.interim_at_ms):
            return False
        self.interim_at_ms = self.speech.ms + every_ms
        return True
