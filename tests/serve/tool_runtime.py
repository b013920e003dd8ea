"""A daemon runtime whose model is scripted to call the client's tools (no weights).

The real `PipelineBackend` and conversation (VAD, turn manager, dialogue, engine
bookkeeping) over the scripted engine of tests/replay/tool_fakes.py; speech recognition
and synthesis are the hermetic stand-ins of tests/replay/fakes.py unless a test passes
the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assistant.app.config import load_config
from tests.replay.fakes import CountingTranscriber, ToneSynthesizer
from tests.replay.tool_fakes import Reply, call_text, tool_engine

CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"

WEATHER_CALL = call_text("weather", city="Oslo")


def weather_reply(role: str, content: str) -> str:
    """The scripted model: a question about the weather calls ``weather``; ``check first``
    says a few words before calling; ``garbled`` writes a call that cannot be read; a
    tool's result (``{"temp": N}``) is answered as ``It is N degrees in Oslo.``."""
    if role == "tool":
        return f"It is {json.loads(content)['temp']} degrees in Oslo."
    text = content.lower()
    if "garbled" in text:
        return "<tool_call>\n{not json\n</tool_call>"
    if "weather" in text:
        return ("Let me check. " if "check first" in text else "") + WEATHER_CALL
    return "Hello there, how can I help?"


def scripted_runtime(reply: Reply = weather_reply, *, transcriber: Any = None,
                     synthesizer: Any = None, overrides: dict[str, Any] | None = None,
                     constrained: bool = True) -> Any:
    """A `ServeRuntime` over the scripted model (close it with ``.close()``);
    ``constrained``: its engine decodes a call under the call's schema."""
    from assistant.llm.host import EngineHost
    from assistant.llm.local import LocalBackend
    from assistant.loop.setup import LoopModels
    from assistant.serve.runtime import runtime_from_models

    engine, template = tool_engine(reply, constrained=constrained)
    cfg = load_config(CONFIG, env={}, overrides=overrides or {})
    ears: Any = transcriber or CountingTranscriber()
    voice: Any = synthesizer or ToneSynthesizer()
    models = LoopModels(engine, template, ears, voice, EngineHost(LocalBackend(engine)))
    return runtime_from_models(cfg, models)
