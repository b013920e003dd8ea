"""The loop's front door (`assistant.loop.conversation`) with model stand-ins (fast).

A conversation opened from typed settings answers a text turn, is cut by ``truncate``
like a client that heard less, applies what ``update`` may change and refuses the
rest by name. And it is the only way the loop is built: no other module constructs a
`Pipeline`.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from assistant.dialogue.types import DialogueOptions
from assistant.llm.host import EngineHost
from assistant.llm.local import LocalBackend
from assistant.loop import output as out
from assistant.loop.conversation import Conversation, ConversationSettings, SettingsError
from assistant.loop.types import PipelineOptions
from assistant.speech.voice import ClauseRule
from assistant.turns.end_of_turn import EndOfTurnOptions
from assistant.turns.options import TurnOptions
from audio.clock import VirtualClock
from audio.sinks import WavSink
from audio.streaming_asr import StreamingASROptions
from audio.vad import VadOptions
from tests.replay.fakes import RATE, CountingTranscriber, ToneSynthesizer, scripted_engine

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Models:
    host: EngineHost
    template: Any
    transcriber: Any
    synthesizer: Any
    end_model: Any = None


def settings() -> ConversationSettings:
    return ConversationSettings(
        dialogue=DialogueOptions(system_prompt="Be brief.", max_new_tokens=400,
                                 clauses=ClauseRule(min_chars=6)),
        turns=TurnOptions(), vad=VadOptions(), asr=StreamingASROptions(),
        clauses=ClauseRule(min_chars=6), pipeline=PipelineOptions(virtual=True))


async def _open(tmp: Path, events: list[out.ConversationEvent]
                ) -> tuple[Conversation, EngineHost, WavSink]:
    engine, template = scripted_engine()
    host = EngineHost(LocalBackend(engine))
    clock = VirtualClock(RATE)
    sink = WavSink(tmp / "heard.wav", clock, RATE)
    models = Models(host, template, CountingTranscriber(), ToneSynthesizer())
    conversation = Conversation.open(models, settings(), clock=clock, sink=sink,
                                     on_output=events.append)
    return conversation, host, sink


def test_a_text_turn_is_answered_and_truncate_cuts_the_closed_reply(tmp_path: Path) -> None:
    events: list[out.ConversationEvent] = []

    async def scenario() -> tuple[list[dict[str, str]], str, list[dict[str, str]], str, Any]:
        conversation, host, sink = await _open(tmp_path, events)
        try:
            turn = conversation.submit_text("How are you")
            assert turn is not None
            await conversation.run_tail()
            before = await conversation.history()
            seq_before = await conversation.sequence_text()
            recut = await conversation.truncate(turn, 2, 300)
            after = await conversation.history()
            return before, seq_before, after, await conversation.sequence_text(), recut
        finally:
            await conversation.aclose()
            sink.close()
            await asyncio.to_thread(host.close)

    before, seq_before, after, seq_after, recut = asyncio.run(scenario())
    assert before[-1] == {"role": "assistant",
                          "content": "You said How are you. Fine, thanks for asking!"}
    assert "Fine, thanks for asking!" in seq_before
    # The client heard two words: the history and the cache keep exactly those.
    assert recut is not None and recut.changed
    assert after[-1]["role"] == "assistant"
    assert after[-1]["content"].startswith("You said")
    assert "How" not in after[-1]["content"] and "Fine" not in seq_after
    done = [e for e in events if isinstance(e, out.ResponseDone)]
    assert [d.interrupted for d in done] == [False]


def test_update_applies_what_may_change_and_refuses_the_rest_by_name(tmp_path: Path) -> None:
    async def scenario() -> None:
        conversation, host, sink = await _open(tmp_path, [])
        try:
            base = conversation.settings
            turns = dataclasses.replace(base.turns, end_of_turn=EndOfTurnOptions(
                mode="fixed", fallback_ms=900))
            new = dataclasses.replace(
                base, turns=turns,
                dialogue=dataclasses.replace(base.dialogue, temperature=0.3),
                pipeline=dataclasses.replace(base.pipeline, presynthesize=False))
            conversation.update(new)
            assert conversation.settings == new
            p = conversation.pipeline
            assert p.tm.options == turns and not p.options.presynthesize
            assert p.parts.options.presynthesize is False
            for field, changed in (
                    ("asr", dataclasses.replace(new, asr=StreamingASROptions(
                        partial_interval_ms=999))),
                    ("clauses", dataclasses.replace(new, clauses=ClauseRule(min_chars=40))),
                    ("pipeline.virtual", dataclasses.replace(
                        new, pipeline=dataclasses.replace(new.pipeline, virtual=False)))):
                with pytest.raises(SettingsError) as refused:
                    conversation.update(changed)
                assert refused.value.field == field
                assert conversation.settings == new  # nothing of a refused change applied
        finally:
            await conversation.aclose()
            sink.close()
            await asyncio.to_thread(host.close)

    asyncio.run(scenario())


def test_only_the_conversation_builds_a_pipeline() -> None:
    """talk, replay, the daemon's sessions and its local audio all open a Conversation."""
    builders = []
    for path in (ROOT / "assistant").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "Pipeline"):
                builders.append(path.relative_to(ROOT).as_posix())
    assert builders == ["assistant/loop/conversation.py"]


def test_the_config_s_tools_reach_the_conversation_settings() -> None:
    from assistant.app.config import load_config
    from assistant.app.errors import ConfigError
    from assistant.loop.setup import conversation_settings

    def config(**overrides: object) -> Any:
        return load_config(ROOT / "config.yaml", env={}, overrides=overrides)

    assert conversation_settings(config()).tools is None  # off unless configured
    s = conversation_settings(config(**{"tools.enabled": ["builtin:get_time",
                                                          "builtin:set_timer"],
                                        "tools.choice": "get_time"}))
    assert s.tools is not None and s.tools.registry.names == ("get_time", "set_timer")
    assert [t["function"]["name"] for t in s.dialogue.tools] == ["get_time", "set_timer"]
    assert s.dialogue.tool_choice == "get_time"
    # chat shows the same tools under the same choice (one mapping, with_local_tools).
    from assistant.loop.setup import dialogue_options, with_local_tools

    cfg = config(**{"tools.enabled": ["builtin:get_time"], "tools.choice": "required"})
    chat = with_local_tools(dialogue_options(cfg), s.tools, cfg)
    assert chat.tool_choice == "required" and chat.tools == s.dialogue.tools
    assert s.tools.timers is not None  # set_timer's, on the conversation's clock
    with pytest.raises(ConfigError, match="tools.choice"):
        conversation_settings(config(**{"tools.enabled": ["builtin:get_time"],
                                        "tools.choice": "calculator"}))


def test_the_short_request_bar_is_configurable() -> None:
    from assistant.app.config import load_config
    from assistant.loop.setup import conversation_settings

    cfg = load_config(ROOT / "config.yaml", env={}, overrides={
        "vad.semantic_short_words": 2, "vad.semantic_p_complete_short": 0.05})
    rule = conversation_settings(cfg).turns.end_of_turn
    assert (rule.short_words, rule.p_complete_short) == (2, 0.05)
    assert rule.p_complete_for("five five") == 0.05
    assert rule.p_complete_for("four queen of clubs") == rule.p_complete
