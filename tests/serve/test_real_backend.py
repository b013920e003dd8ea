"""The real `PipelineBackend` (real ASR, engine and TTS on the shared engine thread),
driven through its `SessionBackend` API: ``response.cancel`` and a withdrawn reply take
the pipeline's public paths and leave the history equal to the engine's sequence."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import numpy as np
import pytest

from assistant.loop import event_log as L
from assistant.serve.backend import contract as B
from assistant.turns.end_of_turn import EAGERNESS
from tests.serve.support import piper_speech, run

pytestmark = pytest.mark.slow


class GatedVoice:
    """The shared Piper voice, but no audio comes out until the test opens the gate."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.open = threading.Event()

    @property
    def sample_rate(self) -> int:
        return int(self.inner.sample_rate)

    def synthesize_span(self, text: str, **kwargs: Any) -> Any:
        assert self.open.wait(60)
        return self.inner.synthesize_span(text, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def _until(backend: Any, seen: list[Any], pred: Any, timeout: float = 60.0) -> Any:
    async def pump() -> Any:
        async for event in backend.events():
            seen.append(event)
            if pred(event):
                return event
        raise AssertionError("backend closed")
    return await asyncio.wait_for(pump(), timeout)


async def _speak(backend: Any, pcm: np.ndarray, step: int = 2400) -> None:
    for i in range(0, len(pcm), step):
        await backend.push_audio(pcm[i : i + step])


async def _one_turn_holds_both(backend: Any) -> None:
    """The withdrawn reply left no trace: one user turn holds both utterances (France,
    then Germany), and the engine's sequence is the history."""
    context = (await backend.context_text()).splitlines()
    assert [line.split(":")[0] for line in context] == ["system", "user", "assistant"]
    assert "france" in context[1].lower() and "germany" in context[1].lower()
    await backend.sequence_text()  # raises unless sequence == history


def test_response_cancel_cuts_the_reply_to_what_was_heard(serve_runtime: Any) -> None:
    rt = serve_runtime
    manual = dataclasses.replace(rt.defaults, turn_detection=None)

    async def main() -> None:
        backend = rt.backend_factory(manual)
        seen: list[Any] = []
        try:
            backend.add_text("user", "Tell me a long story about a knight and a dragon.")
            key = backend.create_response(B.ResponseRequest())
            await _until(backend, seen, lambda e: isinstance(e, B.ResponseAudio))
            assert backend.cancel_response("client_cancelled")
            done = await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished))
            assert done.response_key == key
            assert (done.status, done.reason) == ("cancelled", "client_cancelled")
            assert not backend.cancel_response()  # nothing in flight any more
            context = (await backend.context_text()).splitlines()
            assert context[-1].rstrip() == f"assistant: {done.text}".rstrip()
            await backend.sequence_text()  # raises unless sequence == history
            # The conversation goes on from there.
            backend.add_text("user", "Thanks.")
            backend.create_response(B.ResponseRequest(max_output_tokens=8))
            again = await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished)
                                 and e.response_key != key)
            assert again.status == "completed" and again.usage.output_tokens <= 8
        finally:
            await backend.aclose()
        rt.check_engine()
        assert rt.engine_stats()["sequences"] == 0

    run(main(), timeout=180)


def test_a_reply_the_user_talks_into_before_it_plays_is_withdrawn(serve_runtime: Any) -> None:
    rt = serve_runtime
    voice = GatedVoice(rt.models.synthesizer)
    gated = dataclasses.replace(rt, models=dataclasses.replace(rt.models, synthesizer=voice))
    first = piper_speech(rt, "What is the capital of France?")
    more = piper_speech(rt, "And what about Germany, please?")
    silence = np.zeros(24000, np.int16)

    async def main() -> None:
        backend = gated.backend_factory(rt.defaults)
        seen: list[Any] = []
        try:
            await _speak(backend, np.concatenate([silence[:4800], first, silence]))
            started = await _until(backend, seen, lambda e: isinstance(e, B.ResponseStarted))
            # No audio can play yet (the voice is gated): the user goes on talking.
            await _speak(backend, np.concatenate([more, silence[:2400]]))
            done = await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished))
            assert done.response_key == started.response_key
            assert (done.status, done.reason) == ("cancelled", "turn_detected")
            assert not any(isinstance(e, B.ResponseAudio) for e in seen)
            voice.open.set()
            await _speak(backend, silence)
            answer = await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished)
                                  and e.response_key != started.response_key)
            assert answer.status == "completed"
            await _one_turn_holds_both(backend)
        finally:
            voice.open.set()
            await backend.aclose()
        rt.check_engine()
        assert rt.engine_stats()["sequences"] == 0

    run(main(), timeout=240)


