"""Small parts of the live loop: the event log codec, metrics, playback arithmetic,
the reply voice's reuse of a pre-synthesised clause, and worker priorities."""

from __future__ import annotations

import dataclasses
import io
import math
import threading
import typing
from pathlib import Path

import numpy as np
import pytest

from assistant.loop import event_log as log
from assistant.loop import log_codec as codec
from assistant.loop.asr_worker import (
    AsrAudioScore,
    AsrFinal,
    AsrPartial,
    AsrPreview,
    AsrWorker,
)
from assistant.loop.metrics import compute_metrics, percentile
from assistant.loop.playback import ReplyPlayback
from assistant.loop.tts_worker import Presynthesized, SpeechChunk, TtsWorker
from assistant.loop.utterances import decode_tail_ms
from assistant.loop.workers import Worker, WorkerFailed
from assistant.speech.voice import ClauseRule, ReplyVoice, premade_clause
from audio.clock import VirtualClock
from audio.sinks import NullSink
from audio.streaming_asr import StreamingASROptions
from audio.whisper_window import GLANCE, LOOPS_ONLY
from audio.word_timing import TTSChunk
from tests.replay.fakes import RATE, CountingTranscriber, ToneSynthesizer


def _example(cls: type[log.Entry]) -> log.Entry:
    values: dict[str, object] = {}
    hints = typing.get_type_hints(cls)
    for i, f in enumerate(dataclasses.fields(cls)):
        hint = hints[f.name]
        if hint is bool:
            values[f.name] = True
        elif hint is str:
            values[f.name] = f"text {i} \u00e9"
        else:  # ints, and int | None
            values[f.name] = 10 + i
    return cls(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", list(log.ENTRY_TYPES.values()), ids=list(log.ENTRY_TYPES))
def test_every_entry_round_trips_through_jsonl(cls: type[log.Entry], tmp_path: Path) -> None:
    entry = _example(cls)
    obj = codec.entry_to_json(entry)
    assert obj["type"] == cls.type and obj["t_ms"] == entry.t_ms
    assert set(obj) == {"type"} | {f.name for f in dataclasses.fields(cls)}
    path = tmp_path / "events.jsonl"
    codec.write_jsonl([entry, entry], path)
    assert list(codec.read_jsonl(path)) == [entry, entry]


def test_required_event_types_exist_and_bad_lines_are_rejected() -> None:
    required = {"speech_started", "speech_stopped", "transcript_partial", "transcript_final",
                "speculation_started", "speculation_hit", "speculation_miss",
                "response_started", "audio_started", "barge_in", "playback_stopped",
                "truncated", "response_done"}
    assert required <= set(log.ENTRY_TYPES)
    with pytest.raises(ValueError):
        codec.entry_from_json({"type": "nope", "t_ms": 1})
    with pytest.raises(ValueError):
        codec.entry_from_json({"type": "speech_started", "t_ms": 1, "extra": 2})
    buf = io.StringIO()
    codec.write_jsonl([log.SpeechStartedEntry(5)], buf)
    assert buf.getvalue() == '{"t_ms": 5, "type": "speech_started"}\n'


def test_metrics_fold_the_log() -> None:
    entries: list[log.Entry] = [
        log.ResponseStartedEntry(1000, 1, "hi", 10, 0, 40, "hit"),
        log.SpeculationHitEntry(1000, 1, 1, 5, 10),
        log.AudioStartedEntry(1100, 1, speech_end_ms=450, endpoint_ms=1000),
        log.ResponseDoneEntry(3000, 1, "hello", 7, False, 1900),
        log.SpeculationMissEntry(3500, 2, None, "a", "a b", 0, reason="superseded"),
        log.ResponseStartedEntry(4000, 2, "a b", 8, 8, 50, "none"),
        log.AudioStartedEntry(4700, 2, speech_end_ms=3400, endpoint_ms=4000),
        log.BargeInEntry(5000, 2, 300),
        log.PlaybackStoppedEntry(5015, 2, 315, 15),
        log.ResponseDoneEntry(5015, 2, "ok", 9, True, 315),
    ]
    m = compute_metrics(entries, sequence_tokens=90, history_tokens=90)
    assert m.voice_to_voice_ms == (650, 1300)
    assert m.endpoint_to_audio_ms == (100, 700)
    assert m.barge_in_stop_ms == (15,) and m.leaked_audio_ms == (15,)
    assert m.speculation_hits == 1 and m.speculation_misses == 1
    assert m.speculation_hit_rate == 0.5
    assert [t.interrupted for t in m.turns] == [False, True]
    assert m.turns[1].prompt_tokens_computed == 8
    assert m.sequence_matches_history
    js = m.to_json()
    assert js["voice_to_voice_ms_p50"] == 975.0 and js["sequence_matches_history"] is True
    assert not compute_metrics([], sequence_tokens=3, history_tokens=4).sequence_matches_history


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([5], 95) == 5.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([0, 100], 95) == 95.0


def _chunk(synth: ToneSynthesizer, text: str, start: int = 0, char_start: int = 0):  # type: ignore[no-untyped-def]
    chunk = synth.synthesize_span(text, turn_id=1, char_start=char_start, start_sample=start)
    assert chunk is not None
    return chunk


def test_playback_tracks_its_own_span_and_barge_in_arithmetic() -> None:
    clock = VirtualClock(16000)
    sink = NullSink(clock, 16000)
    synth = ToneSynthesizer(word_ms=100)
    # Earlier audio on the same sink: the reply's positions start after it.
    from audio.chunk import AudioChunk
    sink.write(AudioChunk(np.zeros(1600, np.float32), 16000))
    clock.advance(1600)
    pb = ReplyPlayback(turn_id=1, tts_rate=16000, speech_end_ms=0, endpoint_ms=0)
    assert pb.write(sink, _chunk(synth, "one two three"), now_ms=100) is True
    assert pb.write(sink, _chunk(synth, " four five", 4800, 13), now_ms=100) is False
    assert pb.audio_started_ms == 100 and pb.start_pos == 1600
    assert pb.total_ms(sink) == 500
    clock.advance(16 * 250)  # 250 ms of the reply played
    assert pb.heard_sink_samples(sink) == 4000
    assert not pb.finished(sink)
    # Detected 20 ms ago (e.g. one frame of processing lag): 20 ms leaked.
    report = pb.stop(sink, detected_ms=330, now_ms=350)
    assert report.heard_samples == 4000 and report.heard_ms == 250
    assert report.played_at_detection_ms == 230 and report.leaked_ms == 20
    assert report.stopped_at_ms == 350
    clock.advance(16000)
    assert sink.played_samples == 1600 + 4000  # nothing more was played
    pb2 = ReplyPlayback(turn_id=2, tts_rate=16000, speech_end_ms=0, endpoint_ms=0)
    assert not pb2.finished(sink)
    pb2.tts_done = True
    assert pb2.finished(sink)  # no audio at all: done at once


def test_reply_voice_reuses_a_matching_premade_clause() -> None:
    synth = ToneSynthesizer()
    text = "Sure, here it is. And more text follows."
    clause = premade_clause(text, ClauseRule(min_chars=6))
    assert clause is not None and clause.char_start == 0
    premade = synth.synthesize_span(clause.text, turn_id=0)
    assert premade is not None
    synth.spans.clear()
    v = ReplyVoice(synth, turn_id=9, clauses=ClauseRule(min_chars=6), premade=[premade])
    chunks = [c for piece in (text[:7], text[7:20], text[20:]) for c in v.feed(piece)]
    chunks += v.finish()
    assert v.reused == 1 and clause.text not in synth.spans
    assert chunks[0].turn_id == 9 and chunks[0].start_sample == 0
    assert [c.start_sample for c in chunks[1:]] == [c.end_sample for c in chunks[:-1]]
    assert "".join(c.text for c in chunks) == text
    assert chunks[0].text == clause.text and len(chunks) == 2
    assert [c.word_index for c in chunks] == [0, len(chunks[0].words)]
    v.cancel()
    assert v.feed("more. ") == [] and v.finish() == []


def test_reply_voice_hands_an_adopted_clause_to_adopt_and_speaks_what_it_returns() -> None:
    synth = ToneSynthesizer()
    text = "Sure, here it is. And more."
    clause = premade_clause(text, ClauseRule(min_chars=6))
    assert clause is not None
    premade = synth.synthesize_span(clause.text, turn_id=0)
    assert premade is not None
    seen: list[TTSChunk] = []

    def adopt(chunk: TTSChunk) -> TTSChunk:
        seen.append(chunk)
        return dataclasses.replace(chunk, pcm=chunk.pcm[:10])  # e.g. the recorder's silence

    v = ReplyVoice(synth, turn_id=4, clauses=ClauseRule(min_chars=6), premade=[premade],
                   adopt=adopt)
    chunks = v.feed(text) + v.finish()
    assert [c.turn_id for c in seen] == [4] and seen[0].text == clause.text
    assert chunks[0].num_samples == 10 and chunks[1].start_sample == 10  # what adopt returned
    assert len(seen) == 1  # clauses synthesised now are not adopted


def test_reply_voice_ignores_a_premade_clause_that_does_not_match() -> None:
    synth = ToneSynthesizer()
    other = synth.synthesize_span("Something else, entirely.", turn_id=0)
    assert other is not None
    synth.spans.clear()
    v = ReplyVoice(synth, turn_id=1, clauses=ClauseRule(min_chars=6), premade=[other])
    v.feed("Hello there, friend. ")
    v.finish()
    assert v.reused == 0 and synth.spans


class _Recorder(Worker):
    def __init__(self, post: typing.Callable[[object], None]) -> None:
        self.order: list[str] = []
        self.gate = threading.Event()
        self.background = 0
        super().__init__("recorder", post)

    def has_background_work(self) -> bool:
        return self.background > 0

    def background_step(self) -> None:
        self.order.append("bg")
        self.background -= 1


def test_worker_serves_control_first_and_reports_idle_and_failures() -> None:
    posted: list[object] = []
    w = _Recorder(posted.append)
    try:
        def hold() -> None:
            w.gate.wait(5)
        w.submit(hold)  # hold the thread while we queue
        for name, prio in (("low", "low"), ("normal", "normal"), ("control", "control")):
            w.submit(lambda n=name: w.order.append(n), priority=prio)  # type: ignore[misc]
        w.background = 2
        idle = w.idle()
        assert not idle.done()
        w.gate.set()
        idle.result(timeout=5)
        assert w.order == ["control", "normal", "low", "bg", "bg"]

        def boom() -> None:
            raise RuntimeError("bad")
        w.submit(boom)
        w.idle().result(timeout=5)
        assert isinstance(posted[-1], WorkerFailed) and str(posted[-1].error) == "bad"
    finally:
        w.close()
    assert w.idle().done()


def test_a_held_worker_runs_control_commands_only_and_counts_as_idle() -> None:
    # A paused reply holds the TTS worker: the speech over it is decoded on a free CPU.
    w = _Recorder([].append)
    try:
        w.hold(True)
        for name, prio in (("normal", "normal"), ("low", "low"), ("control", "control")):
            w.submit(lambda n=name: w.order.append(n), priority=prio)  # type: ignore[misc]
        w.background = 1
        w.idle().result(timeout=5)  # what waits does not count
        assert w.order == ["control"]
        w.hold(False)
        w.idle().result(timeout=5)
        assert w.order == ["control", "normal", "low", "bg"]
    finally:
        w.close()


class _GatedTones(ToneSynthesizer):
    """Tones whose first synthesis waits for ``gate``: a pre-synthesis still running."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.started = threading.Event()

    def synthesize_span(self, text: str, **kw: typing.Any) -> typing.Any:
        self.started.set()
        self.gate.wait(5)
        return super().synthesize_span(text, **kw)


def test_a_reply_speaks_a_running_presynthesis_and_skips_a_queued_one() -> None:
    posted: list[object] = []
    synth = _GatedTones()
    w = TtsWorker(synth, posted.append, clauses=ClauseRule(min_chars=6))
    text = "Sure, here it is. And more text follows."
    clause = premade_clause(text, ClauseRule(min_chars=6))
    assert clause is not None
    try:
        w.presynthesize(1, clause.text)
        assert synth.started.wait(5)  # running when the reply begins
        w.presynthesize(2, "A stale draft, never spoken.")  # queued behind it
        w.begin(7, spec_id=1)
        w.feed(7, text, done=True)
        synth.gate.set()
        w.idle().result(timeout=5)
    finally:
        w.close()
    chunks = [p.chunk for p in posted if isinstance(p, SpeechChunk)]
    assert "".join(c.text for c in chunks) == text
    assert [p.spec_id for p in posted if isinstance(p, Presynthesized)] == [1]
    # The clause was synthesised once (by the pre-synthesis), the stale draft never.
    assert synth.spans == [clause.text, text[len(clause.text):].strip()]


_LOUD = (0.1 * np.sin(np.arange(RATE // 2) / 3)).astype(np.float32)
"""Half a second a `CountingTranscriber` hears as words."""
_PAUSED = np.concatenate([_LOUD, np.zeros(RATE // 5, np.float32)])
"""Those words, then 200 ms of silence."""
_PAUSE_END = _LOUD.size + RATE // 10
"""The words and 100 ms of the silence: what a pause's decode takes."""


def _asr_worker(asr: CountingTranscriber, posted: list[object]) -> AsrWorker:
    """An ASR worker posting to `posted`, with no display partials of its own."""
    return AsrWorker(asr, StreamingASROptions(partial_interval_ms=10_000),  # type: ignore[arg-type]
                     posted.append, sample_rate=RATE)


def test_the_asr_worker_decodes_the_same_audio_once_at_a_pause() -> None:
    # A preview asked for again (a cut decided inside the pause) and the final of the
    # same span reuse the pause's decode; asking for word probabilities decodes afresh.
    posted: list[object] = []
    asr = CountingTranscriber()
    w = _asr_worker(asr, posted)
    try:
        w.open(1, _PAUSED, 0)
        end = _PAUSE_END
        w.preview(1, end)
        w.preview(1, end)
        w.idle().result(timeout=5)
        assert asr.calls == 1
        w.preview(1, end, with_p=True)  # measured probabilities were not asked for before
        w.idle().result(timeout=5)
        assert asr.calls == 2
        w.finalize(1, end)
        w.idle().result(timeout=5)
        assert asr.calls == 2
    finally:
        w.close()
    texts = [p.text for p in posted if isinstance(p, (AsrPreview, AsrFinal))]
    assert len(texts) == 4 and len(set(texts)) == 1 and texts[0]


def test_a_decode_prepared_at_a_pause_onset_posts_nothing_and_is_the_preview() -> None:
    posted: list[object] = []
    asr = CountingTranscriber()
    w = _asr_worker(asr, posted)
    try:
        w.open(1, _PAUSED, 0)
        end = _PAUSE_END
        w.prepare(1, end)
        w.idle().result(timeout=5)
        assert asr.calls == 1 and posted == []
        w.prepare(1, end + RATE // 20)  # the speech went on: a new onset, a new decode
        w.preview(1, end + RATE // 20)
        w.idle().result(timeout=5)
        assert asr.calls == 2
        assert [type(p) for p in posted] == [AsrPreview]
    finally:
        w.close()


class _HalfSure:
    """An audio end-of-turn model that hears every pause as a coin toss."""

    def p_complete(self, samples: np.ndarray) -> float:
        return 0.5 if samples.size else 0.0


def test_every_audio_score_asked_for_is_answered() -> None:
    """A pause waits for the audio model's answer (`PauseEvidence`), so the worker gives
    one every time: the model's, or NaN where it has none to give (an utterance already
    gone, no model, a model of another rate)."""
    posted: list[object] = []
    w = AsrWorker(CountingTranscriber(), StreamingASROptions(  # type: ignore[arg-type]
        partial_interval_ms=10_000), posted.append, sample_rate=16000,
        end_model=_HalfSure())  # type: ignore[arg-type]
    try:
        w.open(1, np.zeros(16000, np.float32), 0)
        w.audio_score(1, 1)
        w.audio_score(7, 2)  # never opened
        w.idle().result(timeout=5)
    finally:
        w.close()
    for model, rate in ((None, 16000), (_HalfSure(), 48000)):
        w = AsrWorker(CountingTranscriber(), StreamingASROptions(  # type: ignore[arg-type]
            partial_interval_ms=10_000), posted.append, sample_rate=rate,
            end_model=model)  # type: ignore[arg-type]
        try:
            w.open(3, np.zeros(rate, np.float32), 0)
            w.audio_score(3, 4)
            w.idle().result(timeout=5)
        finally:
            w.close()
    scores = [(p.utt_id, p.pause, p.p_complete) for p in posted if isinstance(p, AsrAudioScore)]
    assert [s[:2] for s in scores] == [(1, 1), (7, 2), (3, 4), (3, 4)]
    assert scores[0][2] == 0.5 and all(math.isnan(s[2]) for s in scores[1:])


def test_display_partials_are_glances() -> None:
    # A display partial's full-window decode of an unsure first half second would hold up
    # the pause's transcript queued behind it: partials never decode again (a loop is
    # dropped, see test_whisper_window).
    asr = CountingTranscriber()
    w = AsrWorker(asr, StreamingASROptions(partial_interval_ms=300),  # type: ignore[arg-type]
                  [].append, sample_rate=RATE)
    try:
        w.open(1, _LOUD, 0)
        w.idle().result(timeout=5)
    finally:
        w.close()
    assert asr.guards == [GLANCE]


@pytest.mark.parametrize(("tail", "short", "onset", "expected"), [
    (200, 200, 100, 100),  # the defaults: the preview decodes at the onset
    (200, 200, 0, 200),    # no onset: at the short pause
    (200, 150, 200, 150),  # an onset not before the short pause is none
    (80, 200, 100, 80),    # never more than asked for
    (200, 120, 100, 100),
])
def test_the_decode_tail_is_no_longer_than_the_pause_when_it_decodes(
        tail: int, short: int, onset: int, expected: int) -> None:
    assert decode_tail_ms(tail, short, onset) == expected


def test_the_asr_worker_takes_a_quick_look_for_an_interim_and_a_full_one_for_a_final() -> None:
    posted: list[object] = []
    asr = CountingTranscriber()
    w = _asr_worker(asr, posted)
    try:
        w.open(1, _LOUD, 0)
        w.interim(1)
        w.idle().result(timeout=5)
        w.finalize(1, _LOUD.size, with_p=True)
        w.idle().result(timeout=5)
    finally:
        w.close()
    assert asr.guards == [LOOPS_ONLY, None]
    assert [type(p) for p in posted if isinstance(p, (AsrPartial, AsrFinal))] == [AsrPartial,
                                                                                 AsrFinal]


class _TailedTones(ToneSynthesizer):
    """Tones followed by 200 ms of silence, as a voice ends every utterance."""

    def synthesize_span(self, text: str, **kw: typing.Any) -> typing.Any:
        chunk = super().synthesize_span(text, **kw)
        tail = np.zeros(RATE // 5, np.int16)
        return dataclasses.replace(chunk, pcm=np.concatenate([chunk.pcm, tail]))


def test_a_clause_cut_mid_phrase_loses_its_trailing_silence() -> None:
    synth = _TailedTones()
    v = ReplyVoice(synth, turn_id=1, clauses=ClauseRule(min_chars=6, first_max_chars=16))
    text = "Once upon a time there lived a dragon, who was brave. "
    chunks = v.feed(text) + v.finish()
    assert [c.text.strip() for c in chunks] == [
        "Once upon a time", "there lived a dragon,", "who was brave."]
    first, comma, last = chunks
    # Cut at a space: kept to 30 ms after its last word. At a comma or a sentence end
    # the voice's own pause stays.
    assert first.num_samples == first.words[-1].end_sample + RATE * 30 // 1000
    assert comma.num_samples == comma.words[-1].end_sample + RATE // 5
    assert last.num_samples == last.words[-1].end_sample + RATE // 5
    assert [c.start_sample for c in chunks[1:]] == [c.end_sample for c in chunks[:-1]]


class _Counted(_HalfSure):
    def __init__(self) -> None:
        self.calls = 0

    def p_complete(self, samples: np.ndarray) -> float:
        self.calls += 1
        return super().p_complete(samples)


def test_an_audio_score_queued_behind_the_turns_end_is_answered_without_the_model() -> None:
    # A burst of sessions on two cores: the pause's transcript came after the turn had
    # ended on its silence alone; the score asked at that pause is read by nobody, and
    # the final (which reuses the pause's transcript) must not wait for the model.
    posted: list[object] = []
    model = _Counted()
    gate = threading.Event()

    class _Slow(CountingTranscriber):
        def transcribe(self, *args: typing.Any, **kwargs: typing.Any) -> typing.Any:
            assert gate.wait(5)
            return super().transcribe(*args, **kwargs)

    w = AsrWorker(_Slow(), StreamingASROptions(  # type: ignore[arg-type]
        partial_interval_ms=10_000), posted.append, sample_rate=16000,
        end_model=model)  # type: ignore[arg-type]
    try:
        w.open(1, _PAUSED, 0)
        w.preview(1, _PAUSE_END)  # the pause's transcript, slow to come
        w.audio_score(1, 1)
        w.finalize(1, _PAUSE_END)  # the turn ended before either ran
        w.open(2, _PAUSED, RATE)
        w.audio_score(2, 2)  # the next utterance's pause is scored as ever
        gate.set()
        w.idle().result(timeout=5)
    finally:
        w.close()
    scores = [(p.utt_id, p.p_complete) for p in posted if isinstance(p, AsrAudioScore)]
    assert math.isnan(scores[0][1]) and scores[1] == (2, 0.5) and model.calls == 1
    assert [type(p) for p in posted if isinstance(p, (AsrPreview, AsrFinal))] == [
        AsrPreview, AsrFinal]
