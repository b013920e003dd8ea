"""The web page in a real headless Chromium whose microphone is a WAV file.

The page asks a recorded question (Piper speech), shows its transcript and the reply,
and plays the reply (the AudioContext clock runs, the daemon counted the response); a
recording that talks over a reply makes the page stop playback and truncate it, and the
daemon then keeps a word prefix of what it sent; a wrong token is a clear message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from assistant.serve.transport.server import RealtimeServer, ServerOptions
from tests.serve.browser import browser_page, write_wav
from tests.serve.fake_backend import silence
from tests.serve.support import backends, piper_speech, run, running_server

pytestmark = pytest.mark.slow

STORYTELLER = "You are a storyteller. Whatever you are asked, tell a long story."


@contextlib.asynccontextmanager
async def real_server(rt: Any, **settings: Any) -> AsyncIterator[RealtimeServer]:
    """The daemon on the real models, its sessions' settings changed by ``settings``
    (``backends(server)`` lists the sessions' backends)."""
    created: list[Any] = []

    def factory(session_settings: Any) -> Any:
        created.append(rt.backend_factory(session_settings))
        return created[-1]

    server = RealtimeServer(ServerOptions(port=0), backend_factory=factory,
                            defaults=dataclasses.replace(rt.defaults, **settings),
                            served=rt.served)
    server.backends = created  # type: ignore[attr-defined]
    async with server:
        yield server


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]+", " ", text.lower()).split()


