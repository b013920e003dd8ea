"""The typed configuration schema: one frozen section model per ``config.yaml`` section.

The tools section, with its name rules, is `assistant.app.config_tools`; the sections'
shared base is `assistant.app.config_section`. Each field's docstring is its description
(pydantic's ``use_attribute_docstrings``): the configuration reference,
docs/configuration.md, is written from this module (`assistant.app.config_reference`).
Reading a file, the environment and ``--set`` into these models is `assistant.app.config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from assistant.app.config_section import Section
from assistant.app.config_tools import ToolsConfig
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
    "ToolsConfig",
    "TtsConfig",
    "TurnsConfig",
    "VadConfig",
]


class ModelsConfig(Section):
    """Which models to load. ``default`` is the model shipped in its PyPI package (never
    downloaded); anything else is a local path."""

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


class AudioConfig(Section):
    """Microphone and speaker (``assistant talk``), and the internal audio format."""

    sample_rate: int = Field(16000, gt=0)
    """Internal rate in Hz for VAD and ASR."""
    frame_ms: Literal[10, 20, 30] = 20
    """VAD and microphone frame, in ms."""
    input_device: str | int | None = None
    """Microphone: a sounddevice name or index; None = the system default."""
    output_device: str | int | None = None
    """Speaker: a sounddevice name or index; None = the system default."""
    output_buffer_ms: int = Field(20, gt=0)
    """Speaker buffer: a barge-in stops playback within one buffer."""
    mic_queue_frames: int = Field(500, gt=0)
    """Bounded microphone queue, in frames; an overflow is counted, never blocks."""


class VadConfig(Section):
    """Voice activity detection and the end of the user's turn."""

    backend: Literal["webrtc", "silero"] = "webrtc"
    """Voice activity detector: WebRTC's, or Silero's ONNX model (from faster-whisper)."""
    aggressiveness: int = Field(2, ge=0, le=3)
    """WebRTC VAD mode, 0 (least) to 3 (most aggressive filtering of non-speech)."""
    silero_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    """Silero: speech probability at or above which a frame is speech."""
    min_speech_ms: int = Field(120, gt=0)
    """Speech must last this long to start a turn."""
    prefix_padding_ms: int = Field(300, ge=0)
    """Audio kept before the detected onset (the ASR hears the start of the word)."""
    short_pause_ms: int = Field(200, gt=0)
    """Silence inside a turn that counts as a pause: the transcript so far is speculated on."""
    pause_onset_ms: int = Field(100, ge=0)
    """Silence after which a pause's transcript starts decoding (0: at the short pause)."""
    end_of_turn_ms: int = Field(550, gt=0)
    """Silence that ends the user's turn under the fixed rule, and the semantic rule's fallback."""
    end_of_turn: Literal["fixed", "semantic"] = "semantic"
    """fixed: `end_of_turn_ms` of silence ends the turn; semantic: our LLM's P(the sentence ends here) at a pause sets the silence, between `semantic_min_ms` and `semantic_max_ms`."""
    semantic_min_ms: int = Field(250, gt=0)
    """Semantic: the silence when the model is sure the user is done."""
    semantic_max_ms: int = Field(1600, gt=0)
    """Semantic: the silence when the model is sure the user is mid-sentence (log-linear between)."""
    semantic_p_complete: float = Field(0.1, gt=0.0, lt=1.0)
    """Semantic: P at or above which `semantic_min_ms` applies."""
    semantic_p_incomplete: float = Field(0.003, gt=0.0, lt=1.0)
    """Semantic: P at or below which `semantic_max_ms` applies."""
    semantic_short_words: int = Field(3, ge=0)
    """Semantic: a transcript of at most this many words is a short request, held to
    `semantic_p_complete_short` (0: none is)."""
    semantic_p_complete_short: float = Field(0.03, gt=0.0, lt=1.0)
    """Semantic: `semantic_p_complete` for a short request (the model is least sure that
    a short request is complete: "Thanks", "Five, five")."""
    smart_turn: bool = True
    """Semantic mode: also ask the audio model (models.smart_turn) at each pause; the pause
    waits for its answer (at most `end_of_turn_ms`) before a text score ends the turn."""
    smart_turn_wait_ms: int = Field(1000, gt=0)
    """Semantic mode: the least silence that ends a turn the audio model calls unfinished."""
    smart_turn_wait_short_ms: int = Field(600, ge=0)
    """Semantic mode: that least silence for a short request (`semantic_short_words`)
    scored complete (at or above `semantic_p_complete_short`): "Yes, please" heard as
    unfinished. Longer than the pause inside "Five, five". 0: `smart_turn_wait_ms`."""
    smart_turn_sure_ms: int = Field(800, ge=0)
    """Semantic mode: the most silence that ends a turn the audio model is sure is
    complete (P >= `smart_turn_sure_p`) when the text score is over
    `semantic_p_incomplete` and does not trail off: a request Whisper misheard ("Name a
    Beginimal") is scored by what it heard. 0: no cap."""
    smart_turn_sure_p: float = Field(0.9, ge=0.5, lt=1.0)
    """Semantic mode: the audio model's P(complete) from which `smart_turn_sure_ms` applies."""


