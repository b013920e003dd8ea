"""The speech gate, table-tested: speech over a reply reaches the client only once it
is the user's turn (released in order, with its own start), and never if it was a
backchannel or a cough."""

from __future__ import annotations

import pytest

from assistant.loop import event_log as L
from assistant.loop.speech_gate import SpeechGate

START = L.SpeechStartedEntry(1000)
PAUSED = L.InterruptionPausedEntry(1200, 3, 4000, 0)
PARTIAL = L.TranscriptPartialEntry(1500, "Mm-hmm.")
ENDED = L.SpeechStoppedEntry(1900, 1400)
DISCARDED = L.SpeechStoppedEntry(1900, 1400, discarded=True)
FINAL = L.TranscriptFinalEntry(2100, "Mm-hmm.")
RESUMED = L.InterruptionResumedEntry(1600, 3, 400, 3900, "Mm-hmm.")
COMMITTED = L.InterruptionCommittedEntry(1600, 3, 400)
BARGE_IN = L.BargeInEntry(1200, 3, 4000)
USER_SPEAKING = L.StateEntry(1600, "user_speaking")
THINKING = L.StateEntry(2100, "thinking")
LATER = L.SpeechStartedEntry(5000)
CLOSED = L.ResponseDoneEntry(2200, 3, "Once upon a", 9, True, 1600)
WITHDRAWN = L.ResponseWithdrawnEntry(2200, 3)
STARTED = L.ResponseStartedEntry(2300, 4, "Stop, please.", 60, 8, 52, "none")

# (entry, over_reply, what passes, holding after)
Step = tuple[L.Entry, bool, list[L.Entry], bool]

CASES: dict[str, list[Step]] = {
    "a backchannel resumed on its words, its utterance then discarded": [
        (START, True, [], True), (PAUSED, False, [PAUSED], True),
        (PARTIAL, False, [PARTIAL], True), (RESUMED, False, [RESUMED], True),
        (DISCARDED, False, [], False), (LATER, False, [LATER], False)],
    "a backchannel resumed at its end of turn (discarded first)": [
        (START, True, [], True), (PAUSED, False, [PAUSED], True),
        (DISCARDED, False, [], False), (RESUMED, False, [RESUMED], False)],
    "a backchannel resumed on its final transcript": [
        (START, True, [], True), (PAUSED, False, [PAUSED], True), (ENDED, False, [], True),
        (FINAL, False, [], True), (RESUMED, False, [RESUMED], False),
        (LATER, False, [LATER], False)],
    "real words commit: the speech's start first": [
        (START, True, [], True), (PAUSED, False, [PAUSED], True),
        (COMMITTED, False, [START, COMMITTED], False), (BARGE_IN, False, [BARGE_IN], False),
        (USER_SPEAKING, False, [USER_SPEAKING], False)],
    "words decided on the final transcript: the cut reply closes before the user's item": [
        (START, True, [], True), (PAUSED, False, [PAUSED], True), (ENDED, False, [], True),
        (FINAL, False, [], True), (COMMITTED, False, [START, COMMITTED], False),
        (BARGE_IN, False, [BARGE_IN], False), (THINKING, False, [THINKING], False),
        (CLOSED, False, [CLOSED, ENDED, FINAL], False), (STARTED, False, [STARTED], False)],
    "more speech after the paused-over speech ended": [
        (START, True, [], True), (PAUSED, False, [PAUSED], True), (ENDED, False, [], True),
        (LATER, False, [], True), (COMMITTED, False, [START, COMMITTED], False),
        (FINAL, False, [], False), (WITHDRAWN, False, [WITHDRAWN, ENDED, LATER, FINAL], False)],
    "speech while thinking that takes the floor (the reply is withdrawn)": [
        (START, True, [], True), (USER_SPEAKING, False, [START, USER_SPEAKING], False)],
    "a cough over the reply that never counts": [
        (START, True, [], True), (DISCARDED, False, [], False)],
    "an earlier utterance's transcript is not held": [
        (START, True, [], True), (FINAL, False, [FINAL], True), (DISCARDED, False, [], False)],
    "speech with nobody else holding the floor passes at once": [
        (START, False, [START], False), (ENDED, False, [ENDED], False),
        (FINAL, False, [FINAL], False)],
}


@pytest.mark.parametrize("name", list(CASES))
def test_speech_over_the_reply_is_held_until_decided(name: str) -> None:
    gate = SpeechGate()
    for i, (entry, over_reply, passed, holding) in enumerate(CASES[name]):
        assert gate.feed(entry, over_reply=over_reply) == passed, (name, i, entry)
        assert gate.holding is holding, (name, i, entry)
