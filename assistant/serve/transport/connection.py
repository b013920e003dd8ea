"""One WebSocket connection: three tasks around a `RealtimeSession`.

- reader: frames -> size check -> decode -> ``session.handle_client``. Audio appends
  await the backend's bounded input queue, so a client sending faster than the backend
  consumes is slowed down by TCP, not buffered without bound.
- pump: ``backend.events()`` -> ``session.handle_backend`` -> the outbox.
- writer: outbox -> socket. The outbox is bounded; when the client stops reading, the
  pump's enqueue times out (`ClientStalled`) and the connection is closed with 1008.

Session state is touched under one lock, except for audio appends, which only call the
backend (holding the lock across their backpressure wait could deadlock with the pump).
The connection ends when any task ends; the cause picks the close code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from assistant.loop.tasks import cancel_and_wait
from assistant.serve.backend.contract import SessionBackend
from assistant.serve.metrics import ServerMetrics
from assistant.serve.protocol.client_events import InputAudioBufferAppend
from assistant.serve.protocol.codec import Codec, ProtocolError
from assistant.serve.session import RealtimeSession
from assistant.serve.transport.limits import ClientStalled, Outbox, ServerLimits

__all__ = ["Connection", "CLOSE_GOING_AWAY", "CLOSE_POLICY", "CLOSE_TRY_AGAIN", "CLOSE_ERROR"]

log = logging.getLogger("assistant.serve")

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY = 1008
CLOSE_ERROR = 1011
CLOSE_TRY_AGAIN = 1013


class Connection:
    """Runs one session until the client leaves, misbehaves, or the server shuts down."""

    def __init__(
        self,
        *,
        ws: ServerConnection,
        session: RealtimeSession,
        backend: SessionBackend,
        outbox: Outbox,
        codec: Codec,
        limits: ServerLimits,
        metrics: ServerMetrics,
        clock: Callable[[], float],
    ) -> None:
        self.ws = ws
        self.session = session
        self._backend = backend
        self._outbox = outbox
        self._codec = codec
        self._limits = limits
        self._metrics = metrics
        self._clock = clock
        self._lock = asyncio.Lock()
        self._shutdown = asyncio.Event()
        self._shutdown_reason = "server shutting down"
        self.cause = "open"

    def request_shutdown(self, reason: str) -> None:
        """Ask `run` to finish gracefully (used on SIGTERM)."""
        self._shutdown_reason = reason
        self._shutdown.set()

    async def run(self) -> str:
        """Serve the session; returns the cause the connection ended with."""
        started = self._clock()
        await self.session.start()
        writer = asyncio.create_task(self._writer(), name="ws-writer")
        reader = asyncio.create_task(self._reader(), name="ws-reader")
        pump = asyncio.create_task(self._pump(), name="ws-pump")
        stop = asyncio.create_task(self._shutdown.wait(), name="ws-stop")
        try:
            done, _ = await asyncio.wait(
                {writer, reader, pump, stop}, return_when=asyncio.FIRST_COMPLETED
            )
            if stop in done:
                await self._graceful(reader, pump)
                code, reason = CLOSE_GOING_AWAY, self._shutdown_reason
                self.cause = "shutdown"
            else:
                code, reason = self._close_code(done)
                if self.cause == "backend_error":
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(
                            self.session.error(
                                ProtocolError(
                                    "internal_error",
                                    "the session failed; see the server log",
                                    error_type="server_error",
                                )
                            ),
                            self._limits.close_timeout_s,
                        )
        finally:
            await cancel_and_wait(reader, pump, stop, logger=log, what="connection task",
                                  expected=(ConnectionClosed, ClientStalled))
            await self._backend.aclose()
            self._outbox.close()
        if self.cause in ("shutdown", "backend_error"):
            # Let the writer flush what the session said last (response.done, error).
            with contextlib.suppress(asyncio.TimeoutError, ConnectionClosed):
                await asyncio.wait_for(asyncio.shield(writer), self._limits.close_timeout_s)
        await cancel_and_wait(writer, logger=log, what="connection task",
                              expected=(ConnectionClosed, ClientStalled))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(code, reason), self._limits.close_timeout_s * 2)
        log.info(
            "session closed session=%s cause=%s code=%s seconds=%.1f",
            self.session.session_id, self.cause, code, self._clock() - started,
            extra={"session": self.session.session_id, "cause": self.cause, "code": code},
        )
        self._metrics.session_closes.labels(cause=self.cause).inc()
        return self.cause

    def _close_code(self, done: set[asyncio.Task[Any]]) -> tuple[int, str]:
        for task in done:
            exc = task.exception()
            if isinstance(exc, ClientStalled):
                self.cause = "stalled"
                return CLOSE_POLICY, "client stopped reading"
            if isinstance(exc, ConnectionClosed):
                rcvd = exc.rcvd
                self.cause = (
                    "message_too_big"
                    if exc.sent is not None and exc.sent.code == 1009
                    else "client_closed"
                )
                return (rcvd.code if rcvd else CLOSE_NORMAL), ""
            if exc is not None:
                self.cause = "backend_error"
                log.error(
                    "session %s failed: %r", self.session.session_id, exc, exc_info=exc,
                    extra={"session": self.session.session_id},
                )
                return CLOSE_ERROR, "internal error"
        self.cause = "client_closed"
        return CLOSE_NORMAL, ""

    async def _graceful(self, reader: asyncio.Task[None], pump: asyncio.Task[None]) -> None:
        """Stop taking input, let the response in progress finish (up to the grace
        period), else cancel it and let its ``response.done`` through."""
        await cancel_and_wait(reader, logger=log, what="connection task",
                              expected=(ConnectionClosed, ClientStalled))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._limits.shutdown_grace_s
        while self.session.response_in_progress and loop.time() < deadline and not pump.done():
            await asyncio.sleep(0.02)
        if self.session.response_in_progress and not pump.done():
            self._backend.cancel_response("shutdown")
            deadline = loop.time() + self._limits.close_timeout_s
            while self.session.response_in_progress and loop.time() < deadline:
                await asyncio.sleep(0.02)
        async with self._lock:
            await self.session.error(
                ProtocolError("server_shutdown", self._shutdown_reason, error_type="server_error")
            )

    async def _reader(self) -> None:
        max_bytes = self._limits.max_message_bytes
        async for message in self.ws:
            if isinstance(message, bytes):
                await self._refuse(
                    ProtocolError("invalid_frame", "binary frames are not supported; send JSON text")
                )
                continue
            if len(message) > max_bytes:
                await self._refuse(
                    ProtocolError(
                        "message_too_large",
                        f"message of {len(message)} bytes exceeds the {max_bytes}-byte limit",
                    )
                )
                continue
            try:
                event = self._codec.decode_client(message)
                if isinstance(event, InputAudioBufferAppend):
                    await self.session.handle_client(event)
                else:
                    async with self._lock:
                        await self.session.handle_client(event)
            except ProtocolError as exc:
                await self._refuse(exc)

    async def _refuse(self, exc: ProtocolError) -> None:
        async with self._lock:
            await self.session.error(exc)

    async def _pump(self) -> None:
        async for event in self._backend.events():
            async with self._lock:
                await self.session.handle_backend(event)
        raise RuntimeError("the session's backend stopped")

    async def _writer(self) -> None:
        while True:
            message = await self._outbox.get()
            if message is None:
                return
            await self.ws.send(message)
