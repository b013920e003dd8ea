"""Tentative interruptions in the turn manager: pause, then commit or resume."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from assistant.turns.actions import (
    BargeIn,
    DiscardUtterance,
    FinalizeUtterance,
    PauseReply,
    RequestInterim,
    RequestPartial,
    ResumeReply,
    SetEndOfTurnSilence,
    StartResponse,
    StartSpeculation,
    StateChanged,
)
from assistant.turns.end_of_turn import EndOfTurnOptions
from assistant.turns.events import (
    AudioStarted,
    EndOfTurn,
    FinalTranscript,
    InterimTranscript,
    Interrupt,
    PartialTranscript,
    PlaybackDone,
    ShortPause,
    SpeechResumed,
    SpeechStarted,
    State,
    TurnCompleteness,
    TurnInput,
    VoiceFrame,
)
from assistant.turns.interruption import InterruptionOptions
from assistant.turns.options import TurnOptions
from assistant.turns.turn_manager import TurnManager
from tests.assistant.test_turn_manager import ASK, ASK_AND_SPEAK, S, Step, T, U, run_table, sc

# Speech over the reply in these tables comes ~200 ms after its audio began; they are about
# barge-ins, so the rule that such speech goes on with the user's turn is off
# (continue_within_ms=0; see test_turn_continuation.py).
# The decisions, with interim transcripts left to the display partials (see
# test_interim_transcripts_are_asked_for_at_the_pause_and_as_the_speech_goes_on).
TENTATIVE = TurnOptions(barge_in_min_ms=200, continue_within_ms=0, speculate=True,
                        interruption=InterruptionOptions(mode="tentative", interim_every_ms=0))
# Speech over reply 1 that counts: the reply pauses (no cut yet), the assistant keeps the floor.
PAUSED: list[Step] = [
    *ASK_AND_SPEAK,
    (SpeechStarted(2000, voiced_ms=120), [], S),
    (VoiceFrame(2000, True, 40), [], S),
    (VoiceFrame(2040, True, 40), [PauseReply(1, 2080)], S),
]


def test_a_backchannel_resumes_the_reply_and_is_discarded() -> None:
    tm = run_table([
        *PAUSED,
        (VoiceFrame(2080, True, 100), [], S),
        (ShortPause(2380), [RequestPartial()], S),
        (PartialTranscript(2450, "Mm-hmm."), [ResumeReply(1, 2450, "Mm-hmm.")], S),
        (EndOfTurn(2730, speech_end_ms=2180), [DiscardUtterance()], S),
        (PlaybackDone(5000, 1), [sc(5000, S, State.LISTENING)], State.LISTENING),
    ], TENTATIVE)
    assert tm.paused_turn_id is None


def test_words_of_the_decided_speech_arriving_after_the_resume_decide_nothing() -> None:
    # Espeak-ng's "Yeah." in real time: the interim "yeah" resumed the reply at the
    # pause; the preview asked for at that pause came back as "here" and, read as the
    # words of new speech over the reply, cut it. New speech must be heard first.
    run_table([
        *PAUSED,
        (InterimTranscript(2150, "yeah", word_p=0.36), [], S),
        (ShortPause(2300), [RequestPartial(), ResumeReply(1, 2300, "yeah")], S),
        (PartialTranscript(2330, "here", word_p=0.48), [], S),
        (InterimTranscript(2340, "here", word_p=0.48), [], S),
        (EndOfTurn(2600, speech_end_ms=2100), [DiscardUtterance()], S),
    ], TENTATIVE)


def test_words_decoded_while_the_speech_went_on_wait_for_the_pause_s_transcript() -> None:
    # Piper's "Okay, I see." in room noise: the last interim it trusted was "okay I."
    # (the later "Okay, I see." at 0.28 was a guess). At the pause that prefix was taken
    # for all that was said -- "I" is no backchannel -- and cut the reply; the pause's own
    # transcript, "Okay, I see." at 0.42, came a moment later. It decides now.
    run_table([
        *PAUSED,
        (InterimTranscript(2150, "okay I.", word_p=0.31), [], S),
        (InterimTranscript(2250, "Okay, I see.", word_p=0.28), [], S),
        (ShortPause(2380), [RequestPartial()], S),
        (PartialTranscript(2380, "Okay, I see.", word_p=0.42),
         [ResumeReply(1, 2380, "Okay, I see.")], S),
        (EndOfTurn(2700, speech_end_ms=2180), [DiscardUtterance()], S),
    ], TENTATIVE)


def test_no_words_yet_is_not_a_sound_until_the_pause_s_transcript_says_so() -> None:
    # Piper's "Hold on." in room noise: the interims 80 and 280 ms in heard nothing; the
    # reply resumed at the pause on that, and the pause's "Hold on." came a moment later.
    run_table([
        *PAUSED,
        (InterimTranscript(2100, ""), [], S),
        (InterimTranscript(2300, ""), [], S),
        (ShortPause(2500), [RequestPartial()], S),
        (PartialTranscript(2500, "Hold on.", word_p=0.84),
         [BargeIn(1, 2080, paused=True), sc(2500, S, U), RequestPartial()], U),
    ], TENTATIVE)


def test_a_guess_of_the_pause_s_transcript_is_a_sound() -> None:
    # Piper's "Uh-huh.": nothing heard while it went on, "Oh." at 0.2 at its pause. That
    # transcript had all of the speech: a guess there is a sound, as in a final, and the
    # reply resumes at the pause (not 1.4 s later, at the final).
    to_pause: list[Step] = [
        *PAUSED,
        (InterimTranscript(2100, ""), [], S),
        (ShortPause(2400), [RequestPartial()], S),
    ]
    run_table([
        *to_pause,
        (PartialTranscript(2400, "Oh.", word_p=0.2), [ResumeReply(1, 2400, "Oh.")], S),
        (EndOfTurn(2700, speech_end_ms=2200), [DiscardUtterance()], S),
    ], TENTATIVE)
    # A confident "Stop." there cuts, as before.
    run_table([
        *to_pause,
        (PartialTranscript(2400, "Stop.", word_p=0.7),
         [BargeIn(1, 2080, paused=True), sc(2400, S, U), RequestPartial()], U),
    ], TENTATIVE)


def test_the_reply_s_own_words_heard_back_are_a_sound() -> None:
    # Echo cancellation's residual: Whisper heard the reply's "but also" over it. The
    # shell marks such words ``echo``; they decide nothing while the speech goes on,
    # and at the pause or in the final they resume the reply as a cough would.
    run_table([
        *PAUSED,
        (InterimTranscript(2100, "But also", word_p=0.6, echo=True), [], S),
        (ShortPause(2400), [RequestPartial()], S),
        (PartialTranscript(2400, "But also.", word_p=0.6, echo=True),
         [ResumeReply(1, 2400, "But also.")], S),
        (EndOfTurn(2700, speech_end_ms=2200), [DiscardUtterance()], S),
    ], TENTATIVE)
    run_table([
        *PAUSED,
        (EndOfTurn(2700, speech_end_ms=2150), [FinalizeUtterance()], S),
        (FinalTranscript(2800, "But also.", echo=True), [ResumeReply(1, 2800, "But also.")], S),
    ], TENTATIVE)
    # The same words not heard back cut the reply ("but" asks for the floor).
    run_table([
        *PAUSED,
        (InterimTranscript(2100, "But also", word_p=0.6),
         [BargeIn(1, 2080, paused=True), sc(2100, S, U)], U),
    ], TENTATIVE)
    # Over a reply not paused yet, echo words do not make the speech count either
    # (other words do, however short the speech).
    onset: list[Step] = [*ASK_AND_SPEAK, (SpeechStarted(2000, voiced_ms=40), [], S)]
    run_table([
        *onset,
        (InterimTranscript(2050, "But also", word_p=0.6, echo=True), [], S),
    ], TENTATIVE)
    run_table([
        *onset,
        (InterimTranscript(2050, "But also", word_p=0.6),
         [PauseReply(1, 2050), BargeIn(1, 2050, paused=True), sc(2050, S, U)], U),
    ], TENTATIVE)


def test_interim_transcripts_are_asked_for_at_the_pause_and_as_the_speech_goes_on() -> None:
    options = TurnOptions(barge_in_min_ms=200, continue_within_ms=0, speculate=True,
                          interruption=InterruptionOptions(mode="tentative",
                                                           interim_every_ms=200))
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 40), [], S),
        (VoiceFrame(2040, True, 40), [PauseReply(1, 2080), RequestInterim()], S),
        (VoiceFrame(2080, True, 100), [], S),  # 300 ms voiced: the next one at 400 ms
        (VoiceFrame(2180, True, 100), [RequestInterim()], S),
        (VoiceFrame(2280, True, 20), [], S),
        (ShortPause(2500), [RequestPartial()], S),
        (EndOfTurn(2700, speech_end_ms=2300), [FinalizeUtterance()], S),
        (VoiceFrame(2700, True, 500), [], S),  # finalized: the final transcript decides
        (FinalTranscript(2800, "Hmm."), [ResumeReply(1, 2800, "Hmm.")], S),
    ], options)
    # Words known when the speech counts commit at once: no interim is asked for.
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (InterimTranscript(2030, "Stop"), [PauseReply(1, 2030), BargeIn(1, 2030, paused=True),
                                           sc(2030, S, U)], U),
    ], options)


def test_the_next_interim_is_asked_for_after_speech_time_not_only_voiced_frames() -> None:
    # Speech in room noise: many of its frames are under the noise margin (unvoiced).
    # An interim guess is passed over; the next decode, 200 ms of speech later, decides.
    options = TurnOptions(barge_in_min_ms=200, continue_within_ms=0, speculate=True,
                          interruption=InterruptionOptions(mode="tentative",
                                                           interim_every_ms=200))
    start = [
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 40), [], S),
        (VoiceFrame(2040, True, 40), [PauseReply(1, 2080), RequestInterim()], S),
        (InterimTranscript(2100, "Wait.", word_p=0.05), [], S),  # a guess, even of "wait"
    ]
    run_table([
        *start,
        (VoiceFrame(2080, False, 120), [], S),  # under the noise
        (VoiceFrame(2200, True, 80), [RequestInterim()], S),  # 200 ms of speech
        (InterimTranscript(2300, "Wait, what", word_p=0.6),
         [BargeIn(1, 2080, paused=True), sc(2300, S, U)], U),
    ], options)
    # Unvoiced frames after the last voiced one are not speech (yet): no decode.
    run_table([
        *start,
        (VoiceFrame(2080, True, 20), [], S),
        (VoiceFrame(2100, False, 300), [], S),
    ], options)


def test_an_interim_guess_decides_nothing_and_the_final_transcript_decides() -> None:
    # From a fraction of a second of "Right." Whisper guessed "Run!" (word probability
    # 0.1): no cut; the words heard with confidence resume the reply.
    run_table([
        *PAUSED,
        (InterimTranscript(2100, "Run!", word_p=0.1), [], S),
        (InterimTranscript(2250, "Right.", word_p=0.7), [], S),
        (ShortPause(2400), [RequestPartial(), ResumeReply(1, 2400, "Right.")], S),
    ], TENTATIVE)
    run_table([
        *PAUSED,
        (InterimTranscript(2100, "Run!", word_p=0.1), [], S),
        (EndOfTurn(2700, speech_end_ms=2150), [FinalizeUtterance()], S),
        (FinalTranscript(2800, "Right."), [ResumeReply(1, 2800, "Right.")], S),
    ], TENTATIVE)
    # The same words heard with confidence cut the reply at once.
    run_table([
        *PAUSED,
        (InterimTranscript(2100, "Run!", word_p=0.6),
         [BargeIn(1, 2080, paused=True), sc(2100, S, U)], U),
    ], TENTATIVE)


def test_a_word_that_asks_for_the_floor_counts_at_a_lower_probability() -> None:
    # Piper's "Wait, what about cats?" 250 ms in: "Wait." at 0.24. Other words that
    # unsure are a guess ("Run!" above); "wait" cuts the paused reply at once.
    run_table([
        *PAUSED,
        (InterimTranscript(2100, "Wait.", word_p=0.24),
         [BargeIn(1, 2080, paused=True), sc(2100, S, U)], U),
    ], TENTATIVE)
    run_table([
        *PAUSED,
        (InterimTranscript(2100, "Okay.", word_p=0.24), [], S),
    ], TENTATIVE)
    # The list and the bar are the config's: without "wait" in it, the same is a guess.
    strict = TurnOptions(barge_in_min_ms=200, continue_within_ms=0, speculate=True,
                         interruption=InterruptionOptions(mode="tentative", interim_every_ms=0,
                                                          interrupt_words=("stop",)))
    run_table([*PAUSED, (InterimTranscript(2100, "Wait.", word_p=0.24), [], S)], strict)


def test_a_cough_with_no_words_resumes_after_its_final_transcript() -> None:
    run_table([
        *PAUSED,
        (EndOfTurn(2700, speech_end_ms=2150), [FinalizeUtterance()], S),
        (FinalTranscript(2800, ""), [ResumeReply(1, 2800, "")], S),
        (AudioStarted(2800, 1), [], S),
    ], TENTATIVE)


def test_real_words_commit_the_cut_at_once_and_the_user_goes_on() -> None:
    tm = run_table([
        *PAUSED,
        (VoiceFrame(2080, True, 20), [], S),
        (InterimTranscript(2300, "Stop, I"), [BargeIn(1, 2080, paused=True), sc(2300, S, U)], U),
        (EndOfTurn(3000, speech_end_ms=2500), [FinalizeUtterance(), sc(3000, U, T)], T),
        (FinalTranscript(3100, "Stop, I meant Paris."),
         [StartResponse(2, "Stop, I meant Paris.", None, 2500)], T),
    ], TENTATIVE)
    assert tm.active_turn_id == 2


def test_a_cut_decided_in_the_speech_s_pause_times_the_user_s_turn_from_there() -> None:
    # "Stop, please." over the reply, its words known only at its pause: the cut is
    # committed there and that pause is the user's turn's own: its words are speculated
    # on (the preview asked for again: the worker has it) and its end is timed, by the
    # fixed silence until the score comes (before: the VAD's longest limit, 1.6 s).
    options = TurnOptions(barge_in_min_ms=200, continue_within_ms=0, speculate=True,
                          end_of_turn=EndOfTurnOptions(mode="semantic"),
                          interruption=InterruptionOptions(mode="tentative", interim_every_ms=0))
    tm = run_table([
        *PAUSED,
        (VoiceFrame(2080, True, 500), [], S),
        (ShortPause(2800), [RequestPartial()], S),
        (PartialTranscript(2950, "Stop, please."),
         [BargeIn(1, 2080, paused=True), sc(2950, S, U), RequestPartial(),
          SetEndOfTurnSilence(550, None)], U),
        (PartialTranscript(2960, "Stop, please."), [StartSpeculation(1, "Stop, please.")], U),
        # A turn that took the floor from the reply ends by the fixed silence at the
        # least, however complete it reads ("Wait," is seldom all the user has to say).
        (TurnCompleteness(3000, 1, 0.5), [SetEndOfTurnSilence(550, 0.5)], U),
        (EndOfTurn(3080, speech_end_ms=2600), [FinalizeUtterance(), sc(3080, U, T)], T),
        (FinalTranscript(3090, "Stop, please."),
         [StartResponse(2, "Stop, please.", 1, 2600)], T),
    ], options)
    assert tm.active_turn_id == 2


def test_long_speech_commits_whatever_it_says() -> None:
    run_table([
        *PAUSED,
        (VoiceFrame(2080, True, 700), [], S),
        (VoiceFrame(2780, True, 300), [BargeIn(1, 2080, paused=True), sc(3080, S, U)], U),
    ], TENTATIVE)


def test_speech_that_ended_before_its_words_were_known_is_decided_on_the_final() -> None:
    run_table([
        *PAUSED,
        (EndOfTurn(2700, speech_end_ms=2150), [FinalizeUtterance()], S),
        (FinalTranscript(2800, "Wait."),
         [BargeIn(1, 2080, paused=True), sc(2800, S, T), StartResponse(2, "Wait.", None, 2150)], T),
    ], TENTATIVE)


def test_a_backchannel_known_at_the_end_of_turn_is_discarded_there() -> None:
    run_table([
        *PAUSED,
        (InterimTranscript(2200, "yeah"), [], S),  # still speaking: wait
        (EndOfTurn(2700, speech_end_ms=2150), [DiscardUtterance(), ResumeReply(1, 2700, "yeah")], S),
    ], TENTATIVE)


def test_speech_resuming_after_the_decision_pauses_again() -> None:
    run_table([
        *PAUSED,
        (ShortPause(2300), [RequestPartial()], S),
        (PartialTranscript(2350, "Okay."), [ResumeReply(1, 2350, "Okay.")], S),
        (SpeechResumed(2500), [], S),
        (VoiceFrame(2500, True, 100), [], S),
        (VoiceFrame(2600, True, 100), [PauseReply(1, 2700)], S),
    ], TENTATIVE)


def test_more_speech_after_an_undecided_end_takes_the_floor() -> None:
    tm = run_table([
        *PAUSED,
        (EndOfTurn(2700, speech_end_ms=2150), [FinalizeUtterance()], S),
        (SpeechStarted(2800, voiced_ms=60), [BargeIn(1, 2080, paused=True), sc(2800, S, U)], U),
        (FinalTranscript(2850, "So"), [], U),
        (EndOfTurn(3600, speech_end_ms=3100), [FinalizeUtterance(), sc(3600, U, T)], T),
        (FinalTranscript(3700, "what about Rome?"),
         [StartResponse(2, "So what about Rome?", None, 3100)], T),
    ], TENTATIVE)
    assert tm.active_turn_id == 2


def test_an_interrupt_during_the_pause_commits_with_its_reason() -> None:
    run_table([
        *PAUSED,
        (Interrupt(2200, 1, "client_cancelled"),
         [BargeIn(1, 2080, "client_cancelled", paused=True), sc(2200, S, U)], U),
    ], TENTATIVE)


def test_real_words_over_the_reply_interrupt_however_short_the_speech() -> None:
    # "Stop, please.": two bursts under barge_in_min_ms each; the words decide.
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (ShortPause(2200), [RequestPartial()], S),
        (SpeechResumed(2350), [], S),
        (InterimTranscript(2400, "Stop,", word_p=0.6),
         [PauseReply(1, 2400), BargeIn(1, 2400, paused=True), sc(2400, S, U)], U),
    ], TENTATIVE)
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (InterimTranscript(2050, "Stop,"), [BargeIn(1, 2050), sc(2050, S, U)], U),
    ], TurnOptions(barge_in_min_ms=200, continue_within_ms=0, interruption=InterruptionOptions(mode="immediate")))
    # A backchannel, or words only guessed at, still need the speech to count.
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (InterimTranscript(2050, "Yeah."), [], S),
        (InterimTranscript(2080, "Run!", word_p=0.1), [], S),
        (EndOfTurn(2400, speech_end_ms=2150), [DiscardUtterance()], S),
    ], TENTATIVE)


def test_immediate_mode_cuts_at_once() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 40), [], S),
        (VoiceFrame(2040, True, 40), [BargeIn(1, 2080), sc(2080, S, U)], U),
    ], TurnOptions(barge_in_min_ms=200, continue_within_ms=0, interruption=InterruptionOptions(mode="immediate")))


_events = st.one_of(
    st.builds(SpeechStarted, st.integers(0, 10_000), st.integers(0, 400)),
    st.builds(VoiceFrame, st.integers(0, 10_000), st.booleans(), st.sampled_from([20, 100, 400])),
    st.builds(ShortPause, st.integers(0, 10_000)),
    st.builds(SpeechResumed, st.integers(0, 10_000)),
    st.builds(EndOfTurn, st.integers(0, 10_000), st.integers(0, 10_000)),
    st.builds(PartialTranscript, st.integers(0, 10_000), st.sampled_from(["", "yeah", "stop"])),
    st.builds(InterimTranscript, st.integers(0, 10_000), st.sampled_from(["", "mm-hmm", "wait"]),
              st.sampled_from([0.1, 0.9])),
    st.builds(FinalTranscript, st.integers(0, 10_000), st.sampled_from(["run"]),
              st.sampled_from([0.1, 0.9])),
    st.builds(FinalTranscript, st.integers(0, 10_000), st.sampled_from(["", "okay", "no"])),
    st.builds(AudioStarted, st.integers(0, 10_000), st.integers(1, 4)),
    st.builds(PlaybackDone, st.integers(0, 10_000), st.integers(1, 4)),
    st.builds(Interrupt, st.integers(0, 10_000), st.integers(1, 4)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_events, max_size=60))
def test_a_pause_always_ends_in_exactly_one_resume_or_cut(events: list[TurnInput]) -> None:
    tm = TurnManager(TENTATIVE)
    for ev, _, _ in ASK_AND_SPEAK:
        tm.handle(ev)
    paused: int | None = None
    for ev in events:
        before, active = tm.state, tm.active_turn_id
        for a in tm.handle(ev):
            if isinstance(a, PauseReply):
                # (a pause may be committed by the same input: words known before it)
                assert paused is None and before is S and a.turn_id == active
                paused = a.turn_id
            elif isinstance(a, ResumeReply):
                assert a.turn_id == paused and tm.state is S
                paused = None
            elif isinstance(a, BargeIn):
                assert a.paused == (paused is not None)
                assert paused is None or a.turn_id == paused
                paused = None
            elif isinstance(a, StateChanged):
                assert paused is None  # the floor never moves while a cut is undecided
        assert tm.paused_turn_id == paused
        if paused is not None:
            assert tm.state is S and tm.active_turn_id == paused


def test_speech_that_cannot_be_the_echo_pauses_the_reply_at_its_onset() -> None:
    """With the echo gate stood down (headphones), speech over the reply is the user's:
    the reply pauses when the VAD confirms it, not after barge_in_min_ms of voice. What
    cuts is decided as ever: here a backchannel, and the reply plays on."""
    tm = run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120, echo_free=True), [PauseReply(1, 2000)], S),
        (VoiceFrame(2000, True, 40), [], S),
        (ShortPause(2300), [RequestPartial()], S),
        (PartialTranscript(2350, "Mm-hmm."), [ResumeReply(1, 2350, "Mm-hmm.")], S),
        (EndOfTurn(2600, speech_end_ms=2100), [DiscardUtterance()], S),
    ], TENTATIVE)
    assert tm.paused_turn_id is None


def test_the_onset_pause_is_only_for_a_tentative_reply_that_plays() -> None:
    # Immediate interruptions cut for good: barge_in_min_ms still decides them.
    immediate = TurnOptions(barge_in_min_ms=200, continue_within_ms=0, speculate=True,
                            interruption=InterruptionOptions(mode="immediate"))
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120, echo_free=True), [], S),
        (VoiceFrame(2000, True, 40), [], S),
        (VoiceFrame(2040, True, 40), [BargeIn(1, 2080), sc(2080, S, U)], U),
    ], immediate)
    # A reply not playing yet (thinking) is withdrawn only by speech that counts.
    run_table([
        *ASK,
        (SpeechStarted(1750, voiced_ms=120, echo_free=True), [], T),
    ], TENTATIVE)
