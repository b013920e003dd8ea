"""Helpers for the daemon tests: a bounded event loop runner, a server on an ephemeral
loopback port with the scripted backend, and small client utilities."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from websockets.asyncio.client import ClientConnection, connect

from assistant.serve.backend.contract import SessionBackend, SessionSettings
from assistant.serve.protocol.settings import ServedModels
from assistant.serve.transport.limits import ServerLimits
from assistant.serve.transport.server import RealtimeServer, ServerOptions
from tests.serve.fake_backend import FakeBackend, silence, tone

T = TypeVar("T")

SERVED = ServedModels(
    model="test-llm",
    transcription_model="test-asr",
    default_voice="joe",
    voices=frozenset({"joe", "amy"}),
)
DEFAULTS = SessionSettings(instructions="be brief", voice="joe")


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run ``coro`` in a fresh event loop, failing after ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def utterance(speech_ms: int = 600, lead_ms: int = 200, tail_ms: int = 700) -> npt.NDArray[np.int16]:
    """Silence, a tone the fake VAD hears as speech, then enough silence to end the turn."""
    return np.concatenate([silence(lead_ms), tone(speech_ms), silence(tail_ms)])


def b64(pcm: npt.NDArray[np.int16]) -> str:
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode("ascii")


def append_messages(pcm: npt.NDArray[np.int16], chunk_ms: int = 100) -> list[str]:
    step = 24 * chunk_ms
    return [
        json.dumps({"type": "input_audio_buffer.append", "audio": b64(pcm[i : i + step])})
        for i in range(0, len(pcm), step)
    ]


@contextlib.asynccontextmanager
async def running_server(
    *,
    backend: Callable[[SessionSettings], SessionBackend] | None = None,
    limits: ServerLimits | None = None,
    token: str | None = None,
    host: str = "127.0.0.1",
) -> AsyncIterator[RealtimeServer]:
    created: list[SessionBackend] = []

    def factory(settings: SessionSettings) -> SessionBackend:
        made = backend(settings) if backend is not None else FakeBackend(settings)
        created.append(made)
        return made

    server = RealtimeServer(
        ServerOptions(host=host, port=0, token=token, limits=limits or ServerLimits()),
        backend_factory=factory,
        defaults=DEFAULTS,
        served=SERVED,
    )
    server.backends = created  # type: ignore[attr-defined]
    await server.start()
    try:
        yield server
    finally:
        await server.shutdown()


def backends(server: RealtimeServer) -> list[FakeBackend]:
    """The backends `running_server` created, in order."""
    return server.backends  # type: ignore[attr-defined, no-any-return]


def sdk_client(server: RealtimeServer, api_key: str = "unused") -> Any:
    from openai import AsyncOpenAI

    # base_url is never contacted: the realtime client uses websocket_base_url.
    return AsyncOpenAI(
        api_key=api_key, base_url="http://127.0.0.1:9/v1", websocket_base_url=server.url
    )


@contextlib.asynccontextmanager
async def raw_client(server: RealtimeServer, **kwargs: Any) -> AsyncIterator[ClientConnection]:
    async with connect(f"{server.url}/realtime", open_timeout=5, close_timeout=2,
                       **kwargs) as ws:
        yield ws


async def recv_json(ws: ClientConnection, timeout: float = 5.0) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))  # type: ignore[no-any-return]


async def until(ws: ClientConnection, event_type: str, timeout: float = 10.0) -> tuple[
    dict[str, Any], list[dict[str, Any]]
]:
    """Read events until one of ``event_type``; returns it and everything before it."""
    seen: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        event = await recv_json(ws, max(0.01, deadline - loop.time()))
        if event["type"] == event_type:
            return event, seen
        seen.append(event)


async def drained(server: RealtimeServer, timeout: float = 5.0) -> None:
    """Wait until the server has torn down every session (closing is asynchronous)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while server.active_sessions and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert server.active_sessions == 0


async def one_turn(server: RealtimeServer) -> list[dict[str, Any]]:
    """A well-behaved client: one spoken turn, read until response.done."""
    async with raw_client(server) as ws:
        created = await recv_json(ws)
        assert created["type"] == "session.created"
        for message in append_messages(utterance()):
            await ws.send(message)
        done, seen = await until(ws, "response.done", timeout=20)
        return [created, *seen, done]


def piper_speech(runtime: Any, text: str) -> npt.NDArray[np.int16]:
    """``text`` spoken by the packaged Piper voice, as 24 kHz int16 (the wire format)."""
    from audio.resample import resample

    synth = runtime.models.synthesizer
    pcm = np.concatenate([c.pcm for c in synth.synthesize(text)]).astype(np.float32) / 32768
    wire = resample(pcm, synth.sample_rate, 24000)
    return np.clip(np.round(wire * 32767), -32768, 32767).astype(np.int16)
