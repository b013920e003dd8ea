"""Eight daemon sessions on a small KV budget all keep answering: each gets a fair share
of the cache, so one long conversation cannot starve the others (real models)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.serve.support import drained, raw_client, run, running_server, until

pytestmark = pytest.mark.slow

SESSIONS = 8
TURNS = 4


def _small_runtime(serve_runtime: Any, llm_dir: Any, num_pages: int) -> Any:
    from assistant.llm.host import EngineHost
    from assistant.llm.local import LocalBackend
    from assistant.loop.setup import LoopModels
    from assistant.serve.runtime import runtime_from_models
    from engine import Engine

    base = serve_runtime.cfg
    cfg = base.model_copy(update={"engine": base.engine.model_copy(
        update={"num_pages": num_pages})})
    m = serve_runtime.models
    engine = Engine.load(llm_dir, page_size=cfg.engine.page_size, num_pages=num_pages)
    models = LoopModels(engine, m.template, m.transcriber, m.synthesizer,
                        EngineHost(LocalBackend(engine)))
    return runtime_from_models(cfg, models)


async def _conversation(server: Any, who: int) -> list[dict[str, Any]]:
    done_events = []
    async with raw_client(server) as ws:
        await until(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"],
            "audio": {"input": {"turn_detection": None}}}}))
        for turn in range(TURNS):
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{
                    "type": "input_text",
                    "text": f"I am caller {who}. Tell me fact number {turn + 1} about the sea."}]}}))
            await ws.send(json.dumps({"type": "response.create",
                                      "response": {"max_output_tokens": 16}}))
            done, _ = await until(ws, "response.done", timeout=240)
            done_events.append(done)
    return done_events


def test_eight_sessions_on_a_small_cache_all_keep_answering(serve_runtime: Any,
                                                           llm_dir: Any) -> None:
    rt = _small_runtime(serve_runtime, llm_dir, num_pages=96)  # 1,536 tokens for all

    async def main() -> None:
        async with running_server(backend=rt.backend_factory) as server:
            results = await asyncio.gather(*(_conversation(server, i)
                                             for i in range(SESSIONS)))
            for dones in results:
                statuses = [d["response"]["status"] for d in dones]
                assert statuses == ["completed"] * TURNS, [d["response"] for d in dones]
                for d in dones:
                    text = "".join(c.get("text", "") for item in d["response"]["output"]
                                   for c in item.get("content", []))
                    assert text.strip(), d["response"]
            await drained(server, timeout=30)
        stats = await asyncio.to_thread(rt.engine_stats)
        assert stats["sequences"] == 0 and stats["pages_used"] == 0
        await asyncio.to_thread(rt.check_engine)

    try:
        run(main(), timeout=600)
    finally:
        rt.close()
