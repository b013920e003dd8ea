"""``assistant models``: where each model resolved, its size, and whether it loads."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from assistant.app.config import AppConfig

__all__ = ["ModelReport", "inspect_models", "register", "run"]


@dataclass(frozen=True)
class ModelReport:
    role: str
    setting: str
    """The config value (``default`` or a path/name)."""
    path: str | None
    size_bytes: int | None
    loads: bool | None
    """None when loading was skipped."""
    detail: str


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "models",
        help="list the models, where they resolved, their size and whether they load",
        description="Resolve the ASR, TTS and LLM models (packaged defaults or your paths "
        "from config.yaml), show where they are and their size, and try loading each. "
        "The first run converts the packaged LLM GGUF to safetensors (one time).",
    )
    parser.add_argument("--no-load", action="store_true", help="only resolve, do not load")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    reports = inspect_models(cfg, load=not args.no_load)
    if args.json:
        print(json.dumps([asdict(r) for r in reports], indent=2))
    else:
        for r in reports:
            size = f"{r.size_bytes / 1e6:.1f} MB" if r.size_bytes is not None else "-"
            status = {True: "loads", False: "FAILS", None: "not loaded"}[r.loads]
            print(f"{r.role:5} {status:10} {size:>10}  {r.path or '-'}")
            if r.detail:
                print(f"      {r.detail}")
    return 0 if all(r.loads is not False for r in reports) else 1


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _remote_llm(cfg: AppConfig, path: Path) -> str:
    """The vLLM replicas' model, after checking their tokenizer is ``path``'s (a mismatch
    raises: the ids we send must mean the same there)."""
    from assistant.llm.vllm.connect import connect
    from assistant.loop.setup import vllm_options

    backend = connect(vllm_options(cfg), path)
    up = [h.url for h in backend.health() if h.up]
    down = [h.url for h in backend.health() if not h.up]
    note = f"; down: {', '.join(down)}" if down else ""
    return (f"served by vLLM as {backend.model.name} ({backend.max_positions} positions) at "
            f"{', '.join(up)}{note}; tokenizer matches the local one")


def inspect_models(cfg: AppConfig, *, load: bool = True) -> list[ModelReport]:
    from assistant.app import models

    def asr() -> tuple[Path, Callable[[], str]]:
        path = models.resolve_asr(cfg)

        def try_load() -> str:
            from faster_whisper import WhisperModel

            WhisperModel(str(path), device="cpu", compute_type=cfg.asr.compute_type)
            return ""

        return path, try_load

    def tts() -> tuple[Path, Callable[[], str]]:
        onnx, config = models.resolve_voice(cfg)

        def try_load() -> str:
            from piper import PiperVoice

            voice = PiperVoice.load(onnx, config_path=config)
            return f"{voice.config.sample_rate} Hz"

        return onnx, try_load

    def llm() -> tuple[Path, Callable[[], str]]:
        path = models.resolve_llm(cfg) if load else models.resolve_llm_source(cfg)

        def try_load() -> str:
            from engine.loader import load_runner

            if cfg.engine.backend == "vllm":
                return _remote_llm(cfg, path)
            # A tiny KV pool: this checks that our engine can run the weights.
            runner, _tokenizer = load_runner(path, page_size=16, num_pages=4)
            source = models.resolve_llm_source(cfg)
            return f"vocab {runner.vocab_size}, runs on our engine (from {source.name})"

        return path, try_load

    reports = []
    for role, setting, resolve in (
        ("asr", cfg.models.asr, asr),
        ("tts", cfg.models.tts_voice, tts),
        ("llm", cfg.models.llm, llm),
    ):
        try:
            path, try_load = resolve()
        except Exception as exc:  # report every model, even when one is broken
            reports.append(ModelReport(role, setting, None, None, False, str(exc)))
            continue
        loads: bool | None = None
        detail = ""
        if load:
            try:
                detail = try_load()
                loads = True
            except Exception as exc:
                loads, detail = False, f"{type(exc).__name__}: {exc}"
        reports.append(ModelReport(role, setting, str(path), _size(path), loads, detail))
    return reports