class AsrConfig(Section):
    """Speech recognition (faster-whisper)."""

    device: Literal["cpu", "cuda", "auto"] = "cpu"
    """Where faster-whisper runs."""
    compute_type: str = "int8"
    """CTranslate2 compute type (int8, float16, float32, ...)."""
    beam_size: int = Field(1, ge=1)
    """Whisper beam size (1: greedy, the fastest)."""
    language: str | None = "en"
    """Language code; None = detect (a multilingual model only)."""
    partial_interval_ms: int = Field(500, gt=0)
    """The open utterance is decoded again this often (partial transcripts)."""
    window_s: float = Field(10.0, ge=0.0, le=30.0)
    """Whisper encoder window for live speech (0 = the stock 30 s; see audio.whisper_window)."""


class TtsConfig(Section):
    """Speech synthesis (Piper)."""

    length_scale: float = Field(1.0, gt=0.0)
    """Piper's speaking rate: > 1 slower, < 1 faster."""
    min_clause_chars: int = Field(12, ge=0)
    """Reply text is synthesised by clause; shorter fragments wait for more text."""
    first_clause_max_chars: int = Field(16, gt=0)
    """A reply's first clause is cut at a space past this length: its synthesis is the
    first audio (shorter: sooner; longer: whole-phrase prosody)."""
    first_clause_priority: bool = True
    """On a CPU engine, the LLM's decode steps wait (at most 250 ms) while a reply's first
    clause is synthesised: the first audio waits for that synthesis, which the decode
    would otherwise slow down by sharing the cores."""


class EchoConfig(Section):
    """Keeping the assistant from interrupting itself when the speaker reaches the mic."""

    mode: Literal["off", "gate", "aec"] = "gate"
    """How the assistant keeps from hearing itself: off; gate (half duplex: mic speech during playback must be `gate_margin_db` louder than the reply); aec (WebRTC's AEC3, `pip install .[aec]`)."""
    gate_margin_db: float = 10.0
    """`gate`: how much louder than the far end mic speech must be during playback."""
    aec_lead_ms: int = Field(20, ge=0, le=200)
    """Live audio, ``aec``: the canceller gets the speaker's audio this much before it is
    reported heard (the echo must come after its reference)."""
    aec_align: bool = True
    """``aec``: measure where the echo really is in the mic and move the speaker's audio
    there when the reported times put it where AEC3 cannot cancel it (half duplex until
    it is found)."""
    gate_stands_down: bool = True
    """``gate``: listen for the echo, and gate nothing once playback brings none into the
    mic (headphones: decided a few hundred ms into the first reply, ~1.5 s if someone
    talks over its start); gate again, for the session, from the first echo heard."""
    stand_down_probe_ms: int = Field(150, ge=0)
    """``gate_stands_down``: the reply's speech, heard back with no loud mic frame, that
    decides "no echo" early (0: only after ~1.5 s of playback)."""

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `off` as the boolean false.
        return "off" if value is False else value


