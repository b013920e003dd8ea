"""A minimal HTTP client for one vLLM server (stdlib only: ``http.client``).

Three calls: a JSON request (``/v1/models``, ``/tokenize``, a one-token completion), a
plain-text GET (``/metrics``, ``/health``) and a *stream*: ``/v1/completions`` with
``stream: true``, read as server-sent events, one parsed JSON object per event.

A stream is read on its own thread and closed from another: :meth:`Stream.close` shuts
the socket down, which ends the blocked read at once and makes the server abort the
request (vLLM aborts a request whose client went away).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["ServerError", "Unreachable", "Endpoint", "Stream"]


class Unreachable(OSError):
    """The server could not be reached or dropped the connection (a replica is down):
    the work may be retried on another replica."""


class ServerError(RuntimeError):
    """The server answered with an error status (a bad request: retrying elsewhere gives
    the same answer)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class Endpoint:
    """One server: ``http://host:port`` (a path prefix is kept, e.g. behind a proxy)."""

    url: str
    timeout_s: float = 300.0
    """Longest wait for any single read (a whole prefill on a slow server)."""

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{self.url!r}: expected http://HOST:PORT")

    @property
    def _host(self) -> tuple[str, int, str]:
        parts = urlsplit(self.url)
        return parts.hostname or "", parts.port or 80, parts.path.rstrip("/")

    def _connect(self, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
        host, port, prefix = self._host
        return http.client.HTTPConnection(host, port, timeout=timeout_s), prefix

    def _open(self, method: str, path: str, body: dict[str, Any] | None, *,
              timeout_s: float, stream: bool = False,
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send one request; an error status is raised here (the connection closed).
        The caller reads the response and closes the connection."""
        conn, prefix = self._connect(timeout_s)
        headers = {} if body is None else {"Content-Type": "application/json"}
        if stream:
            headers["Accept"] = "text/event-stream"
        try:
            conn.request(method, prefix + path, headers=headers,
                         body=None if body is None else json.dumps(body))
            resp = conn.getresponse()
            error = resp.read().decode("utf-8", "replace") if resp.status >= 400 else None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise Unreachable(f"{self.url}{path}: {exc}") from exc
        if error is not None:
            conn.close()
            raise _status_error(resp.status, error, self.url + path)
        return conn, resp

    def _read(self, method: str, path: str, body: dict[str, Any] | None,
              timeout_s: float) -> str:
        conn, resp = self._open(method, path, body, timeout_s=timeout_s)
        try:
            return resp.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            raise Unreachable(f"{self.url}{path}: {exc}") from exc
        finally:
            conn.close()

    def get_text(self, path: str, *, timeout_s: float = 5.0) -> str:
        return self._read("GET", path, None, timeout_s)

    def get_json(self, path: str, *, timeout_s: float = 5.0) -> Any:
        return json.loads(self.get_text(path, timeout_s=timeout_s))

    def post_json(self, path: str, body: dict[str, Any], *,
                  timeout_s: float | None = None) -> Any:
        return json.loads(self._read("POST", path, body, timeout_s or self.timeout_s))

    def stream(self, path: str, body: dict[str, Any]) -> Stream:
        """Open a streaming POST; raises `Unreachable` / `ServerError` before any event."""
        conn, resp = self._open("POST", path, body, timeout_s=self.timeout_s, stream=True)
        return Stream(conn, resp, self.url + path)


def _status_error(status: int, body: str, where: str) -> Exception:
    # A gateway or an overloaded / dying server: another replica may do.
    if status in (502, 503, 504):
        return Unreachable(f"{where}: HTTP {status}")
    return ServerError(status, body)


class Stream:
    """Server-sent events of one streaming request; iterate on one thread, close from any
    (idempotent). After :meth:`close` the iteration ends quietly."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse,
                 where: str) -> None:
        self._conn = conn
        self._resp = resp
        self._where = where
        self._lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def events(self) -> Iterator[dict[str, Any]]:
        """Each ``data:`` payload as JSON, until ``[DONE]``. Raises `Unreachable` if the
        connection breaks first (unless closed on purpose)."""
        try:
            for raw in self._resp:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                payload = json.loads(data)
                if isinstance(payload, dict) and "error" in payload and "choices" not in payload:
                    raise ServerError(int(payload.get("code") or 500), data)
                yield payload
            broke: BaseException | None = None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            broke = exc
        finally:
            on_purpose = self._closed
            self.close()
        if not on_purpose:
            raise Unreachable(f"{self._where}: stream broke: {broke or 'ended without [DONE]'}")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()
