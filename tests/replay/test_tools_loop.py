"""Tools through the voice loop, end to end on a virtual clock with model stand-ins.

The real VAD, turn manager, dialogue, engine bookkeeping and tool runner; the model is
scripted (tests/replay/tool_fakes.py) to call a tool and to answer from its result, so
what runs, what is spoken and what the history keeps can be asserted exactly.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueOptions
from assistant.llm.host import EngineHost
from assistant.llm.local import LocalBackend
from assistant.loop import event_log as log
from assistant.loop import output as out
from assistant.loop.conversation import Conversation, ConversationSettings, ToolOutput
from assistant.loop.pipeline import Pipeline, PipelineOptions
from assistant.loop.tool_worker import MAX_ROUNDS, LocalTools
from assistant.speech.listener import Listener
from assistant.speech.voice import ClauseRule
from assistant.tools import (
    ToolOptions,
    ToolRegistry,
    build_registry,
    tool_from_function,
)
from assistant.tools.timers import TimerService
from assistant.turns.options import TurnOptions
from assistant.turns.turn_manager import TurnManager
from audio.chunk import AudioChunk
from audio.clock import VirtualClock
from audio.sinks import WavSink
from audio.streaming_asr import StreamingASROptions
from audio.vad import VadOptions
from tests.replay.fakes import (
    RATE,
    CountingTranscriber,
    ToneClassifier,
    ToneSynthesizer,
    silence,
    voice,
)
from tests.replay.tool_fakes import Reply, call_text, tool_engine

FRAME = RATE * 20 // 1000
CLAUSES = ClauseRule(min_chars=6)


def get_time() -> dict[str, str]:
    """The current time."""
    return {"time": "12:00"}


@dataclass
class Run:
    entries: list[log.Entry]
    outputs: list[out.ConversationEvent]
    history: list[dict[str, str]]
    synth: ToneSynthesizer
    in_sync: bool

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.entries if isinstance(e, cls)]

    @property
    def roles(self) -> list[str]:
        return [m["role"] for m in self.history]


def _tools(*functions: Callable[..., Any], **options: Any) -> LocalTools:
    registry = ToolRegistry([tool_from_function(f) for f in functions])
    return LocalTools(registry, ToolOptions(**options))


async def _run(reply: Reply, tools: LocalTools | None, tmp: Path, *, text: str = "",
               signal: np.ndarray | None = None, virtual: bool = True,
               frames: Callable[[VirtualClock], AsyncIterator[AudioChunk]] | None = None,
               definitions: tuple[dict[str, Any], ...] | None = None,
               on_output: Callable[[Pipeline, out.ConversationEvent], None] | None = None,
               clock: VirtualClock | None = None, tool_choice: str = "auto",
               constrained: bool = True) -> Run:
    clock = clock or VirtualClock(RATE)
    synth = ToneSynthesizer()
    sink = WavSink(tmp / "heard.wav", clock, RATE)
    engine, template = tool_engine(reply, constrained=constrained)
    host = EngineHost(LocalBackend(engine))
    defs = definitions if definitions is not None else (
        tuple(tools.registry.specs_for_template()) if tools else ())
    options = DialogueOptions(system_prompt="Be brief.", max_new_tokens=200, clauses=CLAUSES,
                              tools=defs, tool_choice=tool_choice)
    outputs: list[out.ConversationEvent] = []
    holder: list[Pipeline] = []

    def publish(event: out.ConversationEvent) -> None:
        outputs.append(event)
        if on_output is not None:
            on_output(holder[0], event)

    pipeline = Pipeline(
        host=host, dialogue=lambda backend: Dialogue(backend, template, options),
        transcriber=CountingTranscriber(), synthesizer=synth,
        turn_manager=TurnManager(TurnOptions()), listener=Listener(VadOptions(), None,
                                                                   ToneClassifier()),
        clock=clock, sink=sink, asr_options=StreamingASROptions(), clauses=CLAUSES,
        options=PipelineOptions(virtual=virtual), on_output=publish, tools=tools)
    holder.append(pipeline)
    try:
        if text:
            assert pipeline.submit_turn(text) is not None
        if frames is not None:
            await pipeline.run(frames(clock))
        else:
            signal = signal if signal is not None else silence(200)
            for start in range(0, signal.size - FRAME + 1, FRAME):
                clock.wait_until(start + FRAME)
                await pipeline.feed(AudioChunk(signal[start:start + FRAME], RATE, start))
            await pipeline.run_tail()
        await pipeline.settle_workers()
        history, in_sync = await pipeline.dialogue.query(
            lambda d: (d.conversation.messages(), d.in_sync()))
    finally:
        await pipeline.aclose()
        sink.close()
        await asyncio.to_thread(host.close)
    engine.check()
    return Run(list(pipeline.entries), outputs, history, synth, in_sync)


def run(reply: Reply, tools: LocalTools | None, tmp: Path, **kw: Any) -> Run:
    return asyncio.run(_run(reply, tools, tmp, **kw))


def clock_reply(role: str, content: str) -> str:
    if role == "tool":
        return f"It is {json.loads(content)['time']} now."
    if "time" in content:
        return call_text("get_time")
    return "I can only tell the time."


def test_a_request_that_calls_a_local_tool_is_answered_with_its_result(tmp_path: Path) -> None:
    r = run(clock_reply, _tools(get_time), tmp_path, text="What time is it?")
    assert r.roles == ["system", "user", "assistant", "tool", "assistant"]
    # The call as generated: its JSON decoded under the call's schema, ending with it.
    assert r.history[2]["content"] == call_text("get_time").removesuffix("</tool_call>")
    assert json.loads(r.history[3]["content"]) == {"time": "12:00"}
    assert r.history[4]["content"] == "It is 12:00 now."
    # The call was never spoken; the answer was.
    assert not any("tool_call" in span or "get_time" in span for span in r.synth.spans)
    assert "".join(r.synth.spans).strip() == "It is 12:00 now."
    assert "".join(e.text for e in r.outputs if isinstance(e, out.ResponseDelta)) == (
        "It is 12:00 now.")  # nor published as the reply's text
    started, finished = r.of(log.ToolStartedEntry), r.of(log.ToolFinishedEntry)
    assert [(e.name, e.call_id) for e in started] == [("get_time", "call_1_0")]
    assert [(e.ok, e.cancelled) for e in finished] == [(True, False)]
    calls = [e for e in r.outputs if isinstance(e, out.ToolCallRequested)]
    assert [(c.turn_id, c.name, json.loads(c.arguments)) for c in calls] == [(1, "get_time", {})]
    done = [e for e in r.outputs if isinstance(e, out.ResponseDone)]
    assert [d.turn_id for d in done] == [1, 2] and not any(d.interrupted for d in done)
    assert r.in_sync  # the cache holds exactly the history, tool turns included


def test_a_spoken_request_runs_the_tool_with_the_words_heard(tmp_path: Path) -> None:
    seen: list[str] = []

    def lookup(words: str) -> dict[str, int]:
        """Count the words.

        Args:
            words: What the user said.
        """
        seen.append(words)
        return {"count": len(words.split())}

    def reply(role: str, content: str) -> str:
        if role == "tool":
            return f"You said {json.loads(content)['count']} words."
        return call_text("lookup", words=content)

    r = run(reply, _tools(lookup), tmp_path,
            signal=np.concatenate([silence(300), voice(800), silence(400)]))
    final = r.of(log.TranscriptFinalEntry)[0].text
    assert seen == [final]
    assert r.history[-1] == {"role": "assistant",
                             "content": f"You said {len(final.split())} words."}
    assert r.of(log.AudioStartedEntry)  # the answer was played
    assert r.in_sync


def test_a_speculation_that_drafted_a_call_and_missed_runs_nothing(tmp_path: Path) -> None:
    ran: list[str] = []

    def lookup(words: str) -> str:
        """Look the words up.

        Args:
            words: The words.
        """
        ran.append(words)
        return "found"

    def reply(role: str, content: str) -> str:  # a short request calls, a long one not
        if role == "user" and len(content.split()) < 9:
            return call_text("lookup", words=content)
        return "That was a long one, no tool needed."

    signal = np.concatenate([silence(300), voice(600), silence(350), voice(600), silence(300)])
    r = run(reply, _tools(lookup), tmp_path, signal=signal)
    specs = r.of(log.SpeculationStartedEntry)
    assert len(specs[0].text.split()) < 9  # the first draft was a call ...
    assert specs[0].spec_id in [m.spec_id for m in r.of(log.SpeculationMissEntry)]
    assert ran == [] and not r.of(log.ToolStartedEntry)  # ... and nothing ran
    # Nor was it pre-synthesised or kept: only the real reply was spoken and recorded.
    drafted = [e.spec_id for e in r.of(log.SpeculationDraftedEntry)]
    assert specs[0].spec_id not in drafted
    assert not any("tool_call" in span for span in r.synth.spans)
    assert r.roles == ["system", "user", "assistant"]
    assert r.history[-1]["content"] == "That was a long one, no tool needed."


def test_a_slow_tool_gets_one_filler_and_its_answer_follows_it(tmp_path: Path) -> None:
    def slow_time() -> dict[str, str]:
        """The current time, slowly."""
        time.sleep(0.5)
        return {"time": "12:00"}

    def reply(role: str, content: str) -> str:
        if role == "tool":
            return f"It is {json.loads(content)['time']} now."
        return call_text("slow_time")

    r = run(reply, _tools(slow_time, filler_after_ms=50), tmp_path, text="What time is it?")
    assert r.roles == ["system", "user", "assistant", "assistant", "tool", "assistant"]
    assert r.history[3]["content"] == "One moment."  # said, and recorded as said
    assert r.history[5]["content"] == "It is 12:00 now."
    assert [s.strip() for s in r.synth.spans].count("One moment.") == 1
    assert r.in_sync


def test_speech_while_a_tool_runs_cancels_it_and_the_user_is_answered(tmp_path: Path) -> None:
    """Not virtual: the tool runs on while the user's audio comes in."""
    started = asyncio.Event()
    cancelled: list[bool] = []

    async def slow() -> str:
        """Take a long time."""
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    def reply(role: str, content: str) -> str:
        if role == "user" and "slow" in content:
            return call_text("slow")
        return "Fine, answering you instead."

    async def frames(clock: VirtualClock) -> AsyncIterator[AudioChunk]:
        signal = np.concatenate([silence(200), voice(800), silence(3000)])
        for i, start in enumerate(range(0, signal.size - FRAME + 1, FRAME)):
            if i == 10:
                await asyncio.wait_for(started.wait(), 10)  # the user speaks over the tool
            clock.wait_until(start + FRAME)
            yield AudioChunk(signal[start:start + FRAME], RATE, start)
            await asyncio.sleep(0.004)

    r = run(reply, _tools(slow, filler_after_ms=60_000), tmp_path, text="run the slow one",
            virtual=False, frames=frames)
    assert cancelled == [True]
    finished = r.of(log.ToolFinishedEntry)
    assert [(f.name, f.ok, f.cancelled) for f in finished] == [("slow", False, True)]
    assert r.roles == ["system", "user", "assistant", "tool", "user", "assistant"]
    assert json.loads(r.history[3]["content"]) == {"error": "cancelled: the user spoke"}
    assert r.history[-1]["content"] == "Fine, answering you instead."
    assert r.in_sync


