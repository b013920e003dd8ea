"""The user going on with their turn just as the reply begins ("Yes, [400 ms] please"):
the reply is withdrawn and the words join the user's turn (``continue_within_ms``).

Reply 1 starts playing at 1800 ms (``ASK_AND_SPEAK``); the rule looks at when the speech
over it began: its onset, the VAD's confirmation less the voiced audio before it.
"""

from __future__ import annotations

import pytest

from assistant.turns.actions import (
    BargeIn,
    CancelResponse,
    DiscardUtterance,
    FinalizeUtterance,
    PauseReply,
    RequestPartial,
    ResumeReply,
    SetEndOfTurnSilence,
    StartResponse,
    StartSpeculation,
)
from assistant.turns.end_of_turn import EndOfTurnOptions
from assistant.turns.events import (
    AudioStarted,
    EndOfTurn,
    FinalTranscript,
    InterimTranscript,
    PartialTranscript,
    ShortPause,
    SpeechStarted,
    State,
    TextTurn,
    TurnCompleteness,
    VoiceFrame,
)
from assistant.turns.interruption import InterruptionOptions
from assistant.turns.options import TurnOptions
from tests.assistant.test_turn_manager import ASK, ASK_AND_SPEAK, S, T, U, run_table, sc

IMMEDIATE = TurnOptions(barge_in_min_ms=200, continue_within_ms=500,
                        interruption=InterruptionOptions(mode="immediate"))
TENTATIVE = TurnOptions(barge_in_min_ms=200, continue_within_ms=500,
                        interruption=InterruptionOptions(mode="tentative", interim_every_ms=0))


@pytest.mark.parametrize(("confirmed", "continues"), [
    (2000, True),   # began at 1800 (200 ms voiced before the VAD confirmed it): as it began
    (2500, True),   # began at 2300: 500 ms into the reply, the last moment
    (2501, False),  # 501 ms into it: the user may be answering what they heard
])
def test_speech_counted_over_the_reply_s_start_withdraws_it(confirmed: int,
                                                             continues: bool) -> None:
    cut = CancelResponse(1, confirmed) if continues else BargeIn(1, confirmed)
    steps = [
        *ASK_AND_SPEAK,
        (SpeechStarted(confirmed, voiced_ms=200), [cut, sc(confirmed, S, U)], U),
    ]
    tm = run_table([
        *steps,
        (EndOfTurn(3600, speech_end_ms=3000), [FinalizeUtterance(), sc(3600, U, T)], T),
        (FinalTranscript(3650, "in Paris?"),
         # Withdrawn: the words join the turn they went on with; cut: a turn of their own.
         [StartResponse(2, "what time is it in Paris?" if continues else "in Paris?",
                        None, 3000)], T),
    ], IMMEDIATE)
    assert tm.active_turn_id == 2


@pytest.mark.parametrize(("onset", "continues"), [(2100, True), (2301, False), (None, False)])
def test_the_onset_the_echo_gate_hid_is_where_the_speech_began(onset: int | None,
                                                               continues: bool) -> None:
    # The VAD heard it at 2700 (the gate muted it before): its own onset, 2500 ms, reads
    # as 700 ms into the reply; the listener found the muted sound before was the user's.
    cut = CancelResponse(1, 2700) if continues else BargeIn(1, 2700)
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2700, voiced_ms=200, onset_ms=onset), [cut, sc(2700, S, U)], U),
    ], IMMEDIATE)


def test_speech_begun_while_thinking_and_counted_as_the_audio_starts_continues() -> None:
    run_table([
        *ASK,
        (SpeechStarted(1780, voiced_ms=100), [], T),  # not enough yet
        (AudioStarted(1800, 1), [sc(1800, T, S)], S),
        (VoiceFrame(1780, True, 100), [CancelResponse(1, 1880), sc(1880, S, U)], U),
    ], IMMEDIATE)


def test_a_tentative_pause_s_commit_withdraws_the_reply_when_the_user_went_on() -> None:
    # Piper's "Yes, [400 ms] please." in noise: the end of turn came at "Yes."; "please"
    # paused the reply as it began, its words commit the cut: the reply is withdrawn.
    tm = run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 80), [PauseReply(1, 2080)], S),
        (InterimTranscript(2200, "please"), [CancelResponse(1, 2200), sc(2200, S, U)], U),
        (EndOfTurn(2900, speech_end_ms=2350), [FinalizeUtterance(), sc(2900, U, T)], T),
        (FinalTranscript(2950, "please."),
         [StartResponse(2, "what time is it please.", None, 2350)], T),
    ], TENTATIVE)
    assert tm.paused_turn_id is None