def test_a_reply_the_user_goes_on_over_as_it_begins_is_withdrawn(serve_runtime: Any) -> None:
    # The reply's first audio has gone out; the user goes on with their turn before
    # continue_within_ms of it could play: the reply is withdrawn (its item deleted by
    # the session), and the next answers both utterances as one turn.
    rt = serve_runtime
    first = piper_speech(rt, "What is the capital of France?")
    more = piper_speech(rt, "And what about Germany, please?")
    silence = np.zeros(24000, np.int16)

    async def main() -> None:
        backend = rt.backend_factory(rt.defaults)
        seen: list[Any] = []
        try:
            await _speak(backend, np.concatenate([silence[:4800], first, silence]))
            audio = await _until(backend, seen, lambda e: isinstance(e, B.ResponseAudio))
            await _speak(backend, np.concatenate([more, silence[:2400]]))
            done = await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished))
            assert done.response_key == audio.response_key
            assert (done.status, done.withdrawn) == ("cancelled", True)
            await _speak(backend, silence)
            answer = await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished)
                                  and e.response_key != audio.response_key)
            assert answer.status == "completed" and not answer.withdrawn
            await _one_turn_holds_both(backend)
        finally:
            await backend.aclose()
        rt.check_engine()
        assert rt.engine_stats()["sequences"] == 0
        # The session's event log outlives it (bench_serve reads it after the level).
        started = [e for e in backend.log_entries() if isinstance(e, L.ResponseStartedEntry)]
        assert len(started) >= 2

    run(main(), timeout=240)