def test_a_call_that_cannot_be_read_is_told_to_the_model(tmp_path: Path) -> None:
    def reply(role: str, content: str) -> str:
        if role == "tool":
            return "Sorry, that went wrong." if "could not be read" in content else "?"
        return '<tool_call>{"name": "get_time", "arguments": {</tool_call>'

    # A backend that cannot decode under a schema: the call is read as written.
    r = run(reply, _tools(get_time), tmp_path, text="What time is it?", constrained=False)
    calls = [e for e in r.outputs if isinstance(e, out.ToolCallRequested)]
    assert len(calls) == 1 and calls[0].error and not calls[0].name
    assert not r.of(log.ToolStartedEntry)
    assert r.history[-1]["content"] == "Sorry, that went wrong."


def test_a_model_that_keeps_calling_is_stopped(tmp_path: Path) -> None:
    r = run(lambda role, content: call_text("get_time"), _tools(get_time), tmp_path,
            text="What time is it?")
    assert len(r.of(log.ToolStartedEntry)) == MAX_ROUNDS
    tool_turns = [m["content"] for m in r.history if m["role"] == "tool"]
    assert "too many tool calls" in tool_turns[-1]
    assert r.in_sync  # it ended, in a consistent state


def test_a_call_the_model_opens_by_itself_is_decoded_under_its_schema(tmp_path: Path) -> None:
    """tool_choice auto: the model would write a broken call, but once it opened one
    the rest is decoded under the call's schema, so the call is valid and runs."""
    def reply(role: str, content: str) -> str:
        if role == "tool":
            return "Done."
        return '<tool_call>{"name": "get_time", "arguments": {</tool_call>'

    r = run(reply, _tools(get_time), tmp_path, text="What time is it?")
    calls = [e for e in r.outputs if isinstance(e, out.ToolCallRequested)]
    assert [(c.name, c.arguments, c.error) for c in calls] == [("get_time", "{}", "")]
    assert [e.ok for e in r.of(log.ToolFinishedEntry)] == [True]
    assert r.history[-1]["content"] == "Done."


