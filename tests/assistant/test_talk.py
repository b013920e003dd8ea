"""``assistant talk`` without sound hardware: the terminal view and the clean shutdown."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator

import pytest

from assistant.app.cli import main
from assistant.commands.talk import TerminalView
from assistant.loop import event_log as log
from assistant.loop.live import converse
from assistant.loop.output import public_event


def test_terminal_view_shows_state_and_transcripts() -> None:
    """The view subscribes to the conversation's public output: each log entry it shows
    reaches it as that stream's event."""
    out = io.StringIO()
    view = TerminalView(out)
    for entry in (log.StateEntry(0, "user_speaking"), log.TranscriptPartialEntry(5, "what is"),
                  log.TranscriptFinalEntry(9, "what is it"), log.StateEntry(10, "thinking"),
                  log.ResponseStartedEntry(11, 1, "what is it", 30, 4, 26, "hit"),
                  log.StateEntry(12, "speaking"),
                  log.ResponseDoneEntry(20, 1, "It is late.", 5, True, 900),
                  log.EngineFailedEntry(30, "out of pages")):
        event = public_event(entry)
        assert event is not None, entry
        view(event)
    text = out.getvalue()
    assert "[user_speaking] you: what is ..." in text
    assert "you: what is it\n" in text
    assert "[thinking] (reply was ready: speculation hit)" in text
    assert "assistant: It is late.  [interrupted]\n" in text
    assert "error: out of pages\n" in text
    assert view.state == "speaking"


class FakePipeline:
    def __init__(self) -> None:
        self.frames = 0
        self.closed = False

    async def run(self, frames: AsyncIterator[int]) -> None:
        async for _ in frames:
            self.frames += 1

    async def aclose(self) -> None:
        self.closed = True


def test_ctrl_c_stops_the_mic_and_closes_the_pipeline() -> None:
    stopped: list[bool] = []

    async def endless() -> AsyncIterator[int]:
        while True:
            await asyncio.sleep(0.001)
            yield 1

    async def scenario() -> FakePipeline:
        pipeline = FakePipeline()
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)  # what SIGINT does
        await converse(pipeline, endless(), stop, lambda: stopped.append(True))
        return pipeline

    pipeline = asyncio.run(scenario())
    assert pipeline.closed and stopped == [True] and pipeline.frames > 0


def test_shutdown_order_mic_then_pipeline_then_the_source_thread_then_nothing_posts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C: the mic closes (its frames end), the pipeline closes, and the source
    thread is joined before ``converse`` returns, so the loop closes on no live thread."""
    import threading

    from assistant.loop.source_thread import SourceThread

    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    order: list[str] = []
    closed = threading.Event()

    def mic() -> Iterator[int]:
        while not closed.wait(0.002):
            yield 1
        order.append("mic frames ended")

    class OrderedPipeline(FakePipeline):
        async def aclose(self) -> None:
            order.append("pipeline closed")
            await super().aclose()

    def close_mic() -> None:
        order.append("mic closed")
        closed.set()

    async def scenario() -> tuple[OrderedPipeline, SourceThread[int]]:
        pipeline = OrderedPipeline()
        source = SourceThread(mic())
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        await converse(pipeline, source, stop, close_mic)
        order.append("source joined" if not source.alive else "source still running")
        return pipeline, source

    pipeline, _ = asyncio.run(scenario())
    assert pipeline.frames > 0 and pipeline.closed
    assert order[0] == "mic closed" and order[-1] == "source joined"
    assert order.index("pipeline closed") < order.index("source joined")
    assert errors == []


def test_talk_without_audio_devices_is_a_clear_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    from audio.devices import list_devices
    from audio.errors import DeviceError

    try:
        has_mic = any(d.max_input_channels > 0 for d in list_devices())
    except DeviceError:
        has_mic = False  # no PortAudio at all: talk must say so, too
    if has_mic:
        pytest.skip("this machine has a microphone; talk would start listening")
    assert main(["talk"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
