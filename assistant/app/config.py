"""Typed configuration, read in one place.

Precedence, highest first: CLI flag > environment (``ASSISTANT__SECTION__KEY=value``,
the value parsed as YAML) > the config file > built-in defaults. The built-in defaults
equal the shipped ``config.yaml`` (a test keeps them in step). An unknown key or a value
of the wrong type is a `ConfigError` naming the key and where the value came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from assistant.app.errors import ConfigError
from assistant.turns.interruption import BACKCHANNELS, INTERRUPT_WORDS

__all__ = [
    "AppConfig",
    "AsrConfig",
    "AudioConfig",
    "EchoConfig",
    "EngineConfig",
    "LlmConfig",
    "LoggingConfig",
    "ModelsConfig",
    "ServerConfig",
    "TtsConfig",
    "TurnsConfig",
    "VadConfig",
    "ENV_PREFIX",
    "default_config_path",
    "load_config",
    "parse_override",
]

ENV_PREFIX = "ASSISTANT__"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ModelsConfig(_Section):
    asr: str = "default"
    """'default' (packaged Whisper tiny.en) or a CTranslate2 Whisper directory."""
    tts_voice: str = "default"
    """'default' (packaged Piper voice), a voice name in voices_dir, or a .onnx path."""
    llm: str = "default"
    """'default' (packaged SmolLM2 GGUF), a .gguf file, or a transformers model directory."""
    cache_dir: str | None = None
    """Where converted LLM weights go; None = $XDG_CACHE_HOME/assistant."""
    voices_dir: str = "voices"
    """Extra Piper voices; relative paths are relative to the config file."""
    smart_turn: str = "default"
    """'default' (Smart Turn v3.2 from pipecat-ai) or a Smart Turn v3 .onnx path."""


class AudioConfig(_Section):
    sample_rate: int = Field(16000, gt=0)
    """Internal rate in Hz for VAD and ASR."""
    frame_ms: Literal[10, 20, 30] = 20
    input_device: str | int | None = None
    output_device: str | int | None = None
    output_buffer_ms: int = Field(20, gt=0)
    mic_queue_frames: int = Field(500, gt=0)


class VadConfig(_Section):
    backend: Literal["webrtc", "silero"] = "webrtc"
    aggressiveness: int = Field(2, ge=0, le=3)
    silero_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    min_speech_ms: int = Field(120, gt=0)
    prefix_padding_ms: int = Field(300, ge=0)
    short_pause_ms: int = Field(200, gt=0)
    pause_onset_ms: int = Field(100, ge=0)
    """Silence after which a pause's transcript starts decoding (0: at the short pause)."""
    end_of_turn_ms: int = Field(550, gt=0)
    end_of_turn: Literal["fixed", "semantic"] = "semantic"
    semantic_min_ms: int = Field(250, gt=0)
    semantic_max_ms: int = Field(1600, gt=0)
    semantic_p_complete: float = Field(0.1, gt=0.0, lt=1.0)
    semantic_p_incomplete: float = Field(0.003, gt=0.0, lt=1.0)
    smart_turn: bool = True
    """Semantic mode: also ask the audio model (models.smart_turn) at each pause."""
    smart_turn_wait_ms: int = Field(1000, gt=0)
    """Semantic mode: the least silence that ends a turn the audio model calls unfinished."""


class AsrConfig(_Section):
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    compute_type: str = "int8"
    beam_size: int = Field(1, ge=1)
    language: str | None = "en"
    partial_interval_ms: int = Field(500, gt=0)
    window_s: float = Field(10.0, ge=0.0, le=30.0)
    """Whisper encoder window for live speech (0 = the stock 30 s; see audio.whisper_window)."""


class TtsConfig(_Section):
    length_scale: float = Field(1.0, gt=0.0)
    min_clause_chars: int = Field(12, ge=0)
    first_clause_max_chars: int = Field(16, gt=0)
    """A reply's first clause is cut at a space past this length: its synthesis is the
    first audio (shorter: sooner; longer: whole-phrase prosody)."""
    first_clause_priority: bool = True
    """On a CPU engine, the LLM's decode steps wait (at most 250 ms) while a reply's first
    clause is synthesised: the first audio waits for that synthesis, and two cores shared
    with the decode made it ~2x slower."""


class EchoConfig(_Section):
    mode: Literal["off", "gate", "aec"] = "gate"
    gate_margin_db: float = 10.0
    aec_lead_ms: int = Field(20, ge=0, le=200)
    """Live audio, ``aec``: the canceller gets the speaker's audio this much before it is
    reported heard (the echo must come after its reference)."""
    aec_align: bool = True
    """``aec``: measure where the echo really is in the mic and move the speaker's audio
    there when the reported times put it where AEC3 cannot cancel it (half duplex until
    it is found)."""
    gate_stands_down: bool = True
    """``gate``: listen for the echo, and gate nothing while ~1.5 s of playback brings
    none (headphones); gate again, for the session, from the first echo heard."""

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `off` as the boolean false.
        return "off" if value is False else value