def test_a_model_that_keeps_writing_unreadable_calls_is_stopped(tmp_path: Path) -> None:
    r = run(lambda role, content: '<tool_call>{"name": "get_time", "argu</tool_call>',
            _tools(get_time), tmp_path, text="What time is it?", constrained=False)
    errors = [e for e in r.outputs if isinstance(e, out.ToolCallRequested)]
    assert len(errors) == MAX_ROUNDS + 2 and all(e.error for e in errors)
    assert not r.of(log.ToolStartedEntry)
    assert r.in_sync


def test_a_timer_speaks_when_it_fires(tmp_path: Path) -> None:
    clock = VirtualClock(RATE)
    timers = TimerService(lambda: clock.now_samples() / RATE)
    registry = build_registry(("builtin:set_timer",), timers=timers)
    tools = LocalTools(registry, ToolOptions(), timers)

    def reply(role: str, content: str) -> str:
        if role == "tool":
            return "Timer set."
        return call_text("set_timer", seconds=2, label="tea")

    r = run(reply, tools, tmp_path, text="Set a tea timer.", clock=clock,
            signal=silence(5000))
    said = [m["content"] for m in r.history if m["role"] == "assistant"]
    assert said[-2:] == ["Timer set.", "Your timer for tea is done."]
    assert "Your timer for tea is done." in " ".join(s.strip() for s in r.synth.spans)
    # It fired on the conversation's clock, about two seconds after it was set.
    set_at = r.of(log.ToolFinishedEntry)[0].t_ms
    announced = [e for e in r.of(log.ResponseStartedEntry) if not e.user_text]  # said
    assert len(announced) == 1 and set_at + 2000 <= announced[0].t_ms <= set_at + 2100


