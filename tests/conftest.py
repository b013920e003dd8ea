"""Session-wide fixtures and rules.

- The packaged models, located once per test session.
- ``slow``: a test that loads a packaged model (Whisper, the Piper voice, SmolLM2) is
  slow. Tests that take one of the real-model fixtures below are marked so at collection;
  a test without the mark that loads one of those models in this process anyway (a
  ``WhisperModel``, a ``PiperVoice``, the packaged GGUF's conversion) fails at once,
  saying so, so ``pytest -m "not slow"`` stays hermetic and fast. (A test that starts the
  CLI in a subprocess with the default models carries the mark itself.)
- CPUs: ``each_cpu`` runs a test once per CPU profile (`tests/cpu_profiles.py`);
  ``pytest --cpu NAME`` pretends one profile for the whole session.
- ``bench_import``: a script of ``bench/`` imported as the benches import their siblings.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import faster_whisper
import piper
import pytest

from assistant.app import llm_convert, models
from assistant.app.config import AppConfig, load_config
from assistant.app.models import resolve_asr, resolve_llm, resolve_voice
from engine.cpu_features import CpuFeatures
from tests.cpu_profiles import CPU_PROFILES, pretend_cpu, profile_skip_reason

REAL_MODEL_FIXTURES = frozenset({
    "asr_model_dir", "piper_voice_paths", "llm_dir",  # here
    "piper_voice", "whisper_model", "synthesizer", "transcriber",  # tests/audio/conftest.py
})
"""Fixtures that load (or locate, to load) a packaged model: a test using one is slow."""

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu", default="native", choices=["native", *CPU_PROFILES],
        help="pretend this CPU profile (tests/cpu_profiles.py) for the whole session: the "
             "engine's kernel choices follow it; 'native' (default) is this machine")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


class RealModelInFastTest(RuntimeError):
    """A test not marked ``slow`` reached a packaged model."""


@pytest.fixture(scope="session")
def _packaged_llm() -> Path | None:
    """Where the packaged SmolLM2 lies (None: not installed), located once."""
    try:
        return models.package_dir(models.LLM_PACKAGE).resolve()
    except models.ModelNotFoundError:
        return None


@pytest.fixture(autouse=True)
def _real_models_only_in_slow_tests(request: pytest.FixtureRequest,
                                    monkeypatch: pytest.MonkeyPatch,
                                    _packaged_llm: Path | None) -> None:
    if request.node.get_closest_marker("slow") is not None:
        return

    def refuse(what: str) -> NoReturn:
        raise RealModelInFastTest(
            f"{request.node.nodeid} loads {what}: mark it @pytest.mark.slow (or use a "
            "fake) so that `pytest -m 'not slow'` stays hermetic")

    def no_whisper(self: Any, *args: Any, **kwargs: Any) -> None:
        refuse("a Whisper model")

    def no_piper(self: Any, *args: Any, **kwargs: Any) -> None:
        refuse("a Piper voice")

    convert = llm_convert.convert_gguf

    def no_packaged_llm(gguf: Path, *args: Any, **kwargs: Any) -> Path:
        if _packaged_llm is not None and _packaged_llm in Path(gguf).resolve().parents:
            refuse("the packaged SmolLM2")
        return convert(gguf, *args, **kwargs)

    monkeypatch.setattr(faster_whisper.WhisperModel, "__init__", no_whisper)
    monkeypatch.setattr(piper.PiperVoice, "__init__", no_piper)
    monkeypatch.setattr(llm_convert, "convert_gguf", no_packaged_llm)


@pytest.fixture(scope="session", autouse=True)
def _session_cpu(request: pytest.FixtureRequest) -> Iterator[None]:
    name = request.config.getoption("--cpu")
    if name == "native":
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        pretend_cpu(patch, CPU_PROFILES[name])
        yield


@pytest.fixture(params=sorted(CPU_PROFILES))
def each_cpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> CpuFeatures:
    """Run the test once per CPU profile, with torch reporting that CPU."""
    cpu = CPU_PROFILES[request.param]
    reason = profile_skip_reason(cpu)
    if reason is not None:
        pytest.skip(reason)
    pretend_cpu(monkeypatch, cpu)
    return cpu


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


@pytest.fixture
def bench_import(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """``import_module`` with ``bench/`` on the path for this test only: the bench scripts
    import their siblings by name (``from results import Report``)."""
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    return importlib.import_module
