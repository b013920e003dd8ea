"""Replay acceptance fixtures: the real models, loaded once per session."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from assistant.app.config import AppConfig, load_config
from assistant.loop.event_log import Entry
from assistant.loop.setup import LoopModels, load_models
from assistant.replay.run import ReplayOptions, ReplayOutcome, replay_sync
from assistant.replay.scenario import Noise, Recorded, Say, Scenario, render_scenario
from audio.resample import resample
from audio.wav import write_wav

CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"


def make_config(**overrides: object) -> AppConfig:
    """The shipped config with shorter replies (tests stay fast) and ``overrides``."""
    base: dict[str, object] = {"llm.max_new_tokens": 40}
    base.update(overrides)
    return load_config(CONFIG, env={}, overrides=base)


@pytest.fixture(scope="session")
def loop_models(llm_dir: Path) -> LoopModels:
    del llm_dir  # converted once by the session fixture; load_models finds it in the cache
    return load_models(make_config(), deterministic_tts=True)


@dataclass
class Run:
    scenario: Scenario
    outcome: ReplayOutcome
    cfg: AppConfig

    @property
    def entries(self) -> list[Entry]:
        return self.outcome.result.entries

    def of(self, kind: str) -> list[Entry]:
        return [e for e in self.entries if e.type == kind]

    @property
    def turns(self) -> list[dict[str, object]]:
        return self.outcome.result.conversation

    def heard(self, start_ms: int, end_ms: int) -> np.ndarray:
        """The speaker's audio between two times, at 16 kHz."""
        rate = self.outcome.heard_rate
        pcm = self.outcome.heard[start_ms * rate // 1000: end_ms * rate // 1000]
        return np.asarray(resample(pcm, rate, 16000), np.float32)


def run_scenario(models: LoopModels, parts: Sequence[Say | Noise | Recorded], tmp: Path,
                 cfg: AppConfig | None = None, **options: object) -> Run:
    cfg = cfg or make_config()
    scenario = render_scenario(parts, models.synthesizer)
    wav = tmp / "input.wav"
    write_wav(wav, scenario.pcm, scenario.sample_rate)
    outcome = replay_sync(models, cfg, wav, ReplayOptions(heard_path=tmp / "heard.wav",
                                                          **options))  # type: ignore[arg-type]
    return Run(scenario, outcome, cfg)


def transcribe(models: LoopModels, pcm16k: np.ndarray) -> str:
    peak = float(np.max(np.abs(pcm16k))) if pcm16k.size else 0.0
    if peak > 0:
        pcm16k = (pcm16k * (0.5 / peak)).astype(np.float32)  # the speaker plays at -20 dB
    return models.transcriber.transcribe(pcm16k, check_speech=False).text


def words(text: str) -> list[str]:
    return [w for w in re.sub(r"[^\w' ]+", " ", text.lower()).split() if w]


def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    ref, hyp = " ".join(words(reference)), " ".join(words(hypothesis))
    if not ref:
        return 0.0 if not hyp else 1.0
    return float(jiwer.wer(ref, hyp))
