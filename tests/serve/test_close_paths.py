"""However a daemon session ends, what it built on the engine is released.

Real runtime (shared engine thread), real WebSocket server; clients close at every stage:
before ``session.created`` is read, right after it, mid-build (while a changed
instruction rebuilds the pipeline), and mid-response.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.serve.support import drained, raw_client, run, running_server, until

pytestmark = pytest.mark.slow

STAGES = ("before_created", "after_created", "mid_build", "mid_response")


async def _client(server: Any, stage: str) -> None:
    async with raw_client(server) as ws:
        if stage == "before_created":
            return
        created = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert created["type"] == "session.created"
        if stage == "after_created":
            return
        if stage == "mid_build":
            await ws.send(json.dumps({"type": "session.update", "session": {
                "type": "realtime", "instructions": "Answer in French."}}))
            return
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"],
            "audio": {"input": {"turn_detection": None}}}}))
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Tell me a long story."}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        await until(ws, "response.created", timeout=30)


def test_connect_close_cycles_at_every_stage_leave_no_engine_pages(serve_runtime: Any) -> None:
    rt = serve_runtime
    cycles = 200

    async def main() -> None:
        async with running_server(backend=rt.backend_factory) as server:
            for i in range(cycles):
                await _client(server, STAGES[i % len(STAGES)])
                if i % 20 == 19:
                    await drained(server, timeout=20)
                    stats = await asyncio.to_thread(rt.engine_stats)
                    assert stats["sequences"] == 0 and stats["pages_used"] == 0, (i, stats)
            await drained(server, timeout=20)
        stats = await asyncio.to_thread(rt.engine_stats)
        assert stats["pages_used"] == 0 and stats["sequences"] == 0
        await asyncio.to_thread(rt.check_engine)

    run(main(), timeout=600)


def test_metrics_show_what_each_session_holds_and_nothing_unowned(serve_runtime: Any) -> None:
    from assistant.serve.metrics import ServerMetrics

    rt = serve_runtime
    metrics = ServerMetrics(rt.engine_gauges)

    async def owners(count: int) -> dict[str, Any]:
        for _ in range(200):  # the engine thread refreshes its snapshot every 0.25 s
            gauges = dict(rt.engine_gauges())
            if len(gauges.get("session_sequences", {})) == count:
                return gauges
            await asyncio.sleep(0.05)
        raise AssertionError(f"never saw {count} sessions: {rt.engine_gauges()}")

    async def main() -> None:
        async with running_server(backend=rt.backend_factory) as server:
            async with raw_client(server) as ws:
                created = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert created["type"] == "session.created"
                gauges = await owners(1)
                assert list(gauges["session_sequences"].values()) == [1]
                assert gauges["sequences_unowned"] == 0
                text = metrics.render().decode()
                assert 'assistant_engine_session_sequences{session="' in text
                assert "assistant_engine_sequences_unowned 0.0" in text
            await drained(server, timeout=20)
            gauges = await owners(0)
            assert gauges["sequences_unowned"] == 0 and gauges["sequences"] == 0

    run(main(), timeout=60)