def test_a_client_tool_goes_out_and_its_output_is_answered(tmp_path: Path) -> None:
    """No local tools: the call is published and the adapter gives the output back."""
    weather = {"type": "function", "function": {
        "name": "weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}

    def reply(role: str, content: str) -> str:
        if role == "tool":
            return f"It is {json.loads(content)['temp']} degrees."
        return call_text("weather", city="Oslo")

    def on_output(pipeline: Pipeline, event: out.ConversationEvent) -> None:
        if isinstance(event, out.ToolCallRequested):
            assert json.loads(event.arguments) == {"city": "Oslo"}
            pending.append(event)
        elif isinstance(event, out.ResponseDone) and pending:
            call = pending.pop()
            conversation = Conversation(pipeline, _settings())
            assert conversation.submit_tool_outputs(
                [ToolOutput(call.call_id, call.name, '{"temp": 21}')]) is not None

    pending: list[out.ToolCallRequested] = []
    r = run(reply, None, tmp_path, text="Weather in Oslo?", definitions=(weather,),
            on_output=on_output)
    assert r.roles == ["system", "user", "assistant", "tool", "assistant"]
    assert r.history[-1]["content"] == "It is 21 degrees."
    assert r.in_sync


def test_a_required_call_is_decoded_under_its_schema(tmp_path: Path) -> None:
    """tool_choice required: the model would rather speak, but its reply to the user is
    decoded under the call's JSON schema, so it is a valid call; the reply to the
    result is free."""
    def reply(role: str, content: str) -> str:
        if role == "tool":
            return f"It is {json.loads(content)['time']} now."
        return "Hello there, nice to meet you."

    r = run(reply, _tools(get_time), tmp_path, text="Hi!", tool_choice="required")
    assert r.roles == ["system", "user", "assistant", "tool", "assistant"]
    assert json.loads(r.history[2]["content"]) == {"name": "get_time", "arguments": {}}
    assert [e.name for e in r.of(log.ToolStartedEntry)] == ["get_time"]
    assert r.history[-1]["content"] == "It is 12:00 now."
    assert not any("Hello" in span or "get_time" in span for span in r.synth.spans)
    assert r.in_sync


def _settings() -> ConversationSettings:
    return ConversationSettings(dialogue=DialogueOptions(), turns=TurnOptions(),
                                vad=VadOptions(), asr=StreamingASROptions())