class EngineConfig(Section):
    """The LLM engine: our paged, prefix-sharing engine in this process, or vLLM servers."""

    device: Literal["cpu", "cuda"] = "cpu"
    """Where the local engine runs."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Compute dtype when `weights` is None (the formats set their own)."""
    page_size: int = Field(16, gt=0)
    """Tokens per KV-cache page."""
    num_pages: int = Field(2048, gt=0)
    """KV-cache pages (shared by every conversation of the process)."""
    max_batch: int = Field(8, gt=0)
    """Sequences decoded together in one step at most."""
    prefill_chunk: int = Field(512, gt=0)
    """Prompt tokens per prefill chunk, interleaved with decode steps."""
    weights: Literal["auto", "fp32", "bf16", "int8", "int4"] | None = "auto"
    """Weight format of the local engine's linears; None = dense in `dtype`. auto: bf16 on
    CPUs running torch's AVX2 kernels, int4 elsewhere (`engine.weight_formats.
    auto_weight_format`). bf16, int8 and int4 (groups of 32, llama.cpp's Q4_1 layout)
    compute in bfloat16 whatever `dtype` says."""
    dense_prefill: Literal["auto", "always", "never"] = "auto"
    """int8/int4: also keep a 16-bit copy of each weight for calls of many rows (prefill,
    user turns, batched decode), +2 bytes per weight; auto = a bfloat16 copy from 16 rows on
    CPUs with AMX or AVX512-BF16 (whose prefill it speeds up), a float16 one in fbgemm's layout
    from 4 rows on AVX2 CPUs (and for every call of the output projection); see
    `engine.weight_formats.dense_copy_for`."""
    cuda_graphs: bool = False
    """device cuda: batch-1 decode steps as CUDA graphs, one per 256-position span bucket
    (`engine.graph_decode`). Off until this runner path is measured on a GPU (it is
    tested on CPU only)."""
    threads: int = Field(0, ge=0)
    """CPU threads of the local engine's torch ops; 0 = one per core but one (at least
    one): ASR and TTS run beside it, and a thread contending with them for a core slows
    the decode down rather than speeding it up."""
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


class LlmConfig(Section):
    """What the assistant says: the system prompt and sampling."""

    system_prompt: str = (
        "You are a helpful, concise voice assistant. "
        "Answer in one or two short spoken sentences."
    )
    """The system prompt of every conversation."""
    max_new_tokens: int = Field(96, gt=0)
    """Longest reply, in tokens."""
    temperature: float = Field(0.0, ge=0.0)
    """Sampling temperature; 0 = greedy."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling: keep the most likely tokens up to this probability mass (1: off)."""
    top_k: int = Field(0, ge=0)
    """Keep the k most likely tokens (0: off)."""
    seed: int = 0
    """Sampling seed (replies are reproducible for the same conversation)."""
    stop: tuple[str, ...] = ()
    """Extra stop strings (the chat template's end of turn always stops)."""
    repetition_penalty: float = Field(1.1, gt=0.0)
    """Penalty on token ids among the context's last `repetition_window` (llama.cpp's repeat_penalty; 1.0: off)."""
    repetition_window: int = Field(64, ge=0)
    """How many of the context's last token ids the penalty looks at (llama.cpp's repeat_last_n)."""
    loop_min_repeats: int = Field(4, ge=0)
    """Stop a reply that repeats one n-gram this many times in a row (0: off)."""
    loop_max_ngram: int = Field(8, gt=0)
    """Longest repeated n-gram, in tokens, the loop guard looks for."""
    max_context_tokens: int = Field(0, ge=0)
    """Keep the context under this many tokens (0: the model's own limit); the oldest exchanges leave it, the kept window recomputed in the background."""