class CountingVoice:
    """The shared Piper voice, counting the clauses it is asked to speak."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.spoken: list[str] = []

    @property
    def sample_rate(self) -> int:
        return int(self.inner.sample_rate)

    def synthesize_span(self, text: str, **kwargs: Any) -> Any:
        self.spoken.append(text)
        return self.inner.synthesize_span(text, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_text_responses_are_not_spoken_and_audio_comes_in_small_deltas(serve_runtime: Any) -> None:
    """A text response (``output_modalities: ["text"]``) never reaches the voice, so its
    text is not held to speech pace; an audio response after it comes in pieces of at
    most ``audio_delta_ms``."""
    rt = serve_runtime
    voice = CountingVoice(rt.models.synthesizer)
    counted = dataclasses.replace(rt, models=dataclasses.replace(rt.models, synthesizer=voice),
                                  audio_delta_ms=120)
    manual = dataclasses.replace(rt.defaults, turn_detection=None)

    async def main() -> None:
        backend = counted.backend_factory(manual)
        seen: list[Any] = []
        try:
            backend.add_text("user", "What is the capital of France?")
            key = backend.create_response(B.ResponseRequest(output_modalities=("text",)))
            done = await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished))
            assert (done.response_key, done.status) == (key, "completed")
            texts = [e.delta for e in seen if isinstance(e, B.ResponseText)]
            assert done.text and "".join(texts).strip() == done.text.strip()
            assert not any(isinstance(e, B.ResponseAudio) for e in seen)
            assert voice.spoken == []
            context = (await backend.context_text()).splitlines()
            assert context[-1].rstrip() == f"assistant: {done.text}".rstrip()

            seen.clear()
            backend.add_text("user", "Say it again, please.")
            backend.create_response(B.ResponseRequest())  # the session's modality: audio
            again = await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished))
            assert again.status == "completed" and voice.spoken
            pieces = [len(e.pcm) // 2 for e in seen if isinstance(e, B.ResponseAudio)]
            assert len(pieces) > len(voice.spoken) and max(pieces) <= 24000 * 120 // 1000
            await backend.sequence_text()  # raises unless sequence == history
        finally:
            await backend.aclose()
        rt.check_engine()

    run(main(), timeout=180)


def _audible_ms(pcm: np.ndarray, rate: int = 24000, threshold: int = 300) -> int:
    """From the first to the end of the last audible 10 ms window of ``pcm``, in ms."""
    n = rate // 100
    windows = np.abs(pcm[: pcm.size // n * n].astype(np.int32)).reshape(-1, n).max(axis=1)
    loud = np.flatnonzero(windows > threshold)
    return int((loud[-1] + 1 - loud[0]) * 10)


def test_session_update_of_turn_detection_changes_the_pause_rule_that_follows(
        serve_runtime: Any) -> None:
    """semantic_vad (eager) -> server_vad with a long silence -> semantic_vad (low): each
    turn ends by the rule in force when it is spoken (the rule used to stay the session's
    first while only the VAD's limits followed the update)."""
    rt = serve_runtime
    eager = B.TurnDetectionSettings(type="semantic_vad", eagerness="high")
    fixed = B.TurnDetectionSettings(type="server_vad", silence_duration_ms=1500)
    patient = B.TurnDetectionSettings(type="semantic_vad", eagerness="low")
    # The question alone: the silence after it is the source's, once the client is quiet
    # (in real time, as a client's that streams; 4 s of it sent at once put the session's
    # audio clock 4 s ahead, and each reply waited for real time to catch up).
    question = piper_speech(rt, "What is the capital of France?")

    async def main() -> None:
        backend = rt.backend_factory(dataclasses.replace(rt.defaults, turn_detection=eager))
        seen: list[Any] = []
        gaps: list[int] = []  # from the end of the question to the end of the turn
        try:
            for td in (eager, fixed, patient):
                # Short replies: each is played out in real time before the next turn.
                backend.configure(dataclasses.replace(rt.defaults, turn_detection=td,
                                                      max_output_tokens=8))
                await _speak(backend, question)
                started = await _until(backend, seen,
                                       lambda e: isinstance(e, B.SpeechStarted))
                stopped = await _until(backend, seen,
                                       lambda e: isinstance(e, B.SpeechStopped))
                turn_ms = stopped.audio_end_ms - started.audio_start_ms
                gaps.append(turn_ms - td.prefix_padding_ms - _audible_ms(question))
                await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished))
                seen.clear()
            eager_gap, fixed_gap, patient_gap = gaps
            high, low = EAGERNESS["high"], EAGERNESS["low"]
            assert eager_gap <= high[1] + 100, gaps  # at most the eager rule's longest
            assert fixed_gap >= 1500 - 100, gaps  # the fixed silence, whatever was scored
            assert patient_gap >= low[0] - 50, gaps  # at least the patient rule's shortest
        finally:
            await backend.aclose()
        rt.check_engine()

    run(main(), timeout=240)


def test_instructions_changed_after_the_first_turn_lead_the_next_reply(
        serve_runtime: Any) -> None:
    rt = serve_runtime
    manual = dataclasses.replace(rt.defaults, turn_detection=None)

    async def main() -> None:
        backend = rt.backend_factory(manual)
        seen: list[Any] = []
        try:
            backend.add_text("user", "Hello there.")
            first = backend.create_response(B.ResponseRequest(max_output_tokens=12))
            await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished))
            pirate = "You are a pirate. Answer in one short sentence."
            backend.configure(dataclasses.replace(manual, instructions=pirate))
            backend.add_text("user", "What is your name?")
            backend.create_response(B.ResponseRequest(max_output_tokens=12))
            done = await _until(backend, seen, lambda e: isinstance(e, B.ResponseFinished)
                                and e.response_key != first)
            assert done.status == "completed"
            context = (await backend.context_text()).splitlines()
            assert context[0] == f"system: {pirate}"
            assert [line.split(":")[0] for line in context] == [
                "system", "user", "assistant", "user", "assistant"]
            await backend.sequence_text()  # raises unless sequence == history
            with pytest.raises(B.BackendRejected, match="cannot become empty"):
                backend.configure(dataclasses.replace(manual, instructions=""))
        finally:
            await backend.aclose()
        rt.check_engine()

    run(main(), timeout=240)
