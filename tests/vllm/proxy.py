"""A TCP forwarder standing in front of the real server as one more "replica".

:meth:`Proxy.kill` is what a crashed replica looks like to a client: every open
connection is reset mid-stream and new connections are refused.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["Proxy"]


class Proxy:
    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._dead = False
        self._spawn(self._accept)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        with self._lock:
            self._dead = True
            sockets, self._sockets = self._sockets, []
        for s in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in self._threads:
            t.join(5)

    def _spawn(self, fn: object, *args: object) -> None:
        thread = threading.Thread(target=fn, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._dead:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            self._spawn(self._pipe, client, upstream)
            self._spawn(self._pipe, upstream, client)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
