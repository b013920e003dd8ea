"""The daemon's listener: WebSocket sessions, ``/healthz`` and ``/metrics`` on one port.

`RealtimeServer` binds (loopback by default; any other address needs a token), checks
each upgrade request *before* accepting it (path, bearer token, browser origin), admits
at most ``max_sessions`` sessions and runs each as a `Connection`. `shutdown` stops
accepting, lets responses in progress finish for the grace period, then cancels them
and closes every socket with 1001 and a reason.

WebSocket paths: ``/v1/realtime`` (what the OpenAI SDK builds from
``websocket_base_url="ws://HOST:PORT/v1"``) and ``/realtime``. The older event names
are used for a client that sends ``OpenAI-Beta: realtime=v1`` (or offers the
``openai-beta.realtime-v1`` subprotocol).

``GET /`` is the browser client (:mod:`~assistant.serve.transport.web`). Its own
origin (``http://127.0.0.1:PORT``, ``localhost``, ``[::1]`` on a loopback daemon) may
open sessions without a token; any other web page still may not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from assistant.app.errors import UserError
from assistant.serve.backend.contract import BackendFactory, SessionSettings
from assistant.serve.metrics import CONTENT_TYPE_LATEST, EngineGauges, ServerMetrics
from assistant.serve.protocol.codec import Codec, Dialect
from assistant.serve.protocol.server_events import Error, ErrorDetail
from assistant.serve.protocol.settings import ServedModels
from assistant.serve.session import IdFactory, RealtimeSession
from assistant.serve.transport.auth import Authenticator, is_loopback
from assistant.serve.transport.connection import (
    CLOSE_ERROR,
    CLOSE_GOING_AWAY,
    CLOSE_TRY_AGAIN,
    Connection,
)
from assistant.serve.transport.limits import Admission, Outbox, ServerLimits
from assistant.serve.transport.web import WebAssets

__all__ = ["ServerOptions", "RealtimeServer", "WS_PATHS"]

log = logging.getLogger("assistant.serve")

WS_PATHS = ("/v1/realtime", "/realtime")
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 8765
    """0 picks a free port (tests); the bound port is `RealtimeServer.port`."""
    token: str | None = None
    """Bearer token clients must present; required to bind a non-loopback address."""
    limits: ServerLimits = field(default_factory=ServerLimits)
    allowed_origins: tuple[str, ...] = ()
    """Browser origins allowed without a token (a web page must not drive a local daemon
    just because the user visited it); requests without an Origin header are allowed."""


def _new_session_id() -> str:
    return f"sess_{secrets.token_hex(8)}"


class RealtimeServer:
    """Realtime-protocol daemon over one shared backend factory (and engine)."""

    def __init__(
        self,
        options: ServerOptions,
        *,
        backend_factory: BackendFactory,
        defaults: SessionSettings,
        served: ServedModels,
        engine_gauges: EngineGauges | None = None,
        session_ids: Callable[[], str] = _new_session_id,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._loopback = is_loopback(options.host)
        if not self._loopback and options.token is None:
            raise UserError(
                f"--host {options.host} is not a loopback address: a bearer token is "
                "required (--token-file FILE or server.token_file)"
            )
        self.options = options
        self.metrics = ServerMetrics(engine_gauges)
        self._factory = backend_factory
        self._defaults = defaults
        self._served = served
        self._session_ids = session_ids
        self._clock = clock
        self._codec = Codec()
        self._auth = Authenticator(options.token)
        self._web = WebAssets()
        self._admission = Admission(options.limits.max_sessions)
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: Server | None = None
        self._draining = False
        self.port: int = options.port

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        limits = self.options.limits
        self._server = await serve(
            self._handle,
            self.options.host,
            self.options.port,
            process_request=self._process_request,
            select_subprotocol=self._select_subprotocol,
            max_size=limits.hard_message_bytes,
            max_queue=16,
            compression=None,
            close_timeout=limits.close_timeout_s,
            server_header="assistant-serve",
        )
        sockets = list(self._server.sockets)
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        log.info(
            "listening on ws://%s:%d%s (auth %s, max %d sessions)",
            self.options.host, self.port, WS_PATHS[0],
            "bearer token" if self._auth.required else "off (loopback)",
            limits.max_sessions,
            extra={"host": self.options.host, "port": self.port},
        )

    @property
    def url(self) -> str:
        """Base URL for the OpenAI SDK's ``websocket_base_url``."""
        host = self.options.host
        if ":" in host:
            host = f"[{host}]"
        return f"ws://{host}:{self.port}/v1"

    @property
    def page_url(self) -> str:
        """Where a browser finds the web page."""
        return self.url.replace("ws://", "http://", 1).removesuffix("/v1") + "/"

    @property
    def active_sessions(self) -> int:
        return len(self._connections)

    async def __aenter__(self) -> RealtimeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def shutdown(self, reason: str = "server shutting down") -> None:
        """Graceful stop: refuse new sessions, finish or cancel responses in progress,
        close every socket with 1001 and ``reason``. Idempotent."""
        self._draining = True
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close(close_connections=False)
        for conn in list(self._connections):
            conn.request_shutdown(reason)
        if self._tasks:
            limits = self.options.limits
            budget = limits.shutdown_grace_s + 4 * limits.close_timeout_s
            await asyncio.wait(set(self._tasks), timeout=budget)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), self.options.limits.close_timeout_s * 2)
        log.info("server stopped", extra={"reason": reason})

    # ------------------------------------------------------------------ HTTP side

    def _select_subprotocol(
        self, connection: ServerConnection, offered: Any
    ) -> Subprotocol | None:
        # Browsers fail the handshake unless one offered subprotocol is echoed back.
        for choice in ("realtime", BETA_SUBPROTOCOL):
            if choice in offered:
                return Subprotocol(choice)
        return None

    def _text(self, connection: ServerConnection, status: HTTPStatus, body: str,
              content_type: str | None = None) -> Response:
        response = connection.respond(status, body)
        if content_type is not None:
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = content_type
        return response

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path, _, _query = request.path.partition("?")
        headers: Headers = request.headers
        if path == "/healthz":
            status = HTTPStatus.SERVICE_UNAVAILABLE if self._draining else HTTPStatus.OK
            body = json.dumps(
                {
                    "status": "draining" if self._draining else "ok",
                    "sessions": self.active_sessions,
                    "max_sessions": self._admission.capacity,
                }
            )
            return self._text(connection, status, body + "\n", "application/json")
        if path == "/metrics":
            denied = self._authorize(connection, headers)
            if denied is not None:
                return denied
            return self._text(
                connection, HTTPStatus.OK, self.metrics.render().decode("utf-8"),
                CONTENT_TYPE_LATEST,
            )
        asset = self._web.get(path)
        if asset is not None:
            return self._file(connection, asset.body, asset.content_type)
        if path not in WS_PATHS:
            return self._text(connection, HTTPStatus.NOT_FOUND, f"not found: {path}\n")
        return self._authorize(connection, headers)

    def _file(self, connection: ServerConnection, body: bytes, content_type: str) -> Response:
        response = self._text(connection, HTTPStatus.OK, "", content_type)
        del response.headers["Content-Length"]
        response.headers["Content-Length"] = str(len(body))
        for name, value in WebAssets.headers().items():
            response.headers[name] = value
        response.body = body
        return response

    def _page_origins(self) -> tuple[str, ...]:
        """Origins of the daemon's own page (only a loopback daemon serves it tokenless)."""
        if not self._loopback:
            return ()
        return tuple(f"http://{host}:{self.port}" for host in ("127.0.0.1", "localhost", "[::1]"))

    def _authorize(self, connection: ServerConnection, headers: Headers) -> Response | None:
        origin = headers.get("Origin")
        if (
            origin is not None
            and not self._auth.required
            and origin not in self.options.allowed_origins
            and origin not in self._page_origins()
        ):
            self.metrics.sessions_rejected.labels(reason="origin").inc()
            return self._text(
                connection, HTTPStatus.FORBIDDEN,
                f"origin {origin} not allowed; configure a token to accept browser clients\n",
            )
        offered = [
            p.strip()
            for value in headers.get_all("Sec-WebSocket-Protocol")
            for p in value.split(",")
        ]
        result = self._auth.check(headers.get("Authorization"), offered)
        if result.ok:
            return None
        self.metrics.sessions_rejected.labels(reason="auth").inc()
        log.warning(
            "refused connection from %s: %s", _peer(connection), result.reason,
            extra={"peer": _peer(connection), "reason": result.reason},
        )
        response = self._text(connection, HTTPStatus.UNAUTHORIZED, result.reason + "\n")
        response.headers["WWW-Authenticate"] = 'Bearer realm="assistant"'
        return response

    # ------------------------------------------------------------------ sessions

    def _dialect(self, connection: ServerConnection) -> Dialect:
        request = connection.request
        beta = request is not None and "realtime=v1" in (request.headers.get("OpenAI-Beta") or "")
        if beta or connection.subprotocol == BETA_SUBPROTOCOL:
            return Dialect.BETA
        return Dialect.GA

    async def _refuse(self, ws: ServerConnection, dialect: Dialect, code: str, message: str,
                      close_code: int) -> None:
        event = Error(
            event_id=f"event_refused_{secrets.token_hex(4)}",
            error=ErrorDetail(type="server_error" if close_code == CLOSE_GOING_AWAY
                              else "invalid_request_error", code=code, message=message),
        )
        self.metrics.sessions_rejected.labels(reason=code).inc()
        self.metrics.errors.labels(code=code).inc()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                ws.send(self._codec.encode_server(event, dialect)),
                self.options.limits.close_timeout_s,
            )
        with contextlib.suppress(Exception):
            await ws.close(close_code, message[:120])

    async def _handle(self, ws: ServerConnection) -> None:
        dialect = self._dialect(ws)
        if self._draining:
            await self._refuse(ws, dialect, "server_shutdown", "server is shutting down",
                               CLOSE_GOING_AWAY)
            return
        if not self._admission.try_acquire():
            limit = self._admission.capacity
            await self._refuse(
                ws, dialect, "session_limit_reached",
                f"server busy: {limit} of {limit} sessions in use, try again later",
                CLOSE_TRY_AGAIN,
            )
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._run_session(ws, dialect)
        finally:
            self._admission.release()
            if task is not None:
                self._tasks.discard(task)

    async def _run_session(self, ws: ServerConnection, dialect: Dialect) -> None:
        loop = asyncio.get_running_loop()
        clock = self._clock or loop.time
        limits = self.options.limits
        session_id = self._session_ids()
        outbox = Outbox(limits.session_queue, limits.stall_timeout_s)
        codec = self._codec

        async def send(event: Any) -> None:
            if codec.sends(event, dialect):
                await outbox.put(codec.encode_server(event, dialect))

        try:
            backend = self._factory(self._defaults)
        except Exception as exc:
            log.exception("cannot start a session backend", extra={"session": session_id})
            await self._refuse(
                ws, dialect, "internal_error", f"cannot start a session: {exc}", CLOSE_ERROR
            )
            return
        session = RealtimeSession(
            session_id=session_id,
            settings=self._defaults,
            served=self._served,
            backend=backend,
            send=send,
            metrics=self.metrics,
            clock=clock,
            ids=IdFactory(session_id.removeprefix("sess_")[:6]),
        )
        conn = Connection(
            ws=ws, session=session, backend=backend, outbox=outbox, codec=codec,
            limits=limits, metrics=self.metrics, clock=clock,
        )
        self._connections.add(conn)
        self.metrics.sessions.inc()
        self.metrics.sessions_active.set(len(self._connections))
        log.info(
            "session opened session=%s peer=%s dialect=%s",
            session_id, _peer(ws), dialect.value,
            extra={"session": session_id, "peer": _peer(ws), "dialect": dialect.value},
        )
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)
            self.metrics.sessions_active.set(len(self._connections))


def _peer(connection: ServerConnection) -> str:
    try:
        host, port = connection.remote_address[:2]
        return f"{host}:{port}"
    except Exception:
        return "?"