def test_a_tentative_pause_decided_on_the_final_transcript_withdraws_too() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 80), [PauseReply(1, 2080)], S),
        (EndOfTurn(2700, speech_end_ms=2150), [FinalizeUtterance()], S),
        (FinalTranscript(2800, "in Paris."),
         [CancelResponse(1, 2800), sc(2800, S, T),
          StartResponse(2, "what time is it in Paris.", None, 2150)], T),
    ], TENTATIVE)


def test_a_backchannel_as_the_reply_begins_still_resumes_it() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 80), [PauseReply(1, 2080)], S),
        (EndOfTurn(2600, speech_end_ms=2100), [FinalizeUtterance()], S),
        (FinalTranscript(2650, "Mm-hmm."), [ResumeReply(1, 2650, "Mm-hmm.")], S),
    ], TENTATIVE)


def test_a_late_tentative_cut_is_a_barge_in() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2600, voiced_ms=120), [], S),  # began at 2480: 680 ms in
        (VoiceFrame(2600, True, 80), [PauseReply(1, 2680)], S),
        (InterimTranscript(2800, "stop"), [BargeIn(1, 2680, paused=True), sc(2800, S, U)], U),
    ], TENTATIVE)


def test_a_reply_to_a_text_turn_has_no_turn_to_go_on_with() -> None:
    run_table([
        (TextTurn(1000, "set a timer"), [sc(1000, State.LISTENING, T),
                                         StartResponse(1, "set a timer", None, 1000)], T),
        (AudioStarted(1200, 1), [sc(1200, T, S)], S),
        (SpeechStarted(1400, voiced_ms=200), [BargeIn(1, 1400), sc(1400, S, U)], U),
    ], IMMEDIATE)


def test_off_speech_over_the_reply_s_start_is_a_barge_in() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=200), [BargeIn(1, 2000), sc(2000, S, U)], U),
    ], TurnOptions(barge_in_min_ms=200, continue_within_ms=0,
                   interruption=InterruptionOptions(mode="immediate")))


def test_speech_that_never_counts_is_discarded_as_ever() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(1900, voiced_ms=60), [], S),  # a cough
        (ShortPause(2100), [RequestPartial()], S),
        (EndOfTurn(2500, speech_end_ms=1960), [DiscardUtterance()], S),
    ], IMMEDIATE)


def test_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="continue_within_ms"):
        TurnOptions(continue_within_ms=-1)


SEMANTIC_TENTATIVE = TurnOptions(
    barge_in_min_ms=200, continue_within_ms=500, end_of_turn=EndOfTurnOptions(mode="semantic"),
    interruption=InterruptionOptions(mode="tentative", interim_every_ms=0))
PLEASE_IN_ITS_PAUSE = [
    # "please", under barge_in_min_ms of voice, counts by its pause's words: the reply
    # is withdrawn, the turn reopened, and that pause is the turn's (speculated on).
    *ASK_AND_SPEAK,
    (SpeechStarted(1940, voiced_ms=120), [], S),
    (ShortPause(2140), [RequestPartial()], S),
    (PartialTranscript(2150, "please"),
     [PauseReply(1, 2150), CancelResponse(1, 2150), sc(2150, S, U), RequestPartial(),
      SetEndOfTurnSilence(550, None)], U),
    (PartialTranscript(2160, "please"), [StartSpeculation(1, "what time is it please")], U),
]


def test_going_on_counted_by_its_pause_s_words_times_the_turn_s_end_from_that_pause() -> None:
    # The bench's case: "please" (under barge_in_min_ms of voice in noise) counts by the
    # words of its pause's transcript. The reply is withdrawn and that pause is the
    # user's turn's own: its words (joined) are speculated on and its end is timed --
    # before, nothing timed it and the VAD's longest limit (2 s) ended the turn.
    run_table([
        *PLEASE_IN_ITS_PAUSE,
        (EndOfTurn(2700, speech_end_ms=2140), [FinalizeUtterance(), sc(2700, U, T)], T),
        (FinalTranscript(2750, "please"),
         [StartResponse(2, "what time is it please", 1, 2140)], T),
    ], SEMANTIC_TENTATIVE)


def test_a_joined_turn_ends_by_its_scores_not_the_floor_hold() -> None:
    # A turn that took the floor by a barge-in ends by the fixed silence at the least
    # ("Wait," is seldom all); a joined one goes on with a turn that ended by its scores,
    # and ends so again: "Yes. Please" scored complete waits 250 ms, not 550.
    run_table([
        *PLEASE_IN_ITS_PAUSE,
        (TurnCompleteness(2200, 1, 0.4), [SetEndOfTurnSilence(250, 0.4)], U),
    ], SEMANTIC_TENTATIVE)
