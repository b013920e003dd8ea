"""A protocol session without sockets: its backend, a pump, and every event it sent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from assistant.serve.metrics import ServerMetrics
from assistant.serve.protocol import client_events as C
from assistant.serve.protocol.codec import Codec, ProtocolError
from assistant.serve.session import IdFactory, RealtimeSession
from tests.serve.fake_backend import FakeBackend
from tests.serve.support import DEFAULTS, SERVED, b64


class Harness:
    """A session, its fake backend, a pump task, and the list of events it sent."""

    def __init__(self, backend: Any, settings: Any = DEFAULTS) -> None:
        self.backend = backend
        self.sent: list[Any] = []
        self._changed = asyncio.Event()
        self.codec = Codec()
        self.session = RealtimeSession(
            session_id="sess_test",
            settings=settings,
            served=SERVED,
            backend=backend,
            send=self._send,
            metrics=ServerMetrics(),
            clock=asyncio.get_running_loop().time,
            ids=IdFactory("t"),
        )

    async def _send(self, event: Any) -> None:
        self.codec.encode_server(event)  # every event must serialise
        self.sent.append(event)
        self._changed.set()

    async def pump(self) -> None:
        async for event in self.backend.events():
            await self.session.handle_backend(event)

    async def client(self, event: Any) -> ProtocolError | None:
        """Send a client event; returns the refusal, if any (and emits it as error)."""
        try:
            await self.session.handle_client(event)
        except ProtocolError as exc:
            await self.session.error(exc)
            return exc
        return None

    async def audio(self, pcm: np.ndarray, chunk_ms: int = 100) -> None:
        step = 24 * chunk_ms
        for i in range(0, len(pcm), step):
            await self.client(C.InputAudioBufferAppend(audio=b64(pcm[i : i + step])))

    async def wait_for(self, event_type: str, count: int = 1, timeout: float = 5.0) -> list[Any]:
        async def poll() -> list[Any]:
            while True:
                found = [e for e in self.sent if e.type == event_type]
                if len(found) >= count:
                    return found
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(poll(), timeout)

    def types(self) -> list[str]:
        return [e.type for e in self.sent]


@contextlib.asynccontextmanager
async def harness(backend: Any = None, settings: Any = DEFAULTS,
                  **backend_kw: Any) -> AsyncIterator[Harness]:
    """A session over ``backend`` built with ``settings`` (None: a `FakeBackend` with
    ``backend_kw``), closed at the end."""
    h = Harness(backend if backend is not None else FakeBackend(settings, **backend_kw),
                settings)
    pump = asyncio.create_task(h.pump())
    await h.session.start()
    try:
        yield h
    finally:
        await h.backend.aclose()
        await asyncio.wait_for(pump, 2)
