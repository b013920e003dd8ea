"""The daemon over real loopback sockets with the scripted backend: the official OpenAI
SDK as client (GA and beta), auth, admission, HTTP endpoints and graceful shutdown."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from assistant.app.errors import UserError
from assistant.serve.transport.limits import ServerLimits
from assistant.serve.transport.server import RealtimeServer, ServerOptions
from tests.serve.fake_backend import FakeBackend
from tests.serve.support import (
    DEFAULTS,
    SERVED,
    append_messages,
    b64,
    backends,
    drained,
    one_turn,
    raw_client,
    recv_json,
    run,
    running_server,
    sdk_client,
    until,
    utterance,
)


async def _http_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    def get() -> tuple[int, str, str]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", path, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
        finally:
            conn.close()

    return await asyncio.to_thread(get)


def test_openai_sdk_client_talks_truncates_and_sees_the_heard_words() -> None:
    async def main() -> None:
        async with running_server() as server:
            client = sdk_client(server)
            async with client.realtime.connect(model="test-llm") as conn:
                created = await conn.recv()
                assert created.type == "session.created"
                assert created.session.audio.input.turn_detection.silence_duration_ms == 500
                await conn.session.update(session={"type": "realtime", "instructions": "hi"})
                for chunk in range(0, len(pcm := utterance()), 2400):
                    await conn.input_audio_buffer.append(audio=b64(pcm[chunk : chunk + 2400]))
                transcript, audio_bytes, text = None, 0, []
                item_id = None
                items: list[tuple[str, str, str]] = []
                async for event in conn:
                    if event.type.startswith("conversation.item."):
                        assert event.type != "conversation.item.created"  # a beta name
                        if hasattr(event, "item"):
                            items.append((event.type, event.item.role, event.item.status))
                    if event.type == "conversation.item.input_audio_transcription.completed":
                        transcript = event.transcript
                    elif event.type == "response.output_audio.delta":
                        audio_bytes += len(base64.b64decode(event.delta))
                        item_id = event.item_id
                    elif event.type == "response.output_audio_transcript.delta":
                        text.append(event.delta)
                    elif event.type == "response.done":
                        break
                assert transcript is not None and transcript.startswith("speech of")
                assert items == [
                    ("conversation.item.added", "user", "completed"),
                    ("conversation.item.done", "user", "completed"),
                    ("conversation.item.added", "assistant", "in_progress"),
                    ("conversation.item.done", "assistant", "completed"),
                ]
                assert "".join(text) == "one two three four five six"
                assert audio_bytes == 6 * 200 * 24 * 2
                await conn.conversation.item.truncate(item_id=item_id, content_index=0,
                                                      audio_end_ms=450)
                truncated = await conn.recv()
                assert truncated.type == "conversation.item.truncated"
                assert truncated.audio_end_ms == 450
                await conn.conversation.item.retrieve(item_id=item_id)
                retrieved = await conn.recv()
                assert retrieved.item.content[0].transcript == "one two"
            backend = backends(server)[0]
            assert (await backend.context_text()).endswith("assistant: one two")

    run(main())


def test_beta_sdk_client_gets_the_older_event_names() -> None:
    async def main() -> None:
        async with running_server() as server:
            client = sdk_client(server)
            async with client.beta.realtime.connect(model="test-llm") as conn:
                created = await conn.recv()
                assert created.type == "session.created"
                assert created.session.turn_detection.silence_duration_ms == 500
                await conn.session.update(session={"voice": "alloy", "instructions": "x"})
                updated = await conn.recv()
                assert updated.type == "session.updated" and updated.session.voice == "joe"
                for message in append_messages(utterance()):
                    await conn.send(json.loads(message))
                types: list[str] = []
                async for event in conn:
                    types.append(event.type)
                    if event.type == "response.done":
                        break
                assert "response.audio.delta" in types
                assert "response.audio_transcript.delta" in types
                assert "response.output_audio.delta" not in types
                assert types.count("conversation.item.created") == 2  # user, assistant
                assert not {"conversation.item.added", "conversation.item.done"} & set(types)

    run(main())


def test_token_is_checked_before_any_audio_is_accepted() -> None:
    async def main() -> None:
        async with running_server(token="s3cret") as server:
            for key in ("wrong", None):
                headers = {} if key is None else {"Authorization": f"Bearer {key}"}
                with pytest.raises(InvalidStatus) as info:
                    async with raw_client(server, additional_headers=headers):
                        pass
                assert info.value.response.status_code == 401
            with pytest.raises(InvalidStatus):
                async with sdk_client(server, api_key="wrong").realtime.connect(model="m"):
                    pass
            assert backends(server) == []  # type: ignore[attr-defined]
            async with sdk_client(server, api_key="s3cret").realtime.connect(model="m") as conn:
                assert (await conn.recv()).type == "session.created"
            # browsers carry the token in a subprotocol
            async with raw_client(
                server, subprotocols=["realtime", "openai-insecure-api-key.s3cret"]
            ) as ws:
                assert ws.subprotocol == "realtime"
                assert (await recv_json(ws))["type"] == "session.created"
            status, _, _ = await _http_get(server.port, "/metrics")
            assert status == 401
            status, _, body = await _http_get(
                server.port, "/metrics", {"Authorization": "Bearer s3cret"}
            )
            assert status == 200 and "assistant_sessions_rejected_total" in body

    run(main())


def test_non_loopback_bind_requires_a_token() -> None:
    def make(token: str | None) -> RealtimeServer:
        return RealtimeServer(
            ServerOptions(host="0.0.0.0", port=0, token=token),
            backend_factory=lambda s: FakeBackend(s),
            defaults=DEFAULTS,
            served=SERVED,
        )

    with pytest.raises(UserError, match="token"):
        make(None)
    assert make("tok").options.token == "tok"  # constructed, never bound


def test_browser_origin_without_token_is_refused() -> None:
    async def main() -> None:
        async with running_server() as server:
            with pytest.raises(InvalidStatus) as info:
                async with raw_client(server, origin="http://evil.example"):
                    pass
            assert info.value.response.status_code == 403

    run(main())


def test_extra_client_gets_an_error_event_and_a_close() -> None:
    async def main() -> None:
        async with running_server(limits=ServerLimits(max_sessions=2)) as server:
            async with raw_client(server) as a, raw_client(server) as b:
                await recv_json(a)
                await recv_json(b)
                async with raw_client(server) as c:
                    event = await recv_json(c)
                    assert event["type"] == "error"
                    assert event["error"]["code"] == "session_limit_reached"
                    with pytest.raises(ConnectionClosed) as info:
                        await asyncio.wait_for(c.recv(), 5)
                    assert info.value.rcvd is not None and info.value.rcvd.code == 1013
            # the slots come back once clients leave
            turn = await one_turn(server)
            assert turn[-1]["response"]["status"] == "completed"
            assert len(backends(server)) == 3  # type: ignore[attr-defined]

    run(main())


def test_healthz_metrics_and_unknown_paths() -> None:
    async def main() -> None:
        async with running_server() as server:
            await one_turn(server)
            await drained(server)
            status, ctype, body = await _http_get(server.port, "/healthz")
            assert status == 200 and ctype.startswith("application/json")
            assert json.loads(body) == {"status": "ok", "sessions": 0, "max_sessions": 8}
            status, ctype, body = await _http_get(server.port, "/metrics")
            assert status == 200 and ctype.startswith("text/plain")
            metrics = _parse_metrics(body)
            assert metrics['assistant_sessions_total'] == 1
            assert metrics['assistant_responses_total{status="completed"}'] == 1
            assert metrics["assistant_voice_to_voice_seconds_count"] == 1
            assert metrics['assistant_session_closes_total{cause="client_closed"}'] == 1
            assert metrics["assistant_audio_in_seconds_total"] == pytest.approx(1.5)
            status, _, _ = await _http_get(server.port, "/nope")
            assert status == 404

    run(main())


def _parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_sigterm_style_shutdown_finishes_or_cancels_and_closes_with_a_reason() -> None:
    async def main() -> None:
        slow = lambda s: FakeBackend(s, word_delay_s=0.2, reply="a " * 40)  # noqa: E731
        limits = ServerLimits(shutdown_grace_s=0.3, close_timeout_s=1.0)
        async with running_server(backend=slow, limits=limits) as server:
            async with raw_client(server) as ws:
                await recv_json(ws)
                for message in append_messages(utterance()):
                    await ws.send(message)
                await until(ws, "response.output_audio.delta")
                stopping = asyncio.create_task(server.shutdown())
                done, _ = await until(ws, "response.done")
                assert done["response"]["status"] == "cancelled"
                assert done["response"]["status_details"]["reason"] == "shutdown"
                error, _ = await until(ws, "error")
                assert error["error"]["code"] == "server_shutdown"
                with pytest.raises(ConnectionClosed) as info:
                    await asyncio.wait_for(ws.recv(), 5)
                assert info.value.rcvd is not None
                assert (info.value.rcvd.code, info.value.rcvd.reason) == (1001, "server shutting down")
                await stopping
            assert backends(server)[0].closed  # type: ignore[attr-defined]
            status, _, body = await _http_get_or_refused(server.port)
            assert status is None  # no longer listening

    run(main())


async def _http_get_or_refused(port: int) -> tuple[int | None, str, str]:
    try:
        return await _http_get(port, "/healthz")
    except OSError:
        return None, "", ""


def test_shutdown_lets_a_short_response_finish() -> None:
    async def main() -> None:
        limits = ServerLimits(shutdown_grace_s=5.0)
        backend = lambda s: FakeBackend(s, word_delay_s=0.05)  # noqa: E731
        async with running_server(backend=backend, limits=limits) as server, raw_client(
            server
        ) as ws:
            await recv_json(ws)
            for message in append_messages(utterance()):
                await ws.send(message)
            await until(ws, "response.created")
            stopping = asyncio.create_task(server.shutdown())
            done, _ = await until(ws, "response.done")
            assert done["response"]["status"] == "completed"
            await stopping

    run(main())


def test_parallel_sessions_are_independent() -> None:
    async def main() -> None:
        async with running_server() as server:
            turns: list[Any] = await asyncio.gather(*(one_turn(server) for _ in range(4)))
            for turn in turns:
                assert turn[-1]["response"]["status"] == "completed"
            ids = {turn[0]["session"]["id"] for turn in turns}
            assert len(ids) == 4

    run(main())


def test_engine_gauges_are_read_at_scrape_time_and_a_failing_read_is_skipped() -> None:
    state = {"used": 3, "fail": False}

    def gauges() -> dict[str, int]:
        if state["fail"]:
            raise RuntimeError("engine busy")
        return {"pages_used": state["used"], "pages_shared": 1, "tokens_computed": 40}

    async def scrape(port: int) -> dict[str, float]:
        return _parse_metrics((await _http_get(port, "/metrics"))[2])

    async def main() -> None:
        server = RealtimeServer(ServerOptions(port=0), backend_factory=lambda s: FakeBackend(s),
                                defaults=DEFAULTS, served=SERVED, engine_gauges=gauges)
        await server.start()
        try:
            first = await scrape(server.port)
            state["used"] = 7
            second = await scrape(server.port)
            state["fail"] = True
            failed = await scrape(server.port)
        finally:
            await server.shutdown()
        assert first["assistant_engine_pages_used"] == 3
        assert second["assistant_engine_pages_used"] == 7
        assert second["assistant_engine_pages_shared"] == 1
        assert second["assistant_engine_tokens_computed_total"] == 40
        assert "assistant_engine_pages_used" not in failed
        assert "assistant_sessions_active" in failed

    run(main())
