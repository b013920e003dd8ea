"""``assistant serve --local-audio`` through a real audio server, with a WebSocket
session running beside the local microphone loop on the same engine."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from audio.virtual_server import VirtualAudioServer
from tests.live.support import SPEAKER, AssistantProcess, audible_between, foreign_stderr

pytestmark = pytest.mark.slow

_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO) assistant\.")


async def _text_turn(url: str, text: str) -> str:
    """One text turn over the Realtime protocol; returns the reply's transcript."""
    async with connect(url, open_timeout=30, close_timeout=5) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        parts: list[str] = []
        async for raw in ws:
            event = json.loads(raw)
            assert event["type"] != "error", event
            if event["type"] == "response.output_audio_transcript.delta":
                parts.append(event["delta"])
            elif event["type"] == "response.done":
                return "".join(parts)
    raise AssertionError("the session closed before response.done")


def test_serve_local_audio_answers_through_the_device_beside_a_websocket_session(
        audio_server: VirtualAudioServer, demo_utterances: list[Path], tmp_path: Path) -> None:
    recorder = audio_server.record()
    proc = AssistantProcess(["--set", "llm.max_new_tokens=40", "serve", "--local-audio",
                             "--port", "0"], audio_server.env, tmp_path)
    try:
        proc.wait_for("the daemon", lambda: "local audio loop started" in proc.stderr, 240)
        url = re.search(r"listening on (ws://\S+)", proc.stdout)
        assert url is not None, proc.stdout

        async def both() -> str:
            spoken = asyncio.create_task(asyncio.to_thread(audio_server.feed, demo_utterances[0]))
            reply = await asyncio.wait_for(_text_turn(url.group(1), "What do bees make?"), 120)
            await spoken
            return reply

        reply = asyncio.run(both())
        # Only the local loop plays on the device (the session's audio goes to its socket).
        proc.wait_for("the spoken reply", lambda: audible_between(
            recorder.samples()[:, SPEAKER], 0, 1e9) > 1.0, 120)
        code = proc.stop(signal.SIGTERM)
    finally:
        proc.kill()
        recorder.stop()
    assert code == 0, proc.stderr
    assert "honey" in reply.lower(), reply
    assert foreign_stderr(proc.stderr, lambda line: bool(_LOG_LINE.match(line))) == []
    assert "local audio loop stopped" in proc.stderr
