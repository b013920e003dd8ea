"""Table-driven tests of the turn manager: events in, actions out, no models."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assistant.turns.actions import (
    BargeIn,
    CancelResponse,
    CancelSpeculation,
    DiscardUtterance,
    FinalizeUtterance,
    RequestInterim,
    RequestPartial,
    StartResponse,
    StartSpeculation,
    StateChanged,
    TurnAction,
)
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
    TextTurn,
    TurnInput,
    VoiceFrame,
)
from assistant.turns.interruption import InterruptionOptions
from assistant.turns.options import TurnOptions
from assistant.turns.turn_manager import TurnManager, join_text

L, U, T, S = State.LISTENING, State.USER_SPEAKING, State.THINKING, State.SPEAKING

Step = tuple[TurnInput, list[TurnAction], State]


def sc(t: int, old: State, new: State) -> StateChanged:
    return StateChanged(t_ms=t, old=old, new=new)


# Speech over the reply in these tables comes ~200 ms after its audio began; they are about
# barge-ins, so the rule that such speech goes on with the user's turn is off
# (continue_within_ms=0; see test_turn_continuation.py).
def run_table(steps: Sequence[Step], options: TurnOptions | None = None) -> TurnManager:
    tm = TurnManager(options or TurnOptions(barge_in_min_ms=200, continue_within_ms=0, speculate=True))
    for i, (event, expected, state) in enumerate(steps):
        got = tm.handle(event)
        assert got == expected, f"step {i}: {event}"
        assert tm.state is state, f"step {i}: {event}"
    return tm


# A user turn that ends with a reply being prepared (turn 1, no speculation).
ASK: list[Step] = [
    (SpeechStarted(100), [sc(100, L, U)], U),
    (EndOfTurn(1700, speech_end_ms=1150), [FinalizeUtterance(), sc(1700, U, T)], T),
    (FinalTranscript(1750, "what time is it"),
     [StartResponse(1, "what time is it", None, 1150)], T),
]
# ... and its reply starts playing.
ASK_AND_SPEAK: list[Step] = [*ASK, (AudioStarted(1800, 1), [sc(1800, T, S)], S)]


def test_one_question_one_answer() -> None:
    tm = run_table([*ASK_AND_SPEAK, (PlaybackDone(4000, 1), [sc(4000, S, L)], L)])
    assert tm.active_turn_id is None


def test_speculation_at_short_pause_is_handed_to_the_response() -> None:
    run_table([
        (SpeechStarted(100), [sc(100, L, U)], U),
        (PartialTranscript(500, "what is"), [], U),  # not paused: display only
        (ShortPause(900), [RequestPartial()], U),
        (ShortPause(950), [], U),  # already paused
        (PartialTranscript(1000, "what is"), [StartSpeculation(1, "what is")], U),
        (PartialTranscript(1050, "what is"), [], U),  # same text: keep it
        (SpeechResumed(1100), [], U),
        (PartialTranscript(1300, "what is the"), [], U),  # talking again
        (ShortPause(1600), [RequestPartial()], U),
        (PartialTranscript(1650, "what is the time"),
         [CancelSpeculation(1, missed=True), StartSpeculation(2, "what is the time")], U),
        (EndOfTurn(2000, speech_end_ms=1400), [FinalizeUtterance(), sc(2000, U, T)], T),
        (FinalTranscript(2050, "What is the time?"),
         [StartResponse(1, "What is the time?", 2, 1400)], T),
    ])


def test_speculation_off_requests_nothing() -> None:
    run_table([
        (SpeechStarted(0), [sc(0, L, U)], U),
        (ShortPause(500), [], U),
        (PartialTranscript(600, "hello"), [], U),
        (EndOfTurn(900, 350), [FinalizeUtterance(), sc(900, U, T)], T),
        (FinalTranscript(950, "hello"), [StartResponse(1, "hello", None, 350)], T),
    ], TurnOptions(speculate=False))


def test_blank_partial_does_not_speculate() -> None:
    run_table([
        (SpeechStarted(0), [sc(0, L, U)], U),
        (ShortPause(500), [RequestPartial()], U),
        (PartialTranscript(600, "  "), [], U),
    ])


def test_empty_final_returns_the_floor_and_cancels_speculation() -> None:
    run_table([
        (SpeechStarted(0), [sc(0, L, U)], U),
        (ShortPause(500), [RequestPartial()], U),
        (PartialTranscript(600, "uh"), [StartSpeculation(1, "uh")], U),
        (EndOfTurn(900, 350), [FinalizeUtterance(), sc(900, U, T)], T),
        (FinalTranscript(950, ""), [CancelSpeculation(1), sc(950, T, L)], L),
    ])


def test_cough_during_reply_does_not_interrupt() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 20), [], S),
        (VoiceFrame(2020, True, 20), [], S),
        (VoiceFrame(2040, False, 20), [], S),  # unvoiced frames do not count
        # 160 ms >= min_words_ms, and 40 ms unvoiced: the burst ended; its words are
        # asked for (a cough has none).
        (VoiceFrame(2060, False, 20), [RequestInterim()], S),
        (VoiceFrame(2080, False, 20), [], S),  # asked once
        (InterimTranscript(2090, ""), [], S),
        (EndOfTurn(2600, 2060), [DiscardUtterance()], S),
        (VoiceFrame(2620, True, 20), [], S),  # no candidate: ignored
        (PlaybackDone(4000, 1), [sc(4000, S, L)], L),
    ])


def test_barge_in_after_minimum_voiced_speech() -> None:
    tm = run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 20), [], S),
        (VoiceFrame(2020, True, 20), [], S),
        (VoiceFrame(2040, True, 20), [], S),
        (VoiceFrame(2060, True, 20), [BargeIn(1, 2080), sc(2080, S, U)], U),
        (VoiceFrame(2080, True, 20), [], U),
        # Late reports from the interrupted reply are stale.
        (AudioStarted(2100, 1), [], U),
        (PlaybackDone(2100, 1), [], U),
        (EndOfTurn(3000, 2450), [FinalizeUtterance(), sc(3000, U, T)], T),
        (FinalTranscript(3050, "stop"), [StartResponse(2, "stop", None, 2450)], T),
    ])
    assert tm.active_turn_id == 2


def test_onset_alone_can_reach_the_barge_in_threshold() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=250), [BargeIn(1, 2000), sc(2000, S, U)], U),
    ])


def test_short_pause_resets_a_candidate() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 60), [], S),
        # The burst's words are asked for at its pause: the pause's transcript, decoded
        # from the pause's onset (no speculation while the assistant speaks).
        (ShortPause(2300), [RequestPartial()], S),
        # 60 < 200 since the reset; the next ask is 200 ms of speech later (380 ms).
        (SpeechResumed(2400), [], S),
        (VoiceFrame(2400, True, 60), [], S),
        (VoiceFrame(2460, True, 60), [], S),
        (VoiceFrame(2520, True, 60), [], S),
        (VoiceFrame(2580, True, 60), [BargeIn(1, 2640), sc(2640, S, U)], U),
    ])


def test_words_of_short_bursts_interrupt() -> None:
    # "Stop, please." in a noisy room: bursts, each under barge_in_min_ms. The first
    # one's words come with its pause's transcript (decoded from the pause's onset)...
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (ShortPause(2200), [RequestPartial()], S),  # 120 ms: one short burst does not count
        # Counted in its pause: that pause is the user's turn's own (its words asked
        # for again, for the turn: the worker has them).
        (PartialTranscript(2210, "Stop,"), [BargeIn(1, 2210), sc(2210, S, U),
                                            RequestPartial()], U),
    ])
    # ... and more speech has its words asked for interim_every_ms (here 100) of speech
    # after the last ask.
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (ShortPause(2200), [RequestPartial()], S),  # next ask at 220 ms of speech
        (PartialTranscript(2210, "Stop, pl", word_p=0.05), [], S),  # a guess
        (SpeechResumed(2300), [], S),
        (VoiceFrame(2300, True, 60), [], S),  # 180
        (VoiceFrame(2360, True, 60), [RequestInterim()], S),  # 240 >= 220
        (InterimTranscript(2450, "Stop, ple"), [BargeIn(1, 2450), sc(2450, S, U)], U),
    ], TurnOptions(barge_in_min_ms=200, continue_within_ms=0, speculate=True,
                   interruption=InterruptionOptions(mode="immediate", interim_every_ms=100)))
    # A cough's bursts have no words: nothing happens.
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (ShortPause(2200), [RequestPartial()], S),  # next ask at 320
        (PartialTranscript(2210, ""), [], S),
        (VoiceFrame(2300, True, 100), [], S),  # 220
        (ShortPause(2400), [RequestPartial()], S),  # next ask at 420
        (PartialTranscript(2410, ""), [], S),
        (VoiceFrame(2500, True, 100), [], S),  # 320
        (ShortPause(2700), [RequestPartial()], S),
        (PartialTranscript(2710, ""), [], S),
        (EndOfTurn(3000, speech_end_ms=2600), [DiscardUtterance()], S),
    ])
    # A backchannel's words do not interrupt either.
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (ShortPause(2200), [RequestPartial()], S),
        (PartialTranscript(2210, "Mm-hmm."), [], S),
    ])


def test_words_of_one_short_burst_interrupt_as_it_ends() -> None:
    # A crisp "Stop!" (180 ms voiced, under barge_in_min_ms): its words are asked for
    # 40 ms after it, not at the short pause 200 ms later; they interrupt.
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(2000, voiced_ms=120), [], S),
        (VoiceFrame(2000, True, 60), [], S),  # 180 ms, going on: nothing to ask yet
        (VoiceFrame(2060, False, 20), [], S),
        (VoiceFrame(2080, False, 20), [RequestInterim()], S),
        (InterimTranscript(2100, "Stop!"), [BargeIn(1, 2100), sc(2100, S, U)], U),
    ])
    # Under min_words_ms (a click), or with the option off, nothing is decoded for the
    # burst alone; its pause's transcript is asked for, decoded since the pause's onset.
    for voiced, options in ((140, None), (180, TurnOptions(
            barge_in_min_ms=200, interruption=InterruptionOptions(min_words_ms=400)))):
        run_table([
            *ASK_AND_SPEAK,
            (SpeechStarted(2000, voiced_ms=voiced), [], S),
            (VoiceFrame(2000, False, 20), [], S),
            (VoiceFrame(2020, False, 20), [], S),
            (ShortPause(2200), [RequestPartial()], S),
        ], options)


def test_speech_while_thinking_reopens_the_user_turn() -> None:
    run_table([
        *ASK,
        (SpeechStarted(1800, voiced_ms=200), [CancelResponse(1, 1800), sc(1800, T, U)], U),
        # The old reply's reports are stale now.
        (AudioStarted(1850, 1), [], U),
        (ShortPause(2500), [RequestPartial()], U),
        (PartialTranscript(2550, "in Paris"),
         [StartSpeculation(1, "what time is it in Paris")], U),
        (EndOfTurn(3000, 2400), [FinalizeUtterance(), sc(3000, U, T)], T),
        (FinalTranscript(3050, "in Paris?"),
         [StartResponse(2, "what time is it in Paris?", 1, 2400)], T),
    ])


def test_speech_before_the_final_transcript_joins_the_turn() -> None:
    run_table([
        (SpeechStarted(100), [sc(100, L, U)], U),
        (EndOfTurn(1700, 1150), [FinalizeUtterance(), sc(1700, U, T)], T),
        (SpeechStarted(1720, voiced_ms=220), [sc(1720, T, U)], U),
        (FinalTranscript(1750, "what time"), [], U),
        (EndOfTurn(3000, 2450), [FinalizeUtterance(), sc(3000, U, T)], T),
        (FinalTranscript(3050, "is it"), [StartResponse(1, "what time is it", None, 2450)], T),
    ])


def test_cough_while_thinking_is_discarded_and_reply_goes_on() -> None:
    run_table([
        *ASK,
        (SpeechStarted(1800, voiced_ms=120), [], T),
        (EndOfTurn(2400, 1900), [DiscardUtterance()], T),
        (AudioStarted(2500, 1), [sc(2500, T, S)], S),
    ])


def test_user_already_talking_when_reply_ends_gets_the_floor() -> None:
    run_table([
        *ASK_AND_SPEAK,
        (SpeechStarted(3900, voiced_ms=120), [], S),
        (PlaybackDone(4000, 1), [sc(4000, S, U)], U),
        (EndOfTurn(4800, 4250), [FinalizeUtterance(), sc(4800, U, T)], T),
    ])


def test_empty_final_while_user_talks_again_keeps_the_floor_with_the_user() -> None:
    run_table([
        (SpeechStarted(100), [sc(100, L, U)], U),
        (EndOfTurn(1700, 1150), [FinalizeUtterance(), sc(1700, U, T)], T),
        (SpeechStarted(1720, voiced_ms=120), [], T),
        (FinalTranscript(1750, ""), [sc(1750, T, U)], U),
    ])


def test_reply_without_audio_returns_to_listening() -> None:
    run_table([*ASK, (PlaybackDone(1900, 1), [sc(1900, T, L)], L)])


def test_stray_reports_are_ignored_when_listening() -> None:
    run_table([
        (VoiceFrame(0, True, 20), [], L),
        (ShortPause(10), [], L),
        (SpeechResumed(20), [], L),
        (EndOfTurn(30, 0), [], L),
        (PartialTranscript(40, "x"), [], L),
        (FinalTranscript(50, "x"), [], L),
        (AudioStarted(60, 7), [], L),
        (PlaybackDone(70, 7), [], L),
    ])


def test_join_text() -> None:
    assert join_text(" a ", "b ") == "a b"
    assert join_text("", " b") == "b"
    assert join_text("a", "") == "a"


# ------------------------------------------------------------------ property test

_events = st.one_of(
    st.builds(SpeechStarted, st.integers(0, 10_000), st.integers(0, 400)),
    st.builds(VoiceFrame, st.integers(0, 10_000), st.booleans(), st.sampled_from([10, 20, 30])),
    st.builds(ShortPause, st.integers(0, 10_000)),
    st.builds(SpeechResumed, st.integers(0, 10_000)),
    st.builds(EndOfTurn, st.integers(0, 10_000), st.integers(0, 10_000)),
    st.builds(PartialTranscript, st.integers(0, 10_000), st.sampled_from(["", "a", "a b"])),
    st.builds(FinalTranscript, st.integers(0, 10_000), st.sampled_from(["", "a", "a b"])),
    st.builds(AudioStarted, st.integers(0, 10_000), st.integers(1, 4)),
    st.builds(PlaybackDone, st.integers(0, 10_000), st.integers(1, 4)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_events, max_size=60))
def test_invariants_hold_for_any_event_order(events: list[TurnInput]) -> None:
    tm = TurnManager(TurnOptions(barge_in_min_ms=200, continue_within_ms=0))
    live_specs: set[int] = set()
    seen_specs: set[int] = set()
    seen_turns: list[int] = []
    for ev in events:
        before = tm.state
        active_before = tm.active_turn_id
        actions = tm.handle(ev)
        state = before
        for a in actions:
            if isinstance(a, StateChanged):
                assert a.old is state and a.new is not a.old
                state = a.new
            elif isinstance(a, StartSpeculation):
                assert a.spec_id not in seen_specs
                seen_specs.add(a.spec_id)
                live_specs.add(a.spec_id)
            elif isinstance(a, CancelSpeculation):
                assert a.spec_id in live_specs
                live_specs.discard(a.spec_id)
            elif isinstance(a, StartResponse):
                assert a.user_text
                assert not seen_turns or a.turn_id > seen_turns[-1]
                seen_turns.append(a.turn_id)
                if a.spec_id is not None:
                    assert a.spec_id in live_specs
                    live_specs.discard(a.spec_id)
            elif isinstance(a, BargeIn):
                assert before is State.SPEAKING and a.turn_id == active_before
            elif isinstance(a, CancelResponse):
                assert before is State.THINKING and a.turn_id == active_before
        assert state is tm.state
        # A reply is in flight exactly when the assistant is speaking, or thinking
        # after the final transcript.
        if tm.state is State.SPEAKING:
            assert tm.active_turn_id is not None
        if tm.state in (State.LISTENING, State.USER_SPEAKING):
            assert tm.active_turn_id is None
        # At most one speculation is live for the open turn.
        assert len(live_specs) <= 1
        assert tm.speculation_id in (live_specs | {None})


@pytest.mark.parametrize("min_ms", [0, 100, 300])
def test_barge_in_threshold_is_configurable(min_ms: int) -> None:
    tm = TurnManager(TurnOptions(barge_in_min_ms=min_ms))
    for ev, _, _ in ASK_AND_SPEAK:
        tm.handle(ev)
    tm.handle(SpeechStarted(2000, voiced_ms=0))
    voiced = 0
    t = 2000
    while tm.state is State.SPEAKING:
        tm.handle(VoiceFrame(t, True, 20))
        voiced += 20
        t += 20
        assert voiced <= max(min_ms, 20)
    assert voiced >= min_ms


# ---------------------------------------------------------------- API inputs


def test_a_text_turn_is_answered_only_while_listening() -> None:
    tm = run_table([
        (TextTurn(10, "  hello there "), [sc(10, L, T), StartResponse(1, "hello there", None, 10)],
         T),
        (TextTurn(20, "another"), [], T),  # a reply is in flight: refused
        (AudioStarted(30, 1), [sc(30, T, S)], S),
        (PlaybackDone(900, 1), [sc(900, S, L)], L),
        (TextTurn(950, "   "), [], L),  # nothing to answer
        (SpeechStarted(1000), [sc(1000, L, U)], U),
        (TextTurn(1010, "while talking"), [], U),  # the user holds the floor
    ])
    assert tm.next_turn_id == 2


@pytest.mark.parametrize(("before", "state"), [
    ([], T),  # nothing played yet: cut to no words
    ([(AudioStarted(1900, 1), [sc(1900, T, S)], S)], S),
])
def test_an_interrupt_cuts_the_reply_in_flight_and_gives_the_floor_back(
        before: list[Step], state: State) -> None:
    run_table([
        *ASK, *before,
        (Interrupt(2000, 2, "cancelled"), [], state),  # not the reply in flight: ignored
        (Interrupt(2000, 1, "client_cancelled"),
         [BargeIn(1, 2000, reason="client_cancelled"), sc(2000, state, L)], L),
        (Interrupt(2010, 1), [], L),  # idempotent
        (PlaybackDone(2100, 1), [], L),  # late report of the cut reply: stale
    ])


def test_an_interrupt_while_the_user_talks_over_the_reply_hands_them_the_turn() -> None:
    run_table([
        *ASK,
        (AudioStarted(1900, 1), [sc(1900, T, S)], S),
        (SpeechStarted(2000, voiced_ms=60), [], S),  # a candidate, not yet a barge-in
        (Interrupt(2050, 1), [BargeIn(1, 2050, reason="cancelled"), sc(2050, S, U)], U),
    ])
