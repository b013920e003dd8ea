"""The vLLM backend's HTTP client against a small local server (no vLLM): JSON in and
out, the error statuses it tells apart, and a server-sent event stream."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from assistant.llm.vllm.client import Endpoint, ServerError, Unreachable


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, status: int, body: str, kind: str = "application/json") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._reply(200, json.dumps({"data": [{"id": "m"}]}))
        elif self.path == "/busy":
            self._reply(503, "overloaded")
        else:
            self._reply(404, "no such path")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/echo":
            self._reply(200, json.dumps({"got": body}))
        elif self.path == "/stream":
            assert self.headers["Accept"] == "text/event-stream"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(body["n"]):
                self.wfile.write(f"data: {json.dumps({'i': i})}\n\n".encode())
            if body.get("done", True):
                self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        else:
            self._reply(400, "bad request")


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Endpoint]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Endpoint(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


def test_json_requests_round_trip(endpoint: Endpoint) -> None:
    assert endpoint.get_json("/v1/models") == {"data": [{"id": "m"}]}
    assert endpoint.post_json("/echo", {"a": [1, 2]}) == {"got": {"a": [1, 2]}}


def test_a_client_error_is_a_server_error_and_an_overloaded_replica_is_unreachable(
        endpoint: Endpoint) -> None:
    with pytest.raises(ServerError) as err:
        endpoint.get_text("/missing")
    assert err.value.status == 404
    with pytest.raises(ServerError):
        endpoint.post_json("/nowhere", {})
    with pytest.raises(Unreachable, match="503"):  # another replica may do
        endpoint.get_text("/busy")


def test_a_stream_yields_each_event_and_a_stream_cut_short_is_unreachable(
        endpoint: Endpoint) -> None:
    assert [e["i"] for e in endpoint.stream("/stream", {"n": 3}).events()] == [0, 1, 2]
    with pytest.raises(ServerError):
        endpoint.stream("/nowhere", {"n": 1})
    stream = endpoint.stream("/stream", {"n": 2, "done": False})
    with pytest.raises(Unreachable, match="without \\[DONE\\]"):
        list(stream.events())
    assert stream.closed
