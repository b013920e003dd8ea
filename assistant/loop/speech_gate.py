"""Speech over a reply, kept out of the public output until it is the user's turn.

A client of the conversation (a Realtime client, say) stops its playback on "speech
started" and truncates the reply, so telling it about speech that turns out to be a
backchannel or a cough would make a resume impossible. With tentative interruptions the
public stream (:mod:`assistant.loop.output`) therefore holds back the input events of
speech that starts while the assistant holds the floor (thinking or speaking), until the
turn manager has decided:

- the speech is the user's turn (the pause commits -- ``interruption_committed`` --, or
  the user takes the floor: state ``user_speaking``): the held entries are released, in
  order, just before the entry that decided it, so ``speech_started`` keeps the time the
  speech really began. If the speech had already ended (a pause decided on the final
  transcript), its end and transcript follow only once the cut reply is closed
  (``response_done`` / ``response_withdrawn``): the client sees the response end before
  the user's item is committed, as after an immediate barge-in;
- it is not (its utterance is discarded, or a reply paused on its final transcript
  resumes): the held entries are dropped, and the client never hears of it.

A reply that resumes while the speech's utterance is still open stays held: the
utterance ends discarded, or (more speech) counts afresh.

Pure: pipeline event-log entries in, the entries to publish out, in order.
"""

from __future__ import annotations

from assistant.loop import event_log as L

__all__ = ["SpeechGate"]


class SpeechGate:
    """See the module docstring."""

    def __init__(self) -> None:
        self._held: list[L.Entry] | None = None
        self._after_cut: list[L.Entry] = []
        """The decided speech's end (and what followed), until the cut reply closes."""

    @property
    def holding(self) -> bool:
        """Speech over the reply is undecided (its entries are held)."""
        return self._held is not None

    def feed(self, entry: L.Entry, *, over_reply: bool = False) -> list[L.Entry]:
        """The entries to act on now, in order. ``over_reply``: for a speech start,
        whether it is speech over a reply whose interruption would be tentative."""
        if self._after_cut:
            if isinstance(entry, _INPUT):
                self._after_cut.append(entry)
                return []
            if isinstance(entry, _CLOSED):
                out, self._after_cut = [entry, *self._after_cut], []
                return out
            return [entry]
        held = self._held
        if held is None:
            if isinstance(entry, L.SpeechStartedEntry) and over_reply:
                self._held = [entry]
                return []
            return [entry]
        if isinstance(entry, L.SpeechStartedEntry):
            held.append(entry)
            return []
        if isinstance(entry, L.SpeechStoppedEntry):
            if entry.discarded:  # the speech never counted
                self._held = None
                return []
            held.append(entry)  # ended; its final transcript decides
            return []
        if isinstance(entry, L.TranscriptFinalEntry) and self._awaits_transcript(held):
            held.append(entry)
            return []
        if isinstance(entry, L.InterruptionResumedEntry):
            if self._ended(held):  # resumed on the final transcript: the speech is over
                self._held = None
            return [entry]
        if isinstance(entry, L.InterruptionCommittedEntry) or (
                isinstance(entry, L.StateEntry) and entry.state == "user_speaking"):
            self._held = None
            end = len(held)
            if isinstance(entry, L.InterruptionCommittedEntry):  # a reply is being cut
                end = next((i for i, e in enumerate(held)
                            if isinstance(e, L.SpeechStoppedEntry)), end)
            self._after_cut = held[end:]
            return [*held[:end], entry]
        return [entry]

    @staticmethod
    def _ended(held: list[L.Entry]) -> bool:
        return any(isinstance(e, L.SpeechStoppedEntry) for e in held)

    @staticmethod
    def _awaits_transcript(held: list[L.Entry]) -> bool:
        """A held utterance ended and its final transcript has not come yet (an earlier
        utterance's transcript passes: it was already the user's)."""
        ended = sum(isinstance(e, L.SpeechStoppedEntry) for e in held)
        return ended > sum(isinstance(e, L.TranscriptFinalEntry) for e in held)


_INPUT = (L.SpeechStartedEntry, L.SpeechStoppedEntry, L.TranscriptFinalEntry)
"""The entries that make the user's side of the conversation."""
_CLOSED = (L.ResponseDoneEntry, L.ResponseWithdrawnEntry)
"""A reply closed (after a cut: the one cut)."""