def _metrics(server: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in server.metrics.render().decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def _client(page: Any) -> Any:
    return await page.evaluate(
        "(() => { const v = window.assistantClient; return {...v, playedMs: undefined,"
        " turns: v.turns.map(t => ({role: t.role, id: t.id, text: t.text, heard: t.heard,"
        " status: t.status}))}; })()")


async def _until(page: Any, what: str, pred: Any, timeout: float = 60.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        state = await _client(page)
        if pred(state):
            return state
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; page state: {state}; "
                                 f"console errors: {page.console_errors}")
        await asyncio.sleep(0.1)


def _turns(state: Any, role: str) -> list[Any]:
    return [t for t in state["turns"] if t["role"] == role]


def test_the_page_asks_a_recorded_question_and_plays_the_reply(
    serve_runtime: Any, chromium: str, tmp_path: Path
) -> None:
    rt = serve_runtime
    question = piper_speech(rt, "What is the capital of France?")
    mic = write_wav(tmp_path / "question.wav",
                    np.concatenate([silence(500), question, silence(15_000)]))

    async def main() -> None:
        async with real_server(rt) as server, browser_page(chromium, mic, tmp_path) as page:
            await page.goto(f"http://127.0.0.1:{server.port}/?aec=0")
            await page.click("#talk")
            state = await _until(page, "the reply to be heard", lambda s: any(
                t["status"] == "completed" for t in _turns(s, "assistant"))
                and s["audio"]["playedMs"] >= 1000)
            (user,) = _turns(state, "user")
            assert "france" in _words(user["text"])
            (reply,) = _turns(state, "assistant")
            assert reply["text"].strip()
            shown = await page.inner_text("#log")
            assert user["text"].strip() in shown and reply["text"].strip() in shown
            assert state["audio"]["contextTime"] >= 1.0  # the AudioContext really ran
            assert len(state["latenciesMs"]) == 1 and state["latenciesMs"][0] > 0
            assert "ms from the end of your turn" in await page.inner_text("#latency")
            metrics = _metrics(server)
            assert metrics['assistant_responses_total{status="completed"}'] == 1
            assert metrics["assistant_response_first_audio_seconds_count"] == 1
            assert metrics["assistant_audio_out_seconds_total"] * 1000 >= (
                state["audio"]["receivedMs"] - 1)
            assert state["errors"] == [] and page.console_errors == []
            await page.click("#talk")  # stop
            assert (await _client(page))["connected"] is False

    run(main(), timeout=180)


def test_talking_over_the_reply_stops_playback_and_truncates_it(
    serve_runtime: Any, chromium: str, tmp_path: Path
) -> None:
    rt = serve_runtime
    question = piper_speech(rt, "Tell me a story about a brave little dragon.")
    interruption = piper_speech(rt, "Stop. What is two plus two?")
    # The reply starts 1.5 s (idle machine) to 6 s (busy one) after the question and a
    # story of up to 150 tokens lasts ~30 s: the interruption, 9 s after the question,
    # lands in the middle of it.
    mic = write_wav(tmp_path / "barge_in.wav", np.concatenate(
        [silence(500), question, silence(9000), interruption, silence(15_000)]))

    async def main() -> None:
        async with real_server(rt, instructions=STORYTELLER, max_output_tokens=150) as server, \
                browser_page(chromium, mic, tmp_path) as page:
            await page.goto(f"http://127.0.0.1:{server.port}/?aec=0")
            await page.click("#talk")
            state = await _until(page, "the cut reply's kept transcript", lambda s: any(
                t["heard"] is not None for t in _turns(s, "assistant")), timeout=90)
            (cut,) = state["truncations"]
            reply = next(t for t in _turns(state, "assistant") if t["id"] == cut["item_id"])
            # The page stopped at the position heard and told the daemon exactly that.
            assert 0 < cut["audio_end_ms"] < cut["received_ms"] or reply["status"] != "completed"
            await _until(page, "time to pass", lambda s: s["audio"]["contextTime"]
                         > cut["context_time"] + 0.5)
            played = await page.evaluate(f"window.assistantClient.playedMs({cut['item_id']!r})")
            assert int(played) == cut["audio_end_ms"]  # nothing of it played after the stop
            # What the daemon keeps is a word prefix of what it sent; shorter, unless the
            # page had played all it had received (a busy machine's TTS fell behind).
            sent, kept = _words(reply["text"]), _words(reply["heard"])
            assert kept and kept == sent[: len(kept)]
            if cut["audio_end_ms"] < cut["received_ms"] - 500:
                assert len(kept) < len(sent)
            assert "unheard" in await page.inner_html(f"li[data-item='{cut['item_id']}']")
            state = await _until(page, "the interruption's transcript", lambda s: len(
                _turns(s, "user")) >= 2 and _turns(s, "user")[1]["status"] == "completed")
            assert {"two", "plus"} & set(_words(_turns(state, "user")[1]["text"]))
            context = await backends(server)[0].context_text()
            assert f"\nassistant: {reply['heard']}\nuser: " in context
            metrics = _metrics(server)
            assert metrics["assistant_truncations_total"] == 1
            assert metrics['assistant_responses_total{status="cancelled"}'] == 1
            assert page.console_errors == []

    run(main(), timeout=240)


def test_a_wrong_token_is_a_clear_message_and_the_right_one_connects(
    chromium: str, tmp_path: Path
) -> None:
    mic = write_wav(tmp_path / "quiet.wav", silence(3000))

    async def main() -> None:
        async with running_server(token="right-token") as server, browser_page(
            chromium, mic, tmp_path
        ) as page:
            await page.goto(f"http://127.0.0.1:{server.port}/?aec=0")
            await page.fill("#token", "wrong-token")
            await page.click("#talk")
            state = await _until(page, "a message", lambda s: s["message"], timeout=20)
            assert "refused the token" in state["message"]
            assert "invalid bearer token" in await page.inner_text("#message")
            assert await page.inner_text("#talk") == "Start talking"
            assert backends(server) == []
            await page.fill("#token", "right-token")
            await page.click("#talk")
            state = await _until(page, "a session", lambda s: s["state"] == "listening",
                                 timeout=20)
            assert state["connected"] and state["message"] == ""
            assert len(backends(server)) == 1

    run(main(), timeout=60)