class TurnsConfig(Section):
    """Turn-taking: barge-in, speculation, tentative interruptions."""

    barge_in_min_ms: int = Field(200, ge=0)
    """Voiced user speech during playback must last this long to interrupt."""
    continue_within_ms: int = Field(500, ge=0)
    """Speech over the reply that began within this long of its first audio goes on with
    the user's turn (the end of turn came in their pause: "Yes, [pause] please"): the
    reply is withdrawn and the words join the user's (0: a barge-in like any other)."""
    interrupted_marker: bool = False
    """Append a short marker to an interrupted assistant turn in the history."""
    speculate: bool = True
    """Draft the reply on a forked sequence at the user's pauses, before the turn ends."""
    interruption: Literal["immediate", "tentative"] = "tentative"
    """immediate: speech over the reply cuts it for good; tentative: it pauses the reply, which plays on from the interrupted word after a backchannel ("mm-hmm", "right") or a cough."""
    backchannels: list[str] = Field(default_factory=lambda: list(BACKCHANNELS))
    """Phrases that do not take the floor (tentative interruptions); the default list is `assistant/turns/interruption.py`'s."""
    interrupt_words: list[str] = Field(default_factory=lambda: list(INTERRUPT_WORDS))
    """Words that ask for the floor ("stop", "wait", "no"): over the reply, trusted at a
    lower ASR word probability than others (``interrupt_word_min_p``)."""
    interrupt_word_min_p: float = Field(0.15, ge=0.0, le=1.0)
    """ASR word probability from which an interrupt word counts over the reply (other words: 0.3)."""
    max_backchannel_ms: int = Field(1200, gt=0)
    """Speech over the reply this long is an interruption, whatever it says."""
    interim_every_ms: int = Field(200, ge=0)
    """Speech over the reply: its words are decoded at its pause and again after each
    this much more speech; short bursts, each under ``barge_in_min_ms``, once
    they add up to it (0: only the display partials decide)."""
    min_words_ms: int = Field(150, ge=0)
    """A burst over the reply this long, too short to pause it, has its words decoded
    when it ends (a crisp "Stop!" interrupts; a click has no words)."""
    pause_at_onset: bool = True
    """Tentative interruptions: speech over the reply that cannot be its echo (the echo
    gate stood down) pauses it at its onset, not after ``barge_in_min_ms``; what cuts is
    decided as ever."""
    pause_priority: bool = True
    """While a reply is paused by speech over it, a CPU engine's decode steps wait (at
    most 250 ms each), so the speech's words, which decide the cut, decode sooner. Not
    in the daemon, whose engine serves every session."""


class ServerConfig(Section):
    """``assistant serve``: the Realtime-compatible WebSocket daemon."""

    host: str = "127.0.0.1"
    """Address to listen on (loopback by default; off loopback a token is mandatory)."""
    port: int = Field(8765, ge=0, le=65535)
    """TCP port (0: any free port)."""
    token_file: str | None = None
    """File holding the bearer token clients must send; None = no token (loopback only)."""
    max_sessions: int = Field(8, gt=0)
    """Concurrent sessions; more are refused with a clear error."""
    max_message_bytes: int = Field(1_048_576, gt=0)
    """Largest WebSocket message accepted."""
    session_queue: int = Field(256, gt=0)
    """Server events queued per session before a client that stopped reading is disconnected."""
    audio_delta_ms: int = Field(100, ge=10, le=5000)
    """Audio per `response.output_audio.delta`, in ms: small pieces play at once."""
    audio_lead_ms: int = Field(300, ge=20, le=60_000)
    """Reply audio sent ahead of the client's playback: a tentative interruption's
    pause is heard this late at worst; more absorbs a slower network."""
    batch_asr: bool = True
    """Sessions' Whisper decodes share CTranslate2 calls (`audio.asr_batch`): decodes made
    at the same time run as one batch, each with the result it would get alone."""
    listening_partials: bool = False
    """Re-decode a session's speech every `asr.partial_interval_ms` while the user has the
    floor, as `talk` does to show it (the daemon sends no partial transcripts). Off:
    only speech over a reply is, to tell an interruption from a backchannel; the user's
    turn is decoded at its pauses and its end, which leaves the cores to other sessions'
    turns (`bench/bench_serve.py`)."""


class LoggingConfig(Section):
    """Logs (stderr)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log level."""
    json_format: bool = Field(False, alias="json")
    """One JSON object per log line (key `json` in the file)."""

    # Section's settings (pydantic merges a subclass's model_config into its base's), and
    # the field's name as well as its alias.
    model_config = ConfigDict(populate_by_name=True)


class AppConfig(Section):
    models: ModelsConfig = ModelsConfig()
    audio: AudioConfig = AudioConfig()
    vad: VadConfig = VadConfig()
    asr: AsrConfig = AsrConfig()
    tts: TtsConfig = TtsConfig()
    echo: EchoConfig = EchoConfig()
    engine: EngineConfig = EngineConfig()
    llm: LlmConfig = LlmConfig()
    turns: TurnsConfig = TurnsConfig()
    tools: ToolsConfig = ToolsConfig()
    server: ServerConfig = ServerConfig()
    logging: LoggingConfig = LoggingConfig()
    config_dir: Path | None = Field(default=None, exclude=True)
    """Directory of the config file that was read (for relative paths); not a YAML key."""

    def to_yaml_dict(self) -> dict[str, Any]:
        """The effective configuration as plain YAML-able data."""
        data = self.model_dump(mode="json", by_alias=True, exclude={"config_dir"})
        return data
