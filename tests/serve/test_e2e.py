"""Acceptance: the daemon on the real models, driven by the official OpenAI SDK.

Speech is synthesised with the packaged Piper voice, streamed as ``input_audio_buffer``
appends, transcribed by Whisper, answered by the engine and spoken back; a truncate after
part of the reply's audio must leave only the heard words in the conversation *and* in
the engine's KV sequence that the next response is generated from.
"""

from __future__ import annotations

import asyncio
import base64
import re
from typing import Any

import numpy as np
import pytest

from tests.serve.support import b64, backends, piper_speech, run, running_server, sdk_client

pytestmark = pytest.mark.slow


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]+", " ", text.lower()).split()


async def _speak(conn: Any, pcm: np.ndarray, chunk_ms: int = 100) -> None:
    audio = np.concatenate([np.zeros(4800, np.int16), pcm, np.zeros(24000, np.int16)])
    step = 24 * chunk_ms
    for i in range(0, len(audio), step):
        await conn.input_audio_buffer.append(audio=b64(audio[i : i + step]))


async def _turn(conn: Any) -> dict[str, Any]:
    """Read one turn's events up to response.done."""
    out: dict[str, Any] = {"audio": 0, "text": [], "types": [], "transcript": None}
    async for event in conn:
        out["types"].append(event.type)
        if event.type == "conversation.item.input_audio_transcription.completed":
            out["transcript"] = event.transcript
        elif event.type == "response.output_audio.delta":
            out["audio"] += len(base64.b64decode(event.delta)) // 2
            out["item_id"] = event.item_id
        elif event.type == "response.output_audio_transcript.delta":
            out["text"].append(event.delta)
        elif event.type == "error":
            raise AssertionError(f"error event: {event.error}")
        elif event.type == "response.done":
            out["done"] = event
            return out
    raise AssertionError("connection closed before response.done")


async def _next(conn: Any, event_type: str) -> Any:
    async for event in conn:
        if event.type == event_type:
            return event
        assert event.type != "error", event
    raise AssertionError(f"connection closed before {event_type}")


def test_sdk_speech_turn_truncate_then_next_turn_sees_only_heard_words(serve_runtime: Any) -> None:
    rt = serve_runtime
    question = piper_speech(rt, "What is the capital of France?")
    follow_up = piper_speech(rt, "Thank you, please say that again.")

    async def main() -> None:
        async with running_server(backend=rt.backend_factory) as server:
            client = sdk_client(server)
            async with client.realtime.connect(model="local") as conn:
                assert (await conn.recv()).type == "session.created"
                instructions = "You are a helpful assistant. Answer in one short sentence."
                await conn.session.update(session={"type": "realtime",
                                                   "instructions": instructions})
                updated = await _next(conn, "session.updated")
                assert updated.session.instructions == instructions
                await _speak(conn, question)
                first = await _turn(conn)
                assert "france" in _words(first["transcript"])
                assert first["done"].response.status == "completed"
                full = "".join(first["text"])
                item = first["done"].response.output[0]
                assert item.content[0].transcript == full
                assert first["audio"] > 24000 * 0.3  # at least 300 ms of speech came back
                usage = first["done"].response.usage
                assert usage.output_tokens > 0
                assert 0 < usage.input_token_details.cached_tokens < usage.input_tokens

                # The client played 45% of the reply, then stopped and reported it.
                end_ms = first["audio"] * 1000 // 24000 * 45 // 100
                await conn.conversation.item.truncate(
                    item_id=first["item_id"], content_index=0, audio_end_ms=end_ms)
                truncated = await _next(conn, "conversation.item.truncated")
                assert truncated.audio_end_ms == end_ms
                await conn.conversation.item.retrieve(item_id=first["item_id"])
                kept = (await _next(conn, "conversation.item.retrieved")).item.content[0].transcript
                full_words, kept_words = _words(full), _words(kept)
                assert kept_words == full_words[: len(kept_words)]
                assert len(kept_words) < len(full_words)
                assert len(kept_words) <= 0.45 * len(full_words) + 2

                # The next response is generated from a context holding only those words.
                await _speak(conn, follow_up)
                second = await _turn(conn)
                assert second["done"].response.status == "completed"
                backend = backends(server)[0]
                lines = (await backend.context_text()).splitlines()
                assert lines[0] == f"system: {instructions}"
                assert lines[1].startswith("user: ") and "france" in _words(lines[1])
                assert lines[2] == f"assistant: {kept}".rstrip()
                assert lines[3].startswith("user: ")
                # In the engine's sequence, the first reply ends right after the heard words.
                sequence = await backend.sequence_text()  # type: ignore[attr-defined]
                eot = rt.models.template.end_of_turn_text.strip()
                messages = sequence.split(eot)  # system, user, assistant, user, assistant, ...
                assert messages[2].rstrip().endswith(kept)
                dropped = full[len(kept):].strip()
                assert dropped and dropped not in messages[2]
        # Every page went back to free or cached; the invariants hold.
        rt.check_engine()
        assert rt.engine_stats()["pages_used"] == 0
        assert rt.engine_stats()["sequences"] == 0

    run(main(), timeout=180)


