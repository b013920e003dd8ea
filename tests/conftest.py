"""Session-wide fixtures: the packaged models, located once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from assistant.app.config import AppConfig, load_config
from assistant.app.models import resolve_asr, resolve_llm, resolve_voice


@pytest.fixture(scope="session")
def default_config() -> AppConfig:
    """The shipped config.yaml, with no environment overrides."""
    return load_config(Path(__file__).resolve().parents[1] / "config.yaml", env={})


@pytest.fixture(scope="session")
def asr_model_dir(default_config: AppConfig) -> Path:
    return resolve_asr(default_config)


@pytest.fixture(scope="session")
def piper_voice_paths(default_config: AppConfig) -> tuple[Path, Path]:
    return resolve_voice(default_config)


@pytest.fixture(scope="session")
def llm_dir(default_config: AppConfig) -> Path:
    """The packaged SmolLM2, converted once to a transformers directory (cached)."""
    return resolve_llm(default_config)
