"""The asyncio pipeline end to end on a virtual clock, with model stand-ins (fast).

The real VAD, turn manager, workers, dialogue and engine bookkeeping run; only the
models are fakes (tests/replay/fakes.py), so exact timings can be asserted: the tone
voice speaks every word in 150 ms, so the words heard at a barge-in are known.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from assistant.llm.host import EngineHost
from assistant.llm.local import LocalBackend
from assistant.llm.step_gate import StepGate
from assistant.loop import event_log as log
from assistant.loop import output as out
from assistant.loop.pipeline import Pipeline, PipelineOptions, PipelineResult
from assistant.speech.listener import Listener
from assistant.speech.voice import ClauseRule
from assistant.turns.interruption import InterruptionOptions
from assistant.turns.options import TurnOptions
from assistant.turns.turn_manager import TurnManager
from audio.asr import TranscribedWord
from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.echo import EchoOptions, EchoProcessor
from audio.sinks import WavSink
from audio.streaming_asr import StreamingASROptions
from audio.vad import VadOptions
from audio.wav import read_wav
from audio.word_timing import split_words
from tests.replay.fakes import (
    RATE,
    CountingTranscriber,
    ToneClassifier,
    ToneSynthesizer,
    scripted_dialogue,
    scripted_engine,
    scripted_reply,
    silence,
    voice,
)

FRAME = RATE * 20 // 1000
VAD = VadOptions()


@dataclass
class FakeRun:
    result: PipelineResult
    heard: np.ndarray
    synth: ToneSynthesizer
    outputs: list[out.ConversationEvent]
    """The public stream, as an adapter gets it."""

    def of(self, cls: type) -> list:  # type: ignore[type-arg]
        return [e for e in self.result.entries if isinstance(e, cls)]

    def rms(self, start_ms: int, end_ms: int) -> float:
        seg = self.heard[start_ms * RATE // 1000: end_ms * RATE // 1000]
        return float(np.sqrt(np.mean(seg.astype(np.float64) ** 2))) if seg.size else 0.0


async def _run(signal: np.ndarray, tmp: Path, turns: TurnOptions, presynthesize: bool,
               transcriber: CountingTranscriber, clock: VirtualClock | None = None,
               gate: StepGate | None = None, score_end_of_turn: bool = False,
               listening_partials: bool = True, echo: EchoProcessor | None = None) -> FakeRun:
    clock = clock or VirtualClock(RATE)
    synth = ToneSynthesizer()
    sink = WavSink(tmp / "heard.wav", clock, RATE)
    engine, template = scripted_engine()
    host = EngineHost(LocalBackend(engine), gate=gate)
    outputs: list[out.ConversationEvent] = []
    pipeline = Pipeline(
        host=host, dialogue=scripted_dialogue(template, score_end_of_turn=score_end_of_turn),
        transcriber=transcriber,
        synthesizer=synth,
        turn_manager=TurnManager(turns), listener=Listener(VAD, echo, ToneClassifier()),
        clock=clock, sink=sink, asr_options=StreamingASROptions(), clauses=ClauseRule(min_chars=6),
        options=PipelineOptions(virtual=True, presynthesize=presynthesize, pause_priority=True,
                                listening_partials=listening_partials),
        on_output=outputs.append)
    try:
        for start in range(0, signal.size - FRAME + 1, FRAME):
            clock.wait_until(start + FRAME)
            await pipeline.feed(AudioChunk(signal[start:start + FRAME], RATE, start))
        await pipeline.run_tail()
        result = await pipeline.finish()
    finally:
        await pipeline.aclose()
        sink.close()
        await asyncio.to_thread(host.close)
    engine.check()
    assert engine.stats().sequences == 0  # the conversation was released on close
    heard, _ = read_wav(tmp / "heard.wav")
    return FakeRun(result, np.asarray(heard, np.float32), synth, outputs)


def run(signal: np.ndarray, tmp: Path, *, barge_in_min_ms: int = 200, speculate: bool = True,
        presynthesize: bool = True, min_loud_blocks: int = 0) -> FakeRun:
    turns = TurnOptions(barge_in_min_ms=barge_in_min_ms, speculate=speculate)
    return asyncio.run(_run(signal, tmp, turns, presynthesize,
                            CountingTranscriber(min_loud_blocks)))


def test_question_and_answer_with_a_speculation_hit(tmp_path: Path) -> None:
    r = run(np.concatenate([silence(300), voice(1200), silence(400)]), tmp_path)
    final = r.of(log.TranscriptFinalEntry)
    assert len(final) == 1 and final[0].text
    started = r.of(log.ResponseStartedEntry)
    assert started[0].user_text == final[0].text
    assert started[0].speculation == "hit" and started[0].prompt_tokens_computed == 0
    done = r.of(log.ResponseDoneEntry)
    assert done[0].text == scripted_reply(final[0].text) and not done[0].interrupted
    # The drafted first clause was synthesised once, ahead, and reused when adopted.
    first_clause = r.synth.spans[0]
    assert r.synth.spans.count(first_clause) == 1
    audio = r.of(log.AudioStartedEntry)[0]
    stopped = r.of(log.SpeechStoppedEntry)[0]
    assert audio.t_ms == stopped.t_ms  # zero compute time on the virtual clock
    words = len(split_words(done[0].text))
    assert done[0].spoken_ms == words * 150
    assert r.rms(0, audio.t_ms) == 0.0
    assert r.rms(audio.t_ms, audio.t_ms + done[0].spoken_ms) > 0.01
    m = r.result.metrics
    assert m.sequence_matches_history and m.history_text_matches
    assert m.voice_to_voice_ms == (audio.t_ms - stopped.speech_end_ms,)
    # What an adapter hears of it: the typed public stream, in order.
    states = [e.state for e in r.outputs if isinstance(e, out.StateChanged)]
    assert [e for e in r.outputs
            if not isinstance(e, out.StateChanged | out.TranscriptDelta | out.ResponseDelta)] == [
        out.SpeechStarted(r.of(log.SpeechStartedEntry)[0].t_ms),
        out.SpeechStopped(stopped.t_ms, stopped.speech_end_ms, discarded=False),
        out.TranscriptFinal(final[0].t_ms, final[0].text),
        out.ResponseStarted(started[0].t_ms, 1, 0, started[0].prompt_tokens_reused,
                            speculated=True),
        out.ResponseDone(done[0].t_ms, 1, done[0].text, done[0].generated_tokens,
                         interrupted=False)]
    assert states == ["user_speaking", "thinking", "speaking", "listening"]
    # The reply's text came out as it was generated, all of it before it was done.
    deltas = [e for e in r.outputs if isinstance(e, out.ResponseDelta)]
    assert "".join(d.text for d in deltas) == done[0].text
    assert all(d.turn_id == 1 and d.t_ms <= done[0].t_ms for d in deltas)


@pytest.mark.parametrize("into_reply_ms", [700, 1600])
def test_barge_in_keeps_exactly_the_words_heard(tmp_path: Path, into_reply_ms: int) -> None:
    # The reply starts 550 + 20 ms after the speech ends (end of turn, one frame).
    signal = np.concatenate([silence(300), voice(1000), silence(570 + into_reply_ms),
                             voice(900), silence(300)])
    r = run(signal, tmp_path)
    barge = r.of(log.BargeInEntry)
    stopped = r.of(log.PlaybackStoppedEntry)
    cut = r.of(log.TruncatedEntry)
    assert len(barge) == len(stopped) == len(cut) == 1
    heard_ms = stopped[0].played_ms
    audio = [e for e in r.of(log.AudioStartedEntry) if e.turn_id == 1][0]
    assert heard_ms == barge[0].t_ms - audio.t_ms  # stopped at the frame it was detected
    assert stopped[0].leaked_ms == 0
    # Every word whose last sample was played, and not one more.
    n_heard = heard_ms // 150
    generated = split_words(cut[0].generated_text)
    assert [w.word for w in split_words(cut[0].kept_text)] == [w.word for w in generated[:n_heard]]
    assert cut[0].generated_text.startswith(cut[0].kept_text)
    turns = r.result.conversation
    assert turns[2]["interrupted"] is True and turns[2]["text"] == cut[0].kept_text
    assert turns[2]["spoken_ms"] == heard_ms
    # Nothing of the interrupted reply is played after the stop (stale audio dropped).
    nxt = [e for e in r.of(log.AudioStartedEntry) if e.turn_id == 2]
    quiet_until = nxt[0].t_ms if nxt else len(r.heard) * 1000 // RATE
    assert r.rms(stopped[0].t_ms + 1, quiet_until) == 0.0
    m = r.result.metrics
    assert m.sequence_matches_history and m.history_text_matches
    assert m.barge_in_stop_ms == (0,)


@pytest.mark.parametrize("mode", ["immediate", "tentative"])
def test_going_on_as_the_reply_begins_withdraws_it_and_joins_the_turn(tmp_path: Path,
                                                                       mode: str) -> None:
    # The user speaks again 200 ms into the reply (continue_within_ms: 500): they were
    # going on with their turn. The reply stops (tentative: pauses, and its words commit
    # the cut), leaves the history and the engine's sequence, and one user turn holds
    # both utterances.
    signal = np.concatenate([silence(300), voice(1000), silence(570 + 200), voice(900),
                             silence(1500)])
    turns = TurnOptions(interruption=InterruptionOptions(mode=mode))  # type: ignore[arg-type]
    r = asyncio.run(_run(signal, tmp_path, turns, True, CountingTranscriber(0)))
    assert r.of(log.BargeInEntry) == [] and r.of(log.TruncatedEntry) == []
    (withdrawn,) = r.of(log.ResponseWithdrawnEntry)
    assert withdrawn.turn_id == 1
    (stopped,) = r.of(log.PlaybackStoppedEntry)
    audio = [e for e in r.of(log.AudioStartedEntry) if e.turn_id == 1][0]
    assert stopped.turn_id == 1 and 200 <= stopped.played_ms <= 200 + 200 + 40
    finals = [e.text for e in r.of(log.TranscriptFinalEntry)]
    assert len(finals) == 2
    started = r.of(log.ResponseStartedEntry)
    assert [e.turn_id for e in started] == [1, 2]
    assert started[1].user_text == f"{finals[0]} {finals[1]}"
    turns = r.result.conversation
    assert [t["role"] for t in turns] == ["system", "user", "assistant"]
    assert turns[1]["text"] == started[1].user_text and not turns[2]["interrupted"]
    # Nothing of the withdrawn reply is played after the stop.
    nxt = [e for e in r.of(log.AudioStartedEntry) if e.turn_id == 2][0]
    assert audio.t_ms < stopped.t_ms < nxt.t_ms
    assert r.rms(stopped.t_ms + 1, nxt.t_ms) == 0.0
    m = r.result.metrics
    assert m.sequence_matches_history and m.history_text_matches
    # An adapter hears the reply withdrawn, and the user's speech as theirs.
    public = [e for e in r.outputs if isinstance(e, out.ResponseWithdrawn | out.ResponseDone)]
    assert [(type(e), e.turn_id) for e in public] == [(out.ResponseWithdrawn, 1),
                                                      (out.ResponseDone, 2)]


def test_short_voiced_burst_does_not_interrupt(tmp_path: Path) -> None:
    # 150 ms (8 frames touched: 160 ms) opens a VAD turn (120 ms) but stays under the
    # 200 ms barge-in minimum; its words are asked for as it ends (min_words_ms), and
    # this ASR hears none in it (a cough), so it does not interrupt.
    signal = np.concatenate([silence(300), voice(1000), silence(570 + 800), voice(150),
                             silence(300)])
    r = run(signal, tmp_path, min_loud_blocks=3)
    assert r.of(log.BargeInEntry) == []
    stops = r.of(log.SpeechStoppedEntry)
    assert [s.discarded for s in stops] == [False, True]
    done = r.of(log.ResponseDoneEntry)
    assert len(done) == 1 and not done[0].interrupted
    assert [t["role"] for t in r.result.conversation] == ["system", "user", "assistant"]
    # The public stream says the burst was no turn (immediate interruptions: the speech
    # is published as it comes, then discarded).
    stopped = [e for e in r.outputs if isinstance(e, out.SpeechStopped)]
    assert [e.discarded for e in stopped] == [False, True]


def test_same_burst_with_words_interrupts(tmp_path: Path) -> None:
    # Words in it (a crisp "Stop!"): asked for as it ends, they interrupt.
    signal = np.concatenate([silence(300), voice(1000), silence(570 + 800), voice(150),
                             silence(300)])
    r = run(signal, tmp_path)
    (barge,) = r.of(log.BargeInEntry)
    # Decided 40 ms after the burst (one ASR step), not at its short pause.
    burst_end = 300 + 1000 + 570 + 800 + 150
    assert burst_end <= barge.t_ms < burst_end + VAD.short_pause_ms, barge
    assert r.of(log.ResponseDoneEntry)[0].interrupted


def test_same_burst_interrupts_with_a_lower_threshold(tmp_path: Path) -> None:
    signal = np.concatenate([silence(300), voice(1000), silence(570 + 800), voice(150),
                             silence(300)])
    r = run(signal, tmp_path, barge_in_min_ms=140)
    assert len(r.of(log.BargeInEntry)) == 1


def test_mid_utterance_pause_misses_then_the_whole_utterance_hits(tmp_path: Path) -> None:
    signal = np.concatenate([silence(300), voice(600), silence(350), voice(600), silence(300)])
    r = run(signal, tmp_path)
    specs = r.of(log.SpeculationStartedEntry)
    assert len(specs) == 2
    misses = r.of(log.SpeculationMissEntry)
    assert [m.spec_id for m in misses] == [specs[0].spec_id]
    assert misses[0].reason == "superseded"
    hits = r.of(log.SpeculationHitEntry)
    assert [h.spec_id for h in hits] == [specs[1].spec_id]
    final = r.of(log.TranscriptFinalEntry)[0].text
    assert len(final.split()) > len(specs[0].text.split())
    assert r.of(log.ResponseDoneEntry)[0].text == scripted_reply(final)
    assert r.result.metrics.speculation_hit_rate == 0.5


class _WordTranscriber(CountingTranscriber):
    """With word timings (one word per 100 ms block), so display partials come."""

    def transcribe(self, pcm: np.ndarray, **kw: object) -> Any:
        out = super().transcribe(pcm, **kw)
        words = tuple(TranscribedWord(w, 100 * i, 100 * i + 90, 0.9)
                      for i, w in enumerate(out.text.split()))
        return dataclasses.replace(out, words=words)


def test_the_words_so_far_are_computed_into_the_cache_while_the_user_speaks(
        tmp_path: Path) -> None:
    r = asyncio.run(_run(np.concatenate([silence(300), voice(1500), silence(400)]), tmp_path,
                         TurnOptions(), True, _WordTranscriber()))
    assert r.of(log.TranscriptPartialEntry)
    warmed = r.of(log.PromptWarmedEntry)
    pause = r.of(log.PauseEntry)
    assert warmed and len(pause) == 1 and all(w.t_ms < pause[0].t_ms for w in warmed)
    assert warmed[0].tokens > 0 and warmed[-1].tokens > warmed[0].tokens
    spec = r.of(log.SpeculationStartedEntry)[0]
    assert spec.text.startswith(warmed[-1].text)  # what the speculation found cached
    assert r.of(log.ResponseStartedEntry)[0].speculation == "hit"
    m = r.result.metrics
    assert m.sequence_matches_history and m.history_text_matches


def test_without_listening_partials_the_users_turn_is_decoded_at_its_pause_and_end(
        tmp_path: Path) -> None:
    """The daemon's way (server.listening_partials false): no re-decodes while the user
    has the floor, so the prompt is computed at the pause; the reply is the same hit."""
    signal = np.concatenate([silence(300), voice(1500), silence(400)])
    transcriber = _WordTranscriber()
    r = asyncio.run(_run(signal, tmp_path, TurnOptions(), True, transcriber,
                         listening_partials=False))
    assert r.of(log.TranscriptPartialEntry) == [] and r.of(log.PromptWarmedEntry) == []
    assert r.of(log.ResponseStartedEntry)[0].speculation == "hit"
    assert r.of(log.ResponseDoneEntry)[0].text == scripted_reply(
        r.of(log.TranscriptFinalEntry)[0].text)
    decodes = transcriber.calls
    with_partials = _WordTranscriber()
    asyncio.run(_run(signal, tmp_path, TurnOptions(), True, with_partials))
    assert decodes < with_partials.calls  # the partials' re-decodes are what went
    m = r.result.metrics
    assert m.sequence_matches_history and m.history_text_matches


def test_without_listening_partials_speech_over_a_reply_still_gets_them(
        tmp_path: Path) -> None:
    """Partials of speech over the reply decide the interruption: they stay."""
    signal = np.concatenate([silence(300), voice(1000), silence(570 + 1200), voice(1500),
                             silence(600)])
    r = asyncio.run(_run(signal, tmp_path, TurnOptions(), True, _WordTranscriber(),
                         listening_partials=False))
    reply = r.of(log.AudioStartedEntry)[0]
    partials = r.of(log.TranscriptPartialEntry)
    assert partials and all(e.t_ms > reply.t_ms for e in partials)
    assert len(r.of(log.BargeInEntry)) == 1
    assert r.of(log.ResponseDoneEntry)[0].interrupted


class _WhenTranscriber(CountingTranscriber):
    """Records when (clock ms) it decoded how much audio (ms)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock
        self.decoded: list[tuple[int, int]] = []

    def transcribe(self, pcm: np.ndarray, **kw: object) -> Any:
        self.decoded.append((self.clock.now_samples() * 1000 // RATE, pcm.size * 1000 // RATE))
        return super().transcribe(pcm, **kw)


def test_a_pause_is_transcribed_from_its_onset_and_that_decode_is_the_final(
        tmp_path: Path) -> None:
    # Speech 300-1100 ms: at 100 ms of silence (vad.pause_onset_ms) the utterance (from 0:
    # 300 ms of prefix padding) plus 100 ms of tail is decoded and the speculation starts
    # on it; the pause counts at 200 ms and its preview and the final use that decode: no
    # other of it.
    clock = VirtualClock(RATE)
    asr = _WhenTranscriber(clock)
    signal = np.concatenate([silence(300), voice(800), silence(400)])
    r = asyncio.run(_run(signal, tmp_path, TurnOptions(), True, asr, clock))
    assert (1200, 1200) in asr.decoded
    assert [d for d in asr.decoded if d[1] == 1200] == [(1200, 1200)]
    pause = r.of(log.PauseEntry)
    assert [p.t_ms for p in pause] == [1300]
    spec = r.of(log.SpeculationStartedEntry)
    assert [s.t_ms for s in spec] == [1200] and spec[0].text  # at the onset's decode
    assert r.of(log.TranscriptFinalEntry)[0].text == spec[0].text
    assert r.of(log.ResponseStartedEntry)[0].speculation == "hit"


def test_without_speculation_the_prompt_is_computed_live(tmp_path: Path) -> None:
    r = run(np.concatenate([silence(300), voice(800), silence(300)]), tmp_path,
            speculate=False, presynthesize=False)
    assert r.of(log.SpeculationStartedEntry) == []
    started = r.of(log.ResponseStartedEntry)[0]
    assert started.speculation == "none"
    assert started.prompt_tokens_computed == started.prompt_tokens
    assert r.result.metrics.speculation_hit_rate is None


class _GateLog(StepGate):
    """A step gate that notes, on the virtual clock, each change of a state hold."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(max_hold_s=0.05)
        self.clock = clock
        self.changes: list[tuple[int, bool]] = []
        """(ms, held) at each change."""

    def set_held(self, reason: Hashable, held: bool) -> None:
        if held != (self.changes[-1][1] if self.changes else False):
            self.changes.append((self.clock.now_samples() * 1000 // RATE, held))
        super().set_held(reason, held)


@pytest.mark.parametrize(("over_ms", "min_loud_blocks", "words"),
                         [(400, 10, False), (800, 5, True)])
def test_a_paused_reply_holds_the_engine_until_its_cut_is_decided(
        tmp_path: Path, over_ms: int, min_loud_blocks: int, words: bool) -> None:
    # Speech over the reply pauses it (tentative). No words in it (a cough): it plays on.
    # Words, heard only once enough of it was said: the cut stands. Either way the
    # engine's steps wait from the pause until the decision, and not after it.
    signal = np.concatenate([silence(300), voice(1000), silence(570 + 800), voice(over_ms),
                             silence(1500)])
    clock = VirtualClock(RATE)
    gate = _GateLog(clock)
    turns = TurnOptions(interruption=InterruptionOptions(mode="tentative"))
    r = asyncio.run(_run(signal, tmp_path, turns, True, CountingTranscriber(min_loud_blocks),
                         clock=clock, gate=gate))
    (paused,) = r.of(log.InterruptionPausedEntry)
    decided = r.of(log.InterruptionCommittedEntry if words else log.InterruptionResumedEntry)
    assert len(decided) == 1
    (start, held), (end, released) = gate.changes
    assert held and not released and not gate.held
    assert paused.t_ms <= start < decided[0].t_ms <= end <= decided[0].t_ms + 20
    # The public stream: the speech over the reply is the user's turn only once its cut
    # stands (published then, from its own start); a cough the reply played on over is
    # never published at all.
    started = [e for e in r.outputs if isinstance(e, out.SpeechStarted)]
    assert len(started) == (2 if words else 1)
    if words:
        assert started[1].t_ms < paused.t_ms  # its own time, published at the cut
    assert sum(isinstance(e, out.ResponseDone) for e in r.outputs) == 1 + int(words)


class _HeardSpeaker(EchoProcessor):
    """Echo handling off (the mic passes as it is) where the speaker is known to reach
    the microphone: words over the reply may be its own, heard back."""

    @property
    def echo_heard(self) -> bool | None:
        return True


@pytest.mark.parametrize("heard", [False, True])
def test_words_over_the_reply_that_it_just_played_are_its_echo(
        tmp_path: Path, heard: bool, caplog: pytest.LogCaptureFixture) -> None:
    # The reply says the user's code words back ("You said alpha bravo charlie ...");
    # speech over it is transcribed as its first code words, "alpha bravo charlie". With
    # the speaker heard in the microphone those are the reply's echo: the reply resumes.
    # Without, they are the user's words: the cut stands.
    signal = np.concatenate([silence(300), voice(1000), silence(1370 + 600), voice(300),
                             silence(1500)])
    turns = TurnOptions(interruption=InterruptionOptions(mode="tentative"))
    echo = _HeardSpeaker(EchoOptions(mode="off")) if heard else None
    with caplog.at_level(logging.DEBUG, logger="assistant.loop.router"):
        r = asyncio.run(_run(signal, tmp_path, turns, True, CountingTranscriber(), echo=echo))
    assert len(r.of(log.InterruptionPausedEntry)) == 1
    # The debug log says why words did not cut the reply.
    assert any("heard back" in m for m in caplog.messages) is heard
    assert len(r.of(log.InterruptionResumedEntry)) == int(heard)
    assert len(r.of(log.InterruptionCommittedEntry)) == int(not heard)
    done = [e for e in r.outputs if isinstance(e, out.ResponseDone)]
    assert len(done) == 1 + int(not heard)  # a cut: the user's words get a reply

