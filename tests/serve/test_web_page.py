"""The web page as files: served at ``/`` with their types and a strict CSP, shipped as
package data, and allowed to open sessions from its own (loopback) origin only."""

from __future__ import annotations

import asyncio
import fnmatch
import http.client
import re
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from assistant.serve.transport.web import WEB_FILES, WebAssets
from tests.serve.support import raw_client, recv_json, run, running_server

ROOT = Path(__file__).resolve().parents[2]


async def _get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    def get() -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    return await asyncio.to_thread(get)


def test_the_page_and_its_files_are_served_with_types_and_a_strict_policy() -> None:
    async def main() -> None:
        async with running_server() as server:
            for path, (name, content_type) in WEB_FILES.items():
                status, headers, body = await _get(server.port, path)
                assert status == 200, path
                assert headers["content-type"] == content_type
                assert int(headers["content-length"]) == len(body) > 0
                assert body == (ROOT / "assistant/serve/web" / name).read_bytes()
                csp = headers["content-security-policy"]
                assert "default-src 'none'" in csp and "connect-src 'self'" in csp
                assert headers["x-content-type-options"] == "nosniff"
            assert server.page_url == f"http://127.0.0.1:{server.port}/"
            status, _, body = await _get(server.port, "/?aec=0")
            assert status == 200 and b'id="talk"' in body
            status, _, _ = await _get(server.port, "/web/app.js")
            assert status == 404

    run(main())


def test_everything_the_page_loads_is_served_by_the_daemon() -> None:
    assets = WebAssets()
    page = assets.get("/")
    assert page is not None
    html = page.body.decode()
    app = assets.get("/app.js")
    assert app is not None
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    refs += re.findall(r'addModule\("([^"]+)"\)', app.body.decode())
    refs += [m.removeprefix("./") for m in re.findall(r'from "([^"]+)"', app.body.decode())]
    assert {"app.js", "audio.js", "capture-worklet.js", "style.css"} <= set(refs)
    for ref in refs:
        if not ref.startswith("data:"):
            assert assets.get("/" + ref) is not None, ref
    assert "http://" not in html and "https://" not in html  # nothing from elsewhere


def test_web_files_are_package_data() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["assistant.serve"]
    for name, _ in WEB_FILES.values():
        assert any(fnmatch.fnmatch(f"web/{name}", p) for p in patterns), name


def test_the_pages_own_origin_may_open_a_session_without_a_token() -> None:
    async def main() -> None:
        async with running_server() as server:
            for host in ("127.0.0.1", "localhost"):
                async with raw_client(server, origin=f"http://{host}:{server.port}") as ws:
                    assert (await recv_json(ws))["type"] == "session.created"
            for origin in (f"http://127.0.0.1:{server.port + 1}", "http://evil.example",
                           f"https://127.0.0.1:{server.port}"):
                with pytest.raises(InvalidStatus) as info:
                    async with raw_client(server, origin=origin):
                        pass
                assert info.value.response.status_code == 403

    run(main())


def test_behind_a_token_the_page_is_public_and_sessions_need_the_token() -> None:
    async def main() -> None:
        async with running_server(token="s3cret") as server:
            status, _, _ = await _get(server.port, "/")
            assert status == 200
            origin = f"http://127.0.0.1:{server.port}"
            with pytest.raises(InvalidStatus) as info:
                async with raw_client(server, origin=origin):
                    pass
            assert info.value.response.status_code == 401
            protocols: Any = ["realtime", "openai-insecure-api-key.s3cret"]
            async with raw_client(server, origin=origin, subprotocols=protocols) as ws:
                assert ws.subprotocol == "realtime"
                assert (await recv_json(ws))["type"] == "session.created"

    run(main())