def test_sessions_share_system_prompt_pages_and_batched_decode(serve_runtime: Any) -> None:
    rt = serve_runtime
    runner = rt.models.engine.runner
    batch_sizes: list[int] = []
    real_decode = runner.decode

    def recording_decode(items: Any) -> Any:
        batch_sizes.append(len(items))
        return real_decode(items)

    async def session(server: Any, ready: asyncio.Barrier, shared: list[int]) -> Any:
        async with sdk_client(server).realtime.connect(model="local") as conn:
            await _next(conn, "session.created")
            await conn.session.update(session={
                "type": "realtime",
                "output_modalities": ["text"],
                "audio": {"input": {"turn_detection": None}},
            })
            await _next(conn, "session.updated")
            await conn.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Tell me a long story about a knight."}],
            })
            await _next(conn, "conversation.item.done")
            await ready.wait()
            await conn.response.create()
            await _next(conn, "response.created")
            shared.append(rt.engine_stats()["pages_shared"])
            return await _next(conn, "response.done")

    async def main() -> None:
        async with running_server(backend=rt.backend_factory) as server:
            ready = asyncio.Barrier(2)
            shared: list[int] = []
            done = await asyncio.gather(session(server, ready, shared),
                                        session(server, ready, shared))
            for event in done:
                assert event.response.status == "completed"
                assert event.response.output[0].content[0].type == "output_text"
                assert event.response.output[0].content[0].text
            # The system prompt's full pages are held once, referenced by both sessions.
            assert max(shared) >= 1
        rt.check_engine()
        assert rt.engine_stats()["pages_used"] == 0

    runner.decode = recording_decode
    try:
        run(main(), timeout=180)
    finally:
        del runner.decode
    assert max(batch_sizes) >= 2, f"decode batches were {sorted(set(batch_sizes))}"


def test_barge_in_by_speech_cancels_the_reply_and_truncate_keeps_the_heard_words(
    serve_runtime: Any,
) -> None:
    """A client that streams its microphone in real time talks over the reply: server VAD
    cancels the response (turn_detected), the client reports how much it played, and
    the conversation keeps only that."""
    rt = serve_runtime
    question = piper_speech(rt, "Tell me a story about a brave little dragon.")
    interruption = piper_speech(rt, "Stop. What is two plus two?")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with running_server(backend=rt.backend_factory) as server, sdk_client(
            server
        ).realtime.connect(model="local") as conn:
            events: list[Any] = []
            arrived = asyncio.Event()

            async def reader() -> None:
                async for event in conn:
                    if event.type == "response.output_audio.delta":
                        event.t_received = loop.time()  # type: ignore[attr-defined]
                    events.append(event)
                    arrived.set()

            def seen(kind: str) -> list[Any]:
                return [e for e in events if e.type == kind]

            async def mic(pcm: np.ndarray, until: Any = None) -> None:
                """Real-time microphone: ``pcm`` then silence until ``until()``."""
                step, t = 2400, loop.time()
                chunks = [pcm[i : i + step] for i in range(0, len(pcm), step)]
                while chunks or (until is not None and not until()):
                    chunk = chunks.pop(0) if chunks else np.zeros(step, np.int16)
                    await conn.input_audio_buffer.append(audio=b64(chunk))
                    t += 0.1
                    await asyncio.sleep(max(0.0, t - loop.time()))

            reading = asyncio.create_task(reader())
            await mic(question, until=lambda: bool(seen("response.output_audio.delta")))
            first_audio = seen("response.output_audio.delta")[0].t_received
            await mic(np.zeros(24000 * 6 // 10, np.int16))  # listen 600 ms
            await mic(interruption, until=lambda: bool(seen("response.done")))
            done = seen("response.done")[0]
            assert done.response.status == "cancelled"
            assert done.response.status_details.reason == "turn_detected"
            starts = seen("input_audio_buffer.speech_started")
            assert len(starts) >= 2
            # The client stopped playback when it saw speech_started: that much was heard.
            played_ms = int((loop.time() - first_audio) * 1000)
            sent_ms = sum(len(base64.b64decode(e.delta)) for e in seen(
                "response.output_audio.delta") if e.response_id == done.response.id) // 48
            item_id = done.response.output[0].id
            end_ms = min(played_ms, sent_ms) * 8 // 10
            await conn.conversation.item.truncate(item_id=item_id, content_index=0,
                                                  audio_end_ms=end_ms)
            await mic(np.zeros(2400, np.int16), until=lambda: bool(seen(
                "conversation.item.truncated")) and len(seen("response.done")) >= 2)
            await conn.conversation.item.retrieve(item_id=item_id)
            await mic(np.zeros(2400, np.int16),
                      until=lambda: bool(seen("conversation.item.retrieved")))
            reading.cancel()
            kept = seen("conversation.item.retrieved")[0].item.content[0].transcript
            generated = done.response.output[0].content[0].transcript
            assert _words(kept) == _words(generated)[: len(_words(kept))]
            assert seen("response.done")[1].response.status == "completed"
            lines = (await backends(server)[0].context_text()).splitlines()
            assert lines[2] == f"assistant: {kept}".rstrip()
            assert "plus" in _words(lines[3])  # the interruption became the next user turn

    run(main(), timeout=180)
