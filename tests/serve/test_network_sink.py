"""The sink that sends replies at playback pace: pieces of ``delta_ms`` with their words,
at most ``lead_ms`` ahead of the client's playback; a stop that keeps what the client was
sent playing (a tentative pause) or drops it; a resume that sends the interrupted word
again without its words, and the wire position mapped back onto the reply."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from assistant.loop.playback import PlaybackController
from assistant.loop.tts_worker import SpeechChunk, TtsWorker
from assistant.serve.backend.network_io import RecordingSynthesizer
from assistant.serve.backend.network_sink import NetworkSink
from assistant.speech.voice import ClauseRule, premade_clause
from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.word_timing import TTSChunk, WordTiming
from tests.replay.fakes import ToneSynthesizer

RATE = 22050


def _chunk(turn: int, text: str, start_char: int, samples: int) -> TTSChunk:
    return TTSChunk(
        turn_id=turn, pcm=(np.ones(samples) * 1000).astype(np.int16), sample_rate=22050,
        text=text, char_start=start_char, char_end=start_char + len(text),
        words=(WordTiming(word=text.strip(".,"), char_start=start_char,
                          char_end=start_char + len(text.strip(".,")), start_sample=0,
                          end_sample=samples),),
        start_sample=0,
    )


class FakeVoice:
    sample_rate = 22050

    def __init__(self) -> None:
        self.next: list[TTSChunk] = []

    def synthesize_span(self, text: str, **kwargs: Any) -> TTSChunk | None:
        return self.next.pop(0)


def _sink_for(turn: int, **options: Any) -> tuple[VirtualClock, FakeVoice, RecordingSynthesizer,
                                                list[tuple[int, str, bytes]], NetworkSink]:
    """A sink playing ``turn`` on a fresh clock, its voice and recorder, and what it sent."""
    clock = VirtualClock(16000)
    voice = FakeVoice()
    recorder = RecordingSynthesizer(voice)
    sent: list[tuple[int, str, bytes]] = []
    sink = NetworkSink(clock, 22050, recorder=recorder, current_turn=lambda: turn,
                       emit=lambda t, text, pcm: sent.append((t, text, pcm)), **options)
    return clock, voice, recorder, sent, sink


def test_sink_sends_each_chunk_with_its_words_and_models_playback_on_the_clock() -> None:
    clock, voice, recorder, sent, sink = _sink_for(7, delta_ms=200)
    voice.next = [_chunk(7, "Hello,", 0, 2205), _chunk(7, "world.", 7, 4410)]
    for _ in range(2):
        tts = recorder.synthesize_span("x")
        assert tts is not None
        sink.write(AudioChunk(tts.pcm.astype(np.float32) / 32768, 22050, 0))
    assert [(t, text) for t, text, _ in sent] == [(7, "Hello,"), (7, " world.")]
    assert [len(p) // 2 for _, _, p in sent] == [2400, 4800]  # 100 ms and 200 ms at 24 kHz
    assert [c.text for c in recorder.chunks(7)] == ["Hello,", "world."]
    assert sink.played_samples == 0
    clock.advance(1600)  # 100 ms of session time
    assert sink.played_samples == 2205
    assert sink.stop() == 2205


def test_a_chunk_written_without_its_trailing_silence_still_carries_its_words() -> None:
    # A clause cut mid-phrase is written shorter than synthesised (`close_seam`).
    clock, voice, recorder, sent, sink = _sink_for(7, delta_ms=200)
    voice.next = [_chunk(7, "Hello,", 0, 4410)]
    tts = recorder.synthesize_span("x")
    assert tts is not None
    sink.write(AudioChunk(tts.pcm[:2205].astype(np.float32) / 32768, 22050, 0))
    assert [(t, text, len(p) // 2) for t, text, p in sent] == [(7, "Hello,", 2400)]


def test_sink_sends_a_long_chunk_in_pieces_of_delta_ms_with_its_text_first() -> None:
    clock, voice, recorder, sent, sink = _sink_for(3, delta_ms=160, lead_ms=5000)
    clause = _chunk(3, "A long clause.", 0, 22050 * 22 // 10)  # 2.2 s
    voice.next = [clause]
    tts = recorder.synthesize_span("x")
    assert tts is not None
    sink.write(AudioChunk(tts.pcm.astype(np.float32) / 32768, 22050, 0))
    sizes = [len(p) // 2 for _, _, p in sent]
    assert sizes == [3840] * 13 + [52800 - 13 * 3840]  # 160 ms pieces of 2.2 s at 24 kHz
    assert [text for _, text, _ in sent] == ["A long clause."] + [""] * 13
    # The pieces are the chunk's audio, cut: the same bytes as one delta would carry.
    one: list[bytes] = []
    whole_sink = NetworkSink(VirtualClock(16000), 22050, recorder=recorder,
                             current_turn=lambda: 3, emit=lambda t, x, pcm: one.append(pcm),
                             delta_ms=5000, lead_ms=5000)
    whole_sink.write(AudioChunk(tts.pcm.astype(np.float32) / 32768, 22050, 0))
    assert len(one) == 1 and b"".join(p for _, _, p in sent) == one[0]
    assert sink.end_position == clause.num_samples  # playback is modelled on the whole chunk
    with pytest.raises(ValueError):
        NetworkSink(clock, 22050, recorder=recorder, current_turn=lambda: 3,
                    emit=lambda *a: None, delta_ms=0)


def test_text_only_turns_are_not_synthesised_and_count_as_heard_at_once() -> None:
    from audio.word_timing import heard_position

    voice = FakeVoice()  # raises (pops an empty list) if it is asked to speak
    recorder = RecordingSynthesizer(voice)
    recorder.set_text_only(5, True)
    first = recorder.synthesize_span("Paris is nice,", turn_id=5, char_start=0, token_end=4)
    second = recorder.synthesize_span("and old.", turn_id=5, char_start=15, word_index=3,
                                      token_start=4, token_end=7)
    assert recorder.synthesize_span(" ... ", turn_id=5) is None  # nothing speakable
    assert first is not None and second is not None
    assert (first.num_samples, second.num_samples) == (0, 0)
    assert [w.word for w in first.words + second.words] == ["Paris", "is", "nice", "and", "old"]
    assert (second.char_start, second.char_end, second.word_index) == (15, 23, 3)
    heard = heard_position(recorder.chunks(5), 0)
    assert (heard.word_count, heard.text, heard.token_end) == (5, "Paris is nice, and old.", 7)
    # The sink sends the text with no audio and nothing is left to play.
    clock = VirtualClock(16000)
    sent: list[tuple[int, str, bytes]] = []
    sink = NetworkSink(clock, 22050, recorder=recorder, current_turn=lambda: 5,
                       emit=lambda t, text, pcm: sent.append((t, text, pcm)))
    for chunk in recorder.chunks(5):
        sink.write(AudioChunk(chunk.pcm.astype(np.float32), 22050, 0))
    assert sent == [(5, "Paris is nice,", b""), (5, " and old.", b"")]
    assert sink.end_position == sink.played_samples == 0
    # Unmarked (and forgotten) turns are spoken by the voice again.
    recorder.set_text_only(5, False)
    voice.next = [_chunk(5, "Hi.", 0, 100)]
    spoken = recorder.synthesize_span("Hi.", turn_id=5)
    assert spoken is not None and spoken.num_samples == 100


def _spoken(turn: int, words: list[str], *, start_sample: int, char_start: int,
            word_samples: int) -> TTSChunk:
    """A chunk speaking ``words``, each ``word_samples`` long, at ``start_sample`` of the
    reply (the way the voice numbers a reply's chunks)."""
    text = " ".join(words)
    timings, char = [], char_start
    for i, word in enumerate(words):
        bare = word.strip(".,")
        timings.append(WordTiming(word=bare, char_start=char, char_end=char + len(bare),
                                  start_sample=i * word_samples,
                                  end_sample=(i + 1) * word_samples))
        char += len(word) + 1
    n = word_samples * len(words)
    return TTSChunk(turn_id=turn, pcm=(np.ones(n) * 1000).astype(np.int16), sample_rate=RATE,
                    text=text, char_start=char_start, char_end=char_start + len(text),
                    words=tuple(timings), start_sample=start_sample)


class Client:
    """What the client receives: (text, 24 kHz samples) per piece."""

    def __init__(self) -> None:
        self.pieces: list[tuple[str, int]] = []

    def __call__(self, turn: int, text: str, pcm: bytes) -> None:
        self.pieces.append((text, len(pcm) // 2))

    @property
    def texts(self) -> list[str]:
        return [t for t, _ in self.pieces if t]

    @property
    def samples(self) -> int:
        return sum(n for _, n in self.pieces)


def _play(clock: VirtualClock, ms: int) -> None:
    """Let ``ms`` of session time pass in 20 ms frames, as the session's audio moves it."""
    for _ in range(ms // 20):
        clock.advance(320)


def _sink(clock: VirtualClock, recorder: RecordingSynthesizer, client: Client,
          keeps: list[bool] | None = None, **kwargs: Any) -> NetworkSink:
    return NetworkSink(clock, RATE, recorder=recorder, current_turn=lambda: 1, emit=client,
                       keeps_sent=(lambda: keeps[0]) if keeps is not None else None, **kwargs)


def test_audio_goes_out_at_most_lead_ms_ahead_of_the_clients_playback() -> None:
    clock, voice, client = VirtualClock(16000), FakeVoice(), Client()
    recorder = RecordingSynthesizer(voice)
    sink = _sink(clock, recorder, client, delta_ms=100, lead_ms=300)
    voice.next = [_spoken(1, ["A", "long", "clause."], start_sample=0, char_start=0,
                          word_samples=RATE * 2 // 3)]
    tts = recorder.synthesize_span("x")
    assert tts is not None
    sink.write(AudioChunk(tts.pcm.astype(np.float32) / 32768, RATE, 0))
    assert client.pieces == [("A long clause.", 2400), ("", 2400), ("", 2400)]  # 300 ms
    assert (sink.played_samples, sink.end_position) == (0, 2 * RATE)  # all of it queued
    _play(clock, 100)  # 100 ms played: one more piece goes out
    assert (sink.played_samples, len(client.pieces)) == (RATE // 10, 4)
    _play(clock, 1000)  # a whole second: ten more
    assert len(client.pieces) == 14
    assert sink.played_samples + sink.queued_samples == sink.end_position == 2 * RATE
    sink.flush()
    assert client.samples == 48000 and sink.played_samples == sink.end_position == 2 * RATE


@pytest.mark.parametrize("keeps", [True, False])
def test_a_stop_sends_nothing_more_and_the_client_plays_what_it_holds_or_not(
        keeps: bool) -> None:
    clock, voice, client = VirtualClock(16000), FakeVoice(), Client()
    recorder = RecordingSynthesizer(voice)
    sink = _sink(clock, recorder, client, [keeps], delta_ms=100, lead_ms=300)
    voice.next = [_spoken(1, ["Words."], start_sample=0, char_start=0, word_samples=2 * RATE)]
    tts = recorder.synthesize_span("x")
    assert tts is not None
    sink.write(AudioChunk(tts.pcm.astype(np.float32) / 32768, RATE, 0))
    _play(clock, 100)
    sent = len(client.pieces)
    assert sent == 4
    position = sink.stop()
    # A tentative pause: the client is not told and plays all it was sent; a cut it is
    # told of: it stops where it is.
    assert position == (sent * RATE // 10 if keeps else RATE // 10)
    assert sink.end_position == position
    _play(clock, 1000)
    assert len(client.pieces) == sent and sink.played_samples == position


def test_a_paused_reply_resumes_from_its_interrupted_word_and_the_wire_maps_back() -> None:
    """The loop's playback over the sink: the pause sends nothing more, the client plays
    out what it holds, the resume sends the interrupted word again (its text not twice)
    and then the rest; a truncate's wire position maps onto the reply."""
    clock, voice, client = VirtualClock(16000), FakeVoice(), Client()
    recorder = RecordingSynthesizer(voice)
    paused = [False]
    sink = _sink(clock, recorder, client, paused, delta_ms=100, lead_ms=300)
    half = RATE // 2
    voice.next = [_spoken(1, ["One", "two", "three."], start_sample=0, char_start=0,
                          word_samples=half),
                  _spoken(1, ["Four", "five."], start_sample=3 * half, char_start=15,
                          word_samples=half)]
    playback = PlaybackController(sink, RATE)
    playback.start(1, speech_end_ms=0, endpoint_ms=0)
    for _ in range(2):
        tts = recorder.synthesize_span("x")
        assert tts is not None
        playback.write(1, tts, 0)
    playback.tts_done(1)
    _play(clock, 600)  # 600 ms played, 900 ms sent (in "two")
    assert client.samples == 9 * 2400 and client.texts == ["One two three."]
    paused[0] = True
    report = playback.pause(1, detected_ms=600, now_ms=600)
    assert report is not None
    assert report.heard_samples == 9 * RATE // 10  # all it was sent will be heard
    assert report.stopped_at_ms == 900
    _play(clock, 1000)  # undecided for a second: nothing goes out
    assert client.samples == 9 * 2400 and sink.played_samples == 9 * RATE // 10
    paused[0] = False
    assert playback.resume(1) == half  # the start of "two"
    sink.flush()
    assert client.texts == ["One two three.", " Four five."]
    assert client.samples == (9 * RATE // 10 + 5 * half - half) * 24000 // RATE
    assert playback.poll() is not None  # played out, whole
    # The client's wire position -> the reply: before the pause as sent, after it from
    # the repeated word on.
    sent_before = 9 * 2400
    assert sink.reply_samples(1, sent_before - 2400) == 8 * RATE // 10
    assert sink.reply_samples(1, sent_before) == half
    assert sink.reply_samples(1, sent_before + 24000) == half + RATE
    assert sink.reply_samples(2, 24000) == RATE  # a turn it never sent: as is


@pytest.mark.parametrize(("decided_after_ms", "heard_ms"), [(100, 700), (1000, 900)])
def test_a_committed_pause_cuts_at_what_the_client_had_played_when_told(
        decided_after_ms: int, heard_ms: int) -> None:
    """Paused at 600 ms with 900 ms sent: the client plays its buffer until the cut is
    decided and it hears ``speech_started``; what it played by then is what was heard."""
    clock, voice, client = VirtualClock(16000), FakeVoice(), Client()
    recorder = RecordingSynthesizer(voice)
    paused = [False]
    sink = _sink(clock, recorder, client, paused, delta_ms=100, lead_ms=300)
    voice.next = [_spoken(1, ["One", "two", "three."], start_sample=0, char_start=0,
                          word_samples=RATE // 2)]
    playback = PlaybackController(sink, RATE)
    playback.start(1, speech_end_ms=0, endpoint_ms=0)
    tts = recorder.synthesize_span("x")
    assert tts is not None
    playback.write(1, tts, 0)
    _play(clock, 600)
    paused[0] = True
    assert playback.pause(1, detected_ms=600, now_ms=600) is not None
    _play(clock, decided_after_ms)
    paused[0] = False  # decided: the turn manager no longer holds a pause
    stopped = playback.stop(1, detected_ms=600, now_ms=600 + decided_after_ms)
    assert stopped is not None
    assert stopped.report.heard_ms == heard_ms
    assert stopped.report.heard_samples == RATE * heard_ms // 1000
    assert stopped.report.stopped_at_ms == min(900, 600 + decided_after_ms)
    assert sink.end_position == sink.played_samples  # nothing left to play


def test_a_text_only_reply_paused_and_resumed_sends_every_clause_once() -> None:
    """A text-only reply has no audio to hold back: its clauses go out during a pause
    (none is lost to the resume, none is sent twice)."""
    clock, client = VirtualClock(16000), Client()
    recorder = RecordingSynthesizer(FakeVoice())  # raises if asked to speak
    recorder.set_text_only(1, True)
    paused = [False]
    sink = _sink(clock, recorder, client, paused)
    playback = PlaybackController(sink, RATE)
    playback.start(1, speech_end_ms=0, endpoint_ms=0)
    first = recorder.synthesize_span("Paris is nice,", turn_id=1, char_start=0)
    second = recorder.synthesize_span("and old.", turn_id=1, char_start=15)
    assert first is not None and second is not None
    playback.write(1, first, 0)
    paused[0] = True
    assert playback.pause(1, detected_ms=0, now_ms=0) is not None
    playback.write(1, second, 0)
    paused[0] = False
    assert playback.resume(1) == 0
    playback.tts_done(1)
    assert client.texts == ["Paris is nice,", " and old."] and client.samples == 0
    assert playback.poll() is not None


def test_the_audio_lead_comes_from_the_config(serve_runtime: Any) -> None:
    from assistant.app.config import load_config
    from assistant.serve.runtime import runtime_from_models
    from tests.serve.conftest import CONFIG

    cfg = load_config(CONFIG, env={}, overrides={"server.audio_lead_ms": 800})
    assert runtime_from_models(cfg, serve_runtime.models).audio_lead_ms == 800
    assert serve_runtime.audio_lead_ms == 300  # config.yaml's


def test_the_recorder_keeps_a_clause_made_ahead_only_once_a_turn_adopts_it() -> None:
    voice = FakeVoice()
    recorder = RecordingSynthesizer(voice)
    voice.next = [_chunk(0, "Sure,", 0, 2205)]
    made = recorder.synthesize_span("Sure,")  # a speculation's clause: turn 0
    assert made is not None and recorder.chunks(0) == []
    adopted = recorder.adopt(dataclasses.replace(made, turn_id=3))
    assert adopted is not None and adopted.pcm.size == 2205
    assert recorder.chunks(3) == [adopted]
    recorder.set_text_only(5, True)  # a text-only turn adopting it stays silent
    silent = recorder.adopt(dataclasses.replace(made, turn_id=5, start_sample=40))
    assert silent is not None and silent.pcm.size == 0
    assert (silent.text, silent.turn_id, silent.start_sample) == ("Sure,", 5, 40)
    assert recorder.chunks(5) == [silent]


def test_a_daemon_reply_speaking_a_clause_made_ahead_records_it_under_its_turn() -> None:
    posted: list[object] = []
    recorder = RecordingSynthesizer(ToneSynthesizer())
    worker = TtsWorker(recorder, posted.append, clauses=ClauseRule(min_chars=6))
    text = "Sure, here it is. And more text follows."
    clause = premade_clause(text, ClauseRule(min_chars=6))
    assert clause is not None
    try:
        worker.presynthesize(1, clause.text)
        worker.idle().result(timeout=5)
        worker.begin(7, spec_id=1)
        worker.feed(7, text, done=True)
        worker.idle().result(timeout=5)
    finally:
        worker.close()
    spoken = [p.chunk for p in posted if isinstance(p, SpeechChunk)]
    assert spoken[0].text == clause.text
    assert [c.text for c in recorder.chunks(7)] == [c.text for c in spoken]
    assert recorder.chunks(0) == []
