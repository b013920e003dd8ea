"""A paused reply keeps its audio and plays on from the start of the interrupted word."""

from __future__ import annotations

import numpy as np

from assistant.loop.playback import PlaybackController, ReplyPlayback
from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.sinks import NullSink
from audio.word_timing import heard_position, resume_sample
from tests.replay.fakes import ToneSynthesizer

RATE = 16000
WORD = 1600  # ToneSynthesizer(word_ms=100): each word is 100 ms


def _chunk(synth: ToneSynthesizer, text: str, start: int = 0, char_start: int = 0):  # type: ignore[no-untyped-def]
    chunk = synth.synthesize_span(text, turn_id=1, char_start=char_start, start_sample=start)
    assert chunk is not None
    return chunk


def test_resume_sample_is_the_start_of_the_word_in_progress() -> None:
    synth = ToneSynthesizer(word_ms=100)
    chunks = [_chunk(synth, "one two three"), _chunk(synth, " four five", 3 * WORD, 13)]
    assert resume_sample(chunks, 0) == 0
    assert resume_sample(chunks, WORD + 5) == WORD           # inside "two"
    assert resume_sample(chunks, 3 * WORD + 10) == 3 * WORD  # inside "four" (2nd chunk)
    assert resume_sample(chunks, 5 * WORD) == 5 * WORD       # at the end: nothing left


def test_pause_keeps_the_reply_and_resume_plays_the_rest_from_the_word_start() -> None:
    clock = VirtualClock(RATE)
    sink = NullSink(clock, RATE)
    synth = ToneSynthesizer(word_ms=100)
    sink.write(AudioChunk(np.zeros(800, np.float32), RATE))  # earlier audio on the sink
    clock.advance(800)
    pb = ReplyPlayback(turn_id=1, tts_rate=RATE, speech_end_ms=0, endpoint_ms=0)
    pb.write(sink, _chunk(synth, "one two three"), now_ms=50)
    clock.advance(WORD + 800)  # "one" and half of "two" heard
    report = pb.pause(sink, detected_ms=145, now_ms=150)
    assert report.heard_samples == WORD + 800 and report.leaked_ms == 5
    # Audio produced during the pause is kept, not played.
    pb.write(sink, _chunk(synth, " four five", 3 * WORD, 13), now_ms=200)
    clock.advance(RATE)
    assert sink.played_samples == 800 + WORD + 800
    assert not pb.finished(sink) and pb.heard_sink_samples(sink) == WORD + 800
    pb.tts_done = True
    assert not pb.finished(sink)  # paused is never finished
    # Resume: "two" again from its start, then the rest, once.
    assert pb.resume(sink) == WORD
    assert sink.queued_samples == 4 * WORD
    clock.advance(WORD // 2)
    assert pb.heard_sink_samples(sink) == WORD + 800  # the replayed half adds nothing
    clock.advance(WORD)
    assert pb.heard_sink_samples(sink) == 2 * WORD + 800
    assert pb.total_ms(sink) == 500  # the reply's length, not what was played
    clock.advance(3 * WORD)
    assert pb.finished(sink) and pb.heard_sink_samples(sink) == 5 * WORD


def test_a_committed_pause_reports_what_the_pause_heard() -> None:
    clock = VirtualClock(RATE)
    sink = NullSink(clock, RATE)
    synth = ToneSynthesizer(word_ms=100)
    ctl = PlaybackController(sink, RATE)
    ctl.start(1, speech_end_ms=0, endpoint_ms=0)
    chunks = [_chunk(synth, "one two three")]
    assert ctl.write(1, chunks[0], now_ms=0)
    clock.advance(WORD + WORD // 2)
    paused = ctl.pause(1, detected_ms=100, now_ms=100)
    assert paused is not None
    clock.advance(RATE // 2)  # deciding takes a while; nothing plays
    stopped = ctl.stop(1, detected_ms=100, now_ms=600)
    assert stopped is not None and stopped.report == paused
    heard = heard_position(stopped.playback.chunks, stopped.report.heard_samples)
    assert heard.text == "one"  # "two" was cut mid-word
    assert ctl.current is None and ctl.resume(1) is None


def test_pause_then_resume_twice_and_a_final_stop() -> None:
    clock = VirtualClock(RATE)
    sink = NullSink(clock, RATE)
    synth = ToneSynthesizer(word_ms=100)
    ctl = PlaybackController(sink, RATE)
    ctl.start(1, speech_end_ms=0, endpoint_ms=0)
    ctl.write(1, _chunk(synth, "a b c d e f"), now_ms=0)
    clock.advance(WORD // 2)
    ctl.pause(1, detected_ms=50, now_ms=50)
    assert ctl.resume(1) == 0
    clock.advance(2 * WORD + WORD // 4)  # "a", "b" and a quarter of "c"
    ctl.pause(1, detected_ms=300, now_ms=300)
    assert ctl.resume(1) == 2 * WORD
    clock.advance(WORD // 2)
    stopped = ctl.stop(1, detected_ms=400, now_ms=400)
    assert stopped is not None
    assert stopped.report.heard_samples == 2 * WORD + WORD // 2
    assert heard_position(stopped.playback.chunks, stopped.report.heard_samples).text == "a b"


def test_the_words_heard_lately_are_those_before_the_furthest_point_heard() -> None:
    # What words over the reply are checked against (its echo): the last ``window_ms``
    # of the reply heard, the word playing included, held where a pause stopped it.
    clock = VirtualClock(RATE)
    sink = NullSink(clock, RATE)
    synth = ToneSynthesizer(word_ms=100)
    ctl = PlaybackController(sink, RATE)
    assert ctl.words_heard_lately(300) == []  # no reply
    ctl.start(1, speech_end_ms=0, endpoint_ms=0)
    ctl.write(1, _chunk(synth, "one two three"), now_ms=0)
    ctl.write(1, _chunk(synth, " four five", 3 * WORD, 13), now_ms=0)
    assert ctl.words_heard_lately(300) == []  # nothing heard yet
    clock.advance(3 * WORD + WORD // 2)  # into "four"
    assert ctl.words_heard_lately(150) == ["three", "four"]
    assert ctl.words_heard_lately(10_000) == ["one", "two", "three", "four"]
    ctl.pause(1, detected_ms=350, now_ms=350)
    clock.advance(RATE)  # paused: the same words, however long it takes to decide
    assert ctl.words_heard_lately(150) == ["three", "four"]
