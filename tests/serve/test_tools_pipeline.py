"""The client's tools through the real `PipelineBackend` and conversation, on a model
scripted to call them (tests/serve/tool_runtime.py): the call leaves as a
``function_call`` item, the client's ``function_call_output`` comes back through
``Conversation.submit_tool_outputs`` on ``response.create``, and the spoken answer uses
it -- in the history and in the engine's sequence alike."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from assistant.serve.backend import contract as B
from assistant.serve.protocol import client_events as C
from assistant.serve.protocol import server_events as S
from tests.serve.examples import WEATHER
from tests.serve.harness import Harness, harness
from tests.serve.support import backends, run, running_server, sdk_client
from tests.serve.test_tools_session import CALL_ITEM_EVENTS, _check_with_sdk, _text
from tests.serve.tool_runtime import scripted_runtime

OSLO = {"city": "Oslo"}


@pytest.fixture(scope="module")
def rt() -> Iterator[Any]:
    runtime = scripted_runtime()
    try:
        yield runtime
    finally:
        runtime.close()


def _manual(rt: Any, **changes: Any) -> B.SessionSettings:
    return dataclasses.replace(rt.defaults, turn_detection=None, **changes)


def _tools_update(**kw: Any) -> C.SessionUpdate:
    return C.SessionUpdate(session=C.SessionParam(tools=(WEATHER,), **kw))


async def _ask(h: Harness, text: str, count: int) -> Any:
    await h.client(_text(text))
    assert await h.client(C.ResponseCreate()) is None
    return (await h.wait_for("response.done", count, timeout=20))[-1]


async def _answer(h: Harness, call_id: str, output: str, count: int) -> Any:
    assert await h.client(C.ConversationItemCreate(item=C.ItemParam(
        type="function_call_output", call_id=call_id, output=output))) is None
    assert await h.client(C.ResponseCreate()) is None
    return (await h.wait_for("response.done", count, timeout=20))[-1]


def _spoken(h: Harness, response_id: str) -> tuple[str, int]:
    """(transcript deltas, audio bytes) sent for response ``response_id``."""
    text = "".join(e.delta for e in h.sent if isinstance(e, S.OutputAudioTranscriptDelta)
                   and e.response_id == response_id)
    audio = sum(len(e.delta) for e in h.sent if isinstance(e, S.OutputAudioDelta)
                and e.response_id == response_id)
    return text, audio


@pytest.mark.parametrize("vad", [False, True], ids=["manual-turns", "server-vad"])
def test_a_call_goes_out_and_the_spoken_answer_uses_its_output(rt: Any, vad: bool) -> None:
    settings = dataclasses.replace(rt.defaults) if vad else _manual(rt)

    async def main() -> None:
        backend = rt.backend_factory(settings)
        async with harness(backend, settings) as h:
            assert await h.client(_tools_update()) is None
            called = await _ask(h, "What is the weather in Oslo?", 1)
            (call,) = called.response.output
            assert (call.type, call.name, json.loads(call.arguments)) == (
                "function_call", "weather", OSLO)
            created = max(i for i, e in enumerate(h.sent) if e.type == "response.created")
            assert [e.type for e in h.sent[created + 1:]] == [*CALL_ITEM_EVENTS,
                                                               "response.done"]
            assert _spoken(h, called.response.id) == ("", 0)  # the call is not spoken

            answer = await _answer(h, call.call_id, '{"temp": 21}', 2)
            assert answer.response.status == "completed"
            (item,) = answer.response.output
            assert item.content[0].transcript == "It is 21 degrees in Oslo."
            text, audio = _spoken(h, answer.response.id)
            assert text == "It is 21 degrees in Oslo." and audio > 0
            context = await backend.context_text()
            asked = context.index("user: What is the weather in Oslo?\nassistant: <tool_call>")
            assert context[asked:].endswith(
                '"city":"Oslo"}}\ntool: {"temp": 21}\nassistant: It is 21 degrees in Oslo.')
            await backend.sequence_text()  # raises unless the engine holds the history
            _check_with_sdk(h.sent)

    run(main())


def test_words_before_the_call_are_spoken_as_a_message_item(rt: Any) -> None:
    async def main() -> None:
        settings = _manual(rt)
        async with harness(rt.backend_factory(settings), settings) as h:
            await h.client(_tools_update())
            done = await _ask(h, "Check first: the weather in Oslo?", 1)
            message, call = done.response.output
            assert message.content[0].transcript == "Let me check."
            assert call.type == "function_call" and json.loads(call.arguments) == OSLO
            text, audio = _spoken(h, done.response.id)
            assert text.strip() == "Let me check." and audio > 0
            _check_with_sdk(h.sent)

    run(main())


def test_tool_outputs_are_recorded_before_new_user_words(rt: Any) -> None:
    """An output and a user message, then response.create: the outputs go into the
    history first (no reply of their own), and the words are answered."""
    async def main() -> None:
        settings = _manual(rt)
        backend = rt.backend_factory(settings)
        async with harness(backend, settings) as h:
            await h.client(_tools_update())
            called = await _ask(h, "Weather?", 1)
            call_id = called.response.output[0].call_id
            await h.client(C.ConversationItemCreate(item=C.ItemParam(
                type="function_call_output", call_id=call_id, output='{"temp": 3}')))
            done = await _ask(h, "Never mind, hi.", 2)
            assert done.response.output[0].content[0].transcript == "Hello there, how can I help?"
            assert (await backend.context_text()).endswith(
                '"city":"Oslo"}}\ntool: {"temp": 3}\nuser: Never mind, hi.\n'
                'assistant: Hello there, how can I help?')
            await backend.sequence_text()

    run(main())


def test_an_unreadable_call_is_reported_and_nothing_is_sent() -> None:
    # An engine that cannot decode under a schema: the garbled call is read as written.
    rt = scripted_runtime(constrained=False)

    async def main() -> None:
        settings = _manual(rt)
        async with harness(rt.backend_factory(settings), settings) as h:
            await h.client(_tools_update())
            done = await _ask(h, "garbled weather please", 1)
            (error,) = [e for e in h.sent if isinstance(e, S.Error)]
            assert error.error.code == "invalid_tool_call"
            assert not [e for e in h.sent if isinstance(e, S.FunctionCallArgumentsDone)]
            assert all(item.type == "message" for item in done.response.output)
            nothing = await h.client(C.ResponseCreate())
            assert nothing is not None and nothing.code == "no_user_input"

    try:
        run(main())
    finally:
        rt.close()


def test_tools_on_a_conversation_started_without_instructions_are_refused(rt: Any) -> None:
    """Tools live in the system prompt; a conversation that began without one cannot
    get one later (before the first turn it is rebuilt instead)."""
    async def main() -> None:
        settings = _manual(rt, instructions="")
        backend = rt.backend_factory(settings)
        async with harness(backend, settings) as h:
            await _ask(h, "Hi.", 1)
            err = await h.client(_tools_update())
            assert err is not None and (err.code, err.param) == ("unsupported_value",
                                                                 "session.tools")
            assert "system prompt" in err.message
            assert h.session.settings.tools == ()
        fresh = rt.backend_factory(settings)
        async with harness(fresh, settings) as h:
            assert await h.client(_tools_update()) is None  # before the first turn
            done = await _ask(h, "Weather in Oslo?", 1)
            assert done.response.output[0].type == "function_call"
            system = (await fresh.context_text()).split("\nuser: ")[0]
            assert system.startswith("system: ") and '"weather"' in system

    run(main())


def test_tools_added_mid_conversation_reach_the_system_prompt(rt: Any) -> None:
    async def main() -> None:
        settings = _manual(rt)
        backend = rt.backend_factory(settings)
        async with harness(backend, settings) as h:
            first = await _ask(h, "What is the weather in Oslo?", 1)  # no tools: an answer
            assert first.response.output[0].type == "message"
            assert await h.client(_tools_update()) is None
            second = await _ask(h, "And the weather now?", 2)
            assert second.response.output[0].type == "function_call"
            system = (await backend.context_text()).split("\nuser: ")[0]
            assert '"weather"' in system
            assert await h.client(C.SessionUpdate(session=C.SessionParam(
                tool_choice="none"))) is None
            await _answer(h, second.response.output[0].call_id, '{"temp": 5}', 3)
            await backend.sequence_text()

    run(main())


def test_a_daemon_with_its_own_tools_refuses_the_clients(rt: Any) -> None:
    from assistant.loop.tool_worker import LocalTools
    from assistant.tools import ToolRegistry

    own = dataclasses.replace(rt, settings=dataclasses.replace(
        rt.settings, tools=LocalTools(ToolRegistry([]))))

    async def main() -> None:
        settings = _manual(rt)
        async with harness(own.backend_factory(settings), settings) as h:
            err = await h.client(_tools_update())
            assert err is not None and err.param == "session.tools"
            assert "tools.enabled" in err.message

    run(main())


def test_the_official_sdk_calls_a_tool_and_hears_the_answer(rt: Any) -> None:
    """The openai SDK's own client and typed events: a session with a tool, a text
    question the model answers with a call, the output sent back, the answer spoken."""
    from openai.types.realtime import (
        ConversationItemAdded,
        ResponseFunctionCallArgumentsDeltaEvent,
        ResponseFunctionCallArgumentsDoneEvent,
        ResponseOutputItemAddedEvent,
    )

    async def main() -> None:
        async with running_server(backend=rt.backend_factory) as server, sdk_client(
                server).realtime.connect(model="local") as conn:
            assert (await conn.recv()).type == "session.created"
            await conn.session.update(session={
                "type": "realtime", "tools": [WEATHER], "tool_choice": "auto",
                "audio": {"input": {"turn_detection": None}}})
            updated = await _sdk_next(conn, "session.updated")
            assert updated.session.tools[0].name == "weather"
            await conn.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "What is the weather in Oslo?"}]})
            await conn.response.create()
            seen = await _sdk_until(conn, "response.done")
            added = next(e for e in seen if isinstance(e, ResponseOutputItemAddedEvent))
            assert added.item.type == "function_call"
            assert any(isinstance(e, ConversationItemAdded) and e.item.id == added.item.id
                       for e in seen)
            delta = next(e for e in seen if isinstance(e, ResponseFunctionCallArgumentsDeltaEvent))
            done = next(e for e in seen if isinstance(e, ResponseFunctionCallArgumentsDoneEvent))
            assert json.loads(done.arguments) == OSLO and done.name == "weather"
            assert delta.call_id == done.call_id
            response = seen[-1].response
            assert [o.type for o in response.output] == ["function_call"]

            await conn.conversation.item.create(item={
                "type": "function_call_output", "call_id": done.call_id,
                "output": json.dumps({"temp": 21})})
            await conn.response.create()
            answer = await _sdk_until(conn, "response.done")
            audio = [e for e in answer if e.type == "response.output_audio.delta"]
            transcript = "".join(e.delta for e in answer
                                 if e.type == "response.output_audio_transcript.delta")
            assert audio and transcript == "It is 21 degrees in Oslo."
            assert answer[-1].response.output[0].content[0].transcript == transcript
            assert "tool: " in await backends(server)[0].context_text()

    run(main(), timeout=60)


async def _sdk_next(conn: Any, event_type: str) -> Any:
    return (await _sdk_until(conn, event_type))[-1]


async def _sdk_until(conn: Any, event_type: str) -> list[Any]:
    seen: list[Any] = []
    async for event in conn:
        seen.append(event)
        assert event.type != "error", event
        if event.type == event_type:
            return seen
    raise AssertionError(f"connection closed before {event_type}")


@pytest.mark.slow
def test_sdk_spoken_request_calls_a_tool_and_hears_the_spoken_answer(serve_runtime: Any) -> None:
    """Real speech both ways (Whisper hears the question, Piper speaks the answer) around
    the scripted model, under server VAD, through the official SDK: the spoken question
    becomes a call, the client's output is answered aloud, and the answer's audio says
    what the output held."""
    import base64

    import numpy as np

    from audio.resample import resample
    from tests.serve.support import b64, piper_speech

    models = serve_runtime.models
    runtime = scripted_runtime(transcriber=models.transcriber, synthesizer=models.synthesizer)
    question = piper_speech(serve_runtime, "What is the weather in Oslo?")
    audio = np.concatenate([np.zeros(4800, np.int16), question, np.zeros(24000, np.int16)])

    async def main() -> None:
        async with running_server(backend=runtime.backend_factory) as server, sdk_client(
                server).realtime.connect(model="local") as conn:
            await _sdk_next(conn, "session.created")
            await conn.session.update(session={"type": "realtime", "tools": [WEATHER]})
            await _sdk_next(conn, "session.updated")
            for i in range(0, len(audio), 2400):
                await conn.input_audio_buffer.append(audio=b64(audio[i:i + 2400]))
            seen = await _sdk_until(conn, "response.done")
            heard = next(e for e in seen if e.type ==
                         "conversation.item.input_audio_transcription.completed")
            assert "weather" in heard.transcript.lower()
            (call,) = seen[-1].response.output
            assert call.type == "function_call" and json.loads(call.arguments) == OSLO
            assert not [e for e in seen if e.type == "response.output_audio.delta"]

            await conn.conversation.item.create(item={
                "type": "function_call_output", "call_id": call.call_id,
                "output": json.dumps({"temp": 21})})
            await conn.response.create()
            answer = await _sdk_until(conn, "response.done")
            transcript = "".join(e.delta for e in answer
                                 if e.type == "response.output_audio_transcript.delta")
            assert transcript == "It is 21 degrees in Oslo."
            pcm = np.frombuffer(b"".join(base64.b64decode(e.delta) for e in answer
                                         if e.type == "response.output_audio.delta"), "<i2")
            assert len(pcm) > 24000  # over a second of speech
            said = await asyncio.to_thread(
                models.transcriber.transcribe,
                resample(pcm.astype(np.float32) / 32768, 24000, 16000))
            assert "21" in said.text or "twenty" in said.text.lower()
        await asyncio.to_thread(runtime.check_engine)

    try:
        run(main(), timeout=180)
    finally:
        runtime.close()


def test_each_session_of_a_daemon_with_its_own_tools_has_its_own_timers() -> None:
    """tools.enabled on the daemon: every session runs them, each with its own timer
    service (a timer set in one session is announced in that one only)."""
    runtime = scripted_runtime(overrides={"tools.enabled": ["builtin:set_timer"]})

    async def main() -> None:
        settings = _manual(runtime)
        a, b = runtime.backend_factory(settings), runtime.backend_factory(settings)
        try:
            # The conversations' settings are the backends' own (read for the test).
            ta = (await a._ensure_ready()).settings.tools
            tb = (await b._ensure_ready()).settings.tools
            assert ta is not None and tb is not None
            assert ta.registry.names == tb.registry.names == ("set_timer",)
            assert ta.timers is not None and tb.timers is not None
            assert ta.timers is not tb.timers
        finally:
            await a.aclose()
            await b.aclose()

    try:
        run(main())
    finally:
        runtime.close()
