"""Misbehaving clients: each gets an error event or a clean close, and a well-behaved
session running at the same time completes its turn unaffected."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from assistant.serve.transport.limits import ServerLimits
from assistant.serve.transport.server import RealtimeServer
from tests.serve.fake_backend import FakeBackend
from tests.serve.support import (
    append_messages,
    backends,
    one_turn,
    raw_client,
    recv_json,
    run,
    running_server,
    until,
    utterance,
)

LIMITS = ServerLimits(max_message_bytes=64 * 1024, session_queue=16, stall_timeout_s=1.0,
                      close_timeout_s=0.5)


async def _errors_for(ws: ClientConnection, messages: list[str | bytes]) -> list[dict[str, Any]]:
    """Send each message; collect the error event each one must produce."""
    errors = []
    for message in messages:
        await ws.send(message)
        event, _ = await until(ws, "error", timeout=5)
        errors.append(event["error"])
    return errors


async def _alongside(server: RealtimeServer, bad: Callable[[], Awaitable[Any]]) -> Any:
    """Run a misbehaving client next to a good one; the good one must finish its turn."""
    result, good = await asyncio.gather(bad(), one_turn(server))
    assert good[-1]["type"] == "response.done"
    assert good[-1]["response"]["status"] == "completed"
    assert good[-1]["response"]["output"][0]["content"][0]["transcript"] == (
        "one two three four five six"
    )
    return result


def test_malformed_messages_each_get_an_error_and_the_session_goes_on() -> None:
    cases: list[tuple[str | bytes, str]] = [
        ("{not json", "invalid_json"),
        ("", "invalid_json"),
        ("[]", "invalid_event"),
        ("null", "invalid_event"),
        ('{"no_type": 1}', "missing_event_type"),
        ('{"type": "conversation.item.fly"}', "unknown_event"),
        ('{"type": "input_audio_buffer.append", "audio": "***"}', "invalid_audio"),
        ('{"type": "input_audio_buffer.append", "audio": "AAEC"}', "invalid_audio"),  # 3 bytes
        ('{"type": "input_audio_buffer.append", "audio": 12}', "invalid_value"),
        ('{"type": "session.update", "session": {"audio": {"input": {"format": '
         '{"type": "audio/pcmu"}}}}}', "unsupported_audio_format"),
        ('{"type": "session.update", "session": {"input_audio_format": "g711_alaw"}}',
         "unsupported_audio_format"),
        ('{"type": "conversation.item.truncate", "item_id": "x", "audio_end_ms": "soon"}',
         "invalid_value"),
        (b"\x00\x01binary", "invalid_frame"),
        ("x" * (LIMITS.max_message_bytes + 1), "message_too_large"),
    ]

    async def bad(server: RealtimeServer) -> None:
        async with raw_client(server) as ws:
            await recv_json(ws)
            errors = await _errors_for(ws, [m for m, _ in cases])
            assert [e["code"] for e in errors] == [code for _, code in cases]
            # still a working session afterwards
            for message in append_messages(utterance()):
                await ws.send(message)
            done, _ = await until(ws, "response.done")
            assert done["response"]["status"] == "completed"

    async def main() -> None:
        async with running_server(limits=LIMITS) as server:
            await _alongside(server, lambda: bad(server))

    run(main())


def test_random_garbage_never_kills_the_session() -> None:
    rng = random.Random(1234)
    pieces = ['{"type":', '"input_audio_buffer.append"', '"audio":', '"AAAA"', "{", "}", "[",
              "]", ",", ":", '"', "null", "1e999", "-0", '"\\ud800"', "\x00", " ", "true"]
    messages: list[str | bytes] = [
        "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(40)
    ]

    async def main() -> None:
        async with running_server(limits=LIMITS) as server, raw_client(server) as ws:
            await recv_json(ws)
            for message in messages:
                await ws.send(message)
            # Any of them may be accepted (e.g. a valid empty append); those that are
            # not must each have produced an error, and the socket must still work.
            await ws.send('{"type": "input_audio_buffer.clear", "event_id": "probe"}')
            cleared, seen = await until(ws, "input_audio_buffer.cleared")
            assert all(e["type"] == "error" for e in seen)
            assert len(seen) >= 30

    run(main())


def test_oversized_frame_beyond_the_hard_limit_is_closed_with_1009() -> None:
    async def bad(server: RealtimeServer) -> int:
        async with raw_client(server, max_size=None) as ws:
            await recv_json(ws)
            await ws.send("x" * (LIMITS.hard_message_bytes + 10))
            with pytest.raises(ConnectionClosed) as info:
                while True:
                    await asyncio.wait_for(ws.recv(), 5)
            assert info.value.rcvd is not None
            return info.value.rcvd.code

    async def main() -> None:
        async with running_server(limits=LIMITS) as server:
            code = await _alongside(server, lambda: bad(server))
            assert code == 1009

    run(main())


async def _set_instructions(ws: ClientConnection, text: str) -> None:
    await ws.send(json.dumps({"type": "session.update", "session": {"instructions": text}}))
    await until(ws, "session.updated")


def _count(server: RealtimeServer, cause: str) -> float:
    metrics = server.metrics.render().decode()
    key = f'assistant_session_closes_total{{cause="{cause}"}} '
    for line in metrics.splitlines():
        if line.startswith(key):
            return float(line.split()[-1])
    return 0.0


def test_a_client_that_stops_reading_is_disconnected() -> None:
    async def bad(server: RealtimeServer) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.setblocking(False)
        async with connect(f"{server.url}/realtime", sock=sock, max_queue=1,
                           close_timeout=1) as ws:
            await recv_json(ws)
            await _set_instructions(ws, "flood")  # a 10-minute reply
            for message in append_messages(utterance()):
                await ws.send(message)
            # ... and never read again. The server must give up on us by itself.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while _count(server, "stalled") < 1 and loop.time() < deadline:
                await asyncio.sleep(0.1)

    async def main() -> None:
        async with running_server(limits=LIMITS) as server:
            await _alongside(server, lambda: bad(server))
            assert _count(server, "stalled") == 1
            flooded = [b for b in backends(server) if b.settings.instructions == "flood"]
            assert len(flooded) == 1 and flooded[0].closed  # its resources were released

    run(main(), timeout=60)


def test_a_client_that_disconnects_mid_response_is_cleaned_up() -> None:
    async def bad(server: RealtimeServer) -> None:
        ws = await connect(f"{server.url}/realtime")
        await recv_json(ws)
        await _set_instructions(ws, "slow")
        for message in append_messages(utterance()):
            await ws.send(message)
        await until(ws, "response.output_audio.delta")
        ws.transport.abort()  # vanish mid-response, without a closing handshake

    async def main() -> None:
        async with running_server(limits=LIMITS) as server:
            await _alongside(server, lambda: bad(server))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while server.active_sessions and loop.time() < deadline:
                await asyncio.sleep(0.05)
            assert server.active_sessions == 0
            assert len(backends(server)) == 2
            assert all(b.closed for b in backends(server))
            assert _count(server, "client_closed") == 2

    run(main())


def test_audio_flood_is_held_back_and_nothing_is_dropped() -> None:
    """A client pushing audio far faster than the backend consumes it is held back by
    the bounded input queue (TCP backpressure); every chunk is still processed, in full,
    and a concurrent session is unaffected."""
    slow = lambda s: FakeBackend(s, frame_delay_s=0.002, input_queue=4)  # noqa: E731
    chunks = 300  # 30 s of audio, 100 ms per message

    async def bad(server: RealtimeServer) -> None:
        async with raw_client(server) as ws:
            await recv_json(ws)
            pcm = base64.b64encode(b"\x00\x00" * 2400).decode()
            message = json.dumps({"type": "input_audio_buffer.append", "audio": pcm})
            for _ in range(chunks):
                await asyncio.wait_for(ws.send(message), 10)
            await ws.send('{"type": "input_audio_buffer.clear"}')
            await until(ws, "input_audio_buffer.cleared", timeout=20)

    async def main() -> None:
        async with running_server(backend=slow, limits=LIMITS) as server:
            await _alongside(server, lambda: bad(server))
            good_seconds = 1.5
            received = server.metrics.audio_in_seconds._value.get()
            assert received == pytest.approx(chunks * 0.1 + good_seconds)

    run(main())