class EngineConfig(_Section):
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    page_size: int = Field(16, gt=0)
    num_pages: int = Field(2048, gt=0)
    max_batch: int = Field(8, gt=0)
    prefill_chunk: int = Field(512, gt=0)
    weights: Literal["auto", "fp32", "bf16", "int8", "int4"] | None = "auto"
    """Weight format of the local engine's linears; None = dense in `dtype`. auto: bf16 on
    CPUs running torch's AVX2 kernels, int4 elsewhere (`engine.weight_formats.
    auto_weight_format`). bf16, int8 and int4 (groups of 32, llama.cpp's Q4_1 layout)
    compute in bfloat16 whatever `dtype` says."""
    dense_prefill: Literal["auto", "always", "never"] = "auto"
    """int8/int4: also keep a 16-bit copy of each weight for calls of many rows (prefill,
    user turns, batched decode), +2 bytes per weight; auto = a bfloat16 copy from 16 rows on
    CPUs with AMX or AVX512-BF16 (prefill ~3x faster), a float16 one in fbgemm's layout
    from 4 rows on AVX2 CPUs (and for every call of the output projection); see
    `engine.weight_formats.dense_copy_for`."""
    cuda_graphs: bool = False
    """device cuda: batch-1 decode steps as CUDA graphs, one per 256-position span bucket
    (`engine.graph_decode`). Off until measured on a GPU: a graph of the model's step ran
    4-5x faster than eager on an H200, but this runner path is tested on CPU only."""
    threads: int = Field(0, ge=0)
    """CPU threads of the local engine's torch ops; 0 = one per core but one (at least
    one): ASR and TTS run beside it, and on 2 cores torch's second thread measured 2x
    slower decode in the running loop (20 vs 10.6 ms per token), not faster."""
    backend: Literal["local", "vllm"] = "local"
    """local: our paged engine in this process; vllm: vLLM servers at ``url``."""
    url: tuple[str, ...] = ()
    """vLLM replicas (``http://host:port``); a string may list several, comma-separated."""
    vllm_block_size: int = Field(32, gt=0)
    """The servers' ``--block-size`` (expected prefix-cache reuse in the logs)."""
    vllm_penalty: Literal["windowed", "vllm"] = "windowed"
    """windowed: the servers load our penalty (same replies as the local engine);
    vllm: vLLM's own repetition penalty (every id of the prompt and reply)."""

    @field_validator("url", mode="before")
    @classmethod
    def _split_urls(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(u for u in value.replace(",", " ").split() if u)
        return value

    @field_validator("url")
    @classmethod
    def _check_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            if not url.startswith("http://") or len(url) <= len("http://"):
                raise ValueError(f"{url!r}: expected http://HOST:PORT")
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate URLs in {list(value)}")
        return tuple(u.rstrip("/") for u in value)

    @model_validator(mode="after")
    def _url_for_vllm(self) -> EngineConfig:
        if self.backend == "vllm" and not self.url:
            raise ValueError("backend vllm needs engine.url (one or more http://HOST:PORT)")
        return self


class LlmConfig(_Section):
    system_prompt: str = (
        "You are a helpful, concise voice assistant. "
        "Answer in one or two short spoken sentences."
    )
    max_new_tokens: int = Field(96, gt=0)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    seed: int = 0
    stop: tuple[str, ...] = ()
    repetition_penalty: float = Field(1.1, gt=0.0)
    repetition_window: int = Field(64, ge=0)
    loop_min_repeats: int = Field(4, ge=0)
    loop_max_ngram: int = Field(8, gt=0)
    max_context_tokens: int = Field(0, ge=0)


class TurnsConfig(_Section):
    barge_in_min_ms: int = Field(200, ge=0)
    interrupted_marker: bool = False
    speculate: bool = True
    interruption: Literal["immediate", "tentative"] = "tentative"
    backchannels: list[str] = Field(default_factory=lambda: list(BACKCHANNELS))
    interrupt_words: list[str] = Field(default_factory=lambda: list(INTERRUPT_WORDS))
    """Words that ask for the floor ("stop", "wait", "no"): over the reply, trusted at a
    lower ASR word probability than others (``interrupt_word_min_p``)."""
    interrupt_word_min_p: float = Field(0.15, ge=0.0, le=1.0)
    max_backchannel_ms: int = Field(1200, gt=0)
    interim_every_ms: int = Field(200, ge=0)
    """Speech over the reply: its words are decoded at its pause and again after each
    this much more speech; short bursts, each under ``barge_in_min_ms``, once
    they add up to it (0: only the display partials decide)."""
    min_words_ms: int = Field(150, ge=0)
    """A burst over the reply this long, too short to pause it, has its words decoded
    when it ends (a crisp "Stop!" interrupts; a click has no words)."""
    pause_priority: bool = True
    """While a reply is paused by speech over it, a CPU engine's decode steps wait (at
    most 250 ms each), so the speech's words, which decide the cut, decode sooner. Not
    in the daemon, whose engine serves every session."""


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    token_file: str | None = None
    max_sessions: int = Field(8, gt=0)
    max_message_bytes: int = Field(1_048_576, gt=0)
    session_queue: int = Field(256, gt=0)
    audio_delta_ms: int = Field(100, ge=10, le=5000)
    audio_lead_ms: int = Field(300, ge=20, le=60_000)
    """Reply audio sent ahead of the client's playback: a tentative interruption's
    pause is heard this late at worst; more absorbs a slower network."""


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    json_format: bool = Field(False, alias="json")

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class AppConfig(_Section):
    models: ModelsConfig = ModelsConfig()
    audio: AudioConfig = AudioConfig()
    vad: VadConfig = VadConfig()
    asr: AsrConfig = AsrConfig()
    tts: TtsConfig = TtsConfig()
    echo: EchoConfig = EchoConfig()
    engine: EngineConfig = EngineConfig()
    llm: LlmConfig = LlmConfig()
    turns: TurnsConfig = TurnsConfig()
    server: ServerConfig = ServerConfig()
    logging: LoggingConfig = LoggingConfig()
    config_dir: Path | None = Field(default=None, exclude=True)
    """Directory of the config file that was read (for relative paths); not a YAML key."""

    def to_yaml_dict(self) -> dict[str, Any]:
        """The effective configuration as plain YAML-able data."""
        data = self.model_dump(mode="json", by_alias=True, exclude={"config_dir"})
        return data


def default_config_path(cwd: Path | None = None) -> Path | None:
    """``./config.yaml`` if present, else the project's own ``config.yaml`` if present."""
    here = (cwd or Path.cwd()) / "config.yaml"
    if here.is_file():
        return here
    project = Path(__file__).resolve().parents[2] / "config.yaml"
    return project if project.is_file() else None


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``section.key=value`` (value as YAML) from ``--set``."""
    key, sep, raw = text.partition("=")
    if not sep or "." not in key:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    return key.strip(), _parse_scalar(raw)


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    use_default_file: bool = True,
) -> AppConfig:
    """Load the effective configuration.

    `path` is the config file (None: `default_config_path()` when `use_default_file`).
    `env` is the environment to read ``ASSISTANT__SECTION__KEY`` variables from.
    `overrides` maps ``"section.key"`` to already-typed values from CLI flags.
    """
    data: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    file_path: Path | None = Path(path) if path is not None else None
    if file_path is None and use_default_file:
        file_path = default_config_path()
    if file_path is not None:
        _merge(data, origin, _read_file(file_path), str(file_path))
    for name, raw in sorted((env or {}).items()):
        if not name.startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX):].lower().split("__")
        if len(parts) != 2 or not all(parts):
            raise ConfigError(
                f"environment variable {name}: expected {ENV_PREFIX}SECTION__KEY"
            )
        _set(data, origin, parts[0], parts[1], _parse_scalar(raw), f"environment {name}")
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        _set(data, origin, section, key, value, "command line")
    try:
        cfg = AppConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origin, file_path)) from None
    if file_path is not None:
        cfg = cfg.model_copy(update={"config_dir": file_path.resolve().parent})
    return cfg


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror})") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    return loaded


def _merge(
    data: dict[str, dict[str, Any]],
    origin: dict[str, str],
    loaded: Mapping[str, Any],
    source: str,
) -> None:
    for section, values in loaded.items():
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: section '{section}' must be a mapping")
        for key, value in values.items():
            _set(data, origin, str(section), str(key), value, source)


def _set(
    data: dict[str, dict[str, Any]],
    origin: dict[str, str],
    section: str,
    key: str,
    value: Any,
    source: str,
) -> None:
    if isinstance(value, list):
        value = tuple(value)
    data.setdefault(section, {})[key] = value
    origin[f"{section}.{key}"] = source
    origin.setdefault(section, source)


def _parse_scalar(raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


_RETIRED = {
    "echo.reference_jitter_ms": "the speaker's audio is now placed by the stream's own "
                                 "sample count, which does not jitter",
}
"""Keys that earlier versions took, and why they went (named in the error)."""


def _describe(exc: ValidationError, origin: Mapping[str, str], path: Path | None) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        dotted = ".".join(loc[:2])
        where = origin.get(dotted) or origin.get(loc[0]) or (str(path) if path else "defaults")
        if err["type"] == "extra_forbidden" and dotted in _RETIRED:
            lines.append(f"{where}: '{dotted}' is no longer used ({_RETIRED[dotted]}); "
                         "remove it")
        elif err["type"] == "extra_forbidden":
            what = "unknown key" if len(loc) > 1 else "unknown section"
            lines.append(f"{where}: {what} '{dotted}'")
        else:
            lines.append(f"{where}: '{dotted}': {err['msg']} (got {err.get('input')!r})")
    return "; ".join(lines)
