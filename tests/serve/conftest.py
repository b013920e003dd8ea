"""Daemon fixtures: the real models loaded once, wrapped as a serving runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from assistant.app.config import load_config

CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"


@pytest.fixture(scope="session")
def serve_runtime(llm_dir: Path) -> Any:
    """Real ASR, TTS and LLM (shorter replies keep the tests fast)."""
    from assistant.loop.setup import load_models
    from assistant.serve.runtime import runtime_from_models

    del llm_dir  # converted once by the session fixture; load_models finds it in the cache
    cfg = load_config(CONFIG, env={}, overrides={"llm.max_new_tokens": 40})
    return runtime_from_models(cfg, load_models(cfg, deterministic_tts=True))



@pytest.fixture(scope="session")
def chromium() -> str:
    """A headless Chromium to drive with playwright (skips with the reason when absent)."""
    from tests.serve.browser import find_chromium

    pytest.importorskip("playwright.async_api",
                        reason="python playwright is not installed (pip install -e '.[dev]')")
    path = find_chromium()
    if path is None:
        pytest.skip("no Chromium: `make sysdeps` installs Debian's chromium as root, or set "
                    "ASSISTANT_CHROMIUM=/path/to/chromium")
    return path
