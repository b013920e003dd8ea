"""``assistant serve`` as a command: refusals before loading anything, SIGTERM shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from assistant.app.cli import main as cli_main
from assistant.app.config import load_config
from assistant.serve.transport.limits import ServerLimits
from assistant.serve.transport.server import ServerOptions
from tests.serve.fake_backend import FakeBackend
from tests.serve.support import DEFAULTS, SERVED, append_messages, run, until, utterance

CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"


def test_non_loopback_without_token_fails_before_loading_models(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["--config", str(CONFIG), "serve", "--host", "192.0.2.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --host 192.0.2.1 is not a loopback address")


@pytest.mark.parametrize(("content", "message"), [(None, "not found"), ("", "is empty"),
                                                   ("two words\n", "single line")])
def test_bad_token_files_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   content: str | None, message: str) -> None:
    token = tmp_path / "token"
    if content is not None:
        token.write_text(content)
    assert cli_main(["--config", str(CONFIG), "serve", "--token-file", str(token)]) == 2
    err = capsys.readouterr().err
    assert str(token) in err and message in err


class FakeRuntime:
    defaults = DEFAULTS
    served = SERVED

    def __init__(self) -> None:
        self.closed = False

    def backend_factory(self, settings: Any) -> FakeBackend:
        return FakeBackend(settings, word_delay_s=0.2, reply="a " * 30)

    def engine_gauges(self) -> dict[str, int]:
        return {"pages_used": 0}

    def close(self) -> None:
        self.closed = True

    async def run_local_audio(self, stop: asyncio.Event) -> None:
        await stop.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_closes_sessions_with_a_reason_and_exits_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from assistant.commands import serve as command

    runtime = FakeRuntime()
    monkeypatch.setattr("assistant.serve.runtime.build_runtime", lambda cfg: runtime)
    cfg = load_config(CONFIG, env={})
    port = _free_port()
    options = ServerOptions(port=port, limits=ServerLimits(shutdown_grace_s=0.2,
                                                           close_timeout_s=1.0))

    async def main() -> tuple[int, int | None, str]:
        serving = asyncio.create_task(command._serve(cfg, options, local_audio=True))
        for _ in range(100):
            try:
                ws = await connect(f"ws://127.0.0.1:{port}/v1/realtime")
                break
            except OSError:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("server did not start")
        async with ws:
            await until(ws, "session.created")
            for message in append_messages(utterance()):
                await ws.send(message)
            await until(ws, "response.output_audio.delta")
            os.kill(os.getpid(), signal.SIGTERM)
            done, _ = await until(ws, "response.done")
            assert done["response"]["status_details"]["reason"] == "shutdown"
            with pytest.raises(ConnectionClosed) as info:
                while True:
                    await asyncio.wait_for(ws.recv(), 5)
            rcvd = info.value.rcvd
        code = await serving
        return code, rcvd.code if rcvd else None, rcvd.reason if rcvd else ""

    code, close_code, reason = run(main(), timeout=30)
    assert (code, close_code, reason) == (0, 1001, "server shutting down")
    assert runtime.closed
