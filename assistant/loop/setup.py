"""Build the live loop from the config: load the models once, wire a pipeline per run.

``load_models(cfg)`` resolves and loads ASR, TTS and the LLM (seconds; do it once per
process and share the result). ``conversation_settings(cfg)`` maps the config sections
onto each component's own options, and ``open_conversation(models, cfg, clock=...,
sink=...)`` opens a :class:`~assistant.loop.conversation.Conversation` on them whose
source, sink and clock are injected, so ``replay``, ``talk`` and the daemon differ only
in what they plug in.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from assistant.app.config import AppConfig
from assistant.dialogue.loop_guard import LoopGuardOptions
from assistant.dialogue.types import DialogueOptions
from assistant.loop.conversation import Conversation, ConversationSettings
from assistant.loop.output import OutputCallback
from assistant.loop.tool_worker import LocalTools, LoopTime
from assistant.loop.types import EntryCallback, PipelineOptions
from assistant.speech.voice import ClauseRule
from assistant.turns.end_of_turn import EndOfTurnOptions
from assistant.turns.interruption import InterruptionOptions
from assistant.turns.options import TurnOptions

if TYPE_CHECKING:
    from assistant.llm.host import EngineHost
    from assistant.llm.protocol import LLMBackend
    from assistant.llm.vllm.connect import VLLMOptions
    from audio.asr import Transcriber
    from audio.clock import Clock
    from audio.echo import EchoOptions, EchoProcessor
    from audio.sinks import Sink
    from audio.smart_turn import SmartTurn
    from audio.sources import MicSource
    from audio.speaker_sink import SpeakerSink
    from audio.tts import Synthesizer
    from audio.vad import VadOptions
    from engine import ChatTemplate, Engine
    from engine.detokenize import TokenizerLike

__all__ = ["LiveAudio", "LoopModels", "load_models", "load_llm", "vllm_options",
           "conversation_settings", "open_conversation", "local_tools", "with_local_tools",
           "vad_options",
           "echo_options", "dialogue_options", "turn_options", "open_live_audio"]


@dataclass
class LoopModels:
    """The loaded models of the loop (shared by every pipeline of a process).

    ``host`` is the one engine thread that owns the LLM backend; every conversation of
    the process runs on it. :meth:`close` stops it (release the pipelines first).
    ``engine`` is None when the backend is remote (``engine.backend: vllm``)."""

    engine: Engine | None
    template: ChatTemplate
    transcriber: Transcriber
    synthesizer: Synthesizer
    host: EngineHost
    end_model: SmartTurn | None = None
    """The audio end-of-turn model (``vad.smart_turn``, semantic mode), if loaded."""

    def close(self) -> None:
        """Stop the engine thread (idempotent)."""
        self.host.close()


def load_models(cfg: AppConfig, *, progress: Callable[[str], None] | None = None,
                deterministic_tts: bool = False) -> LoopModels:
    """Resolve and load every model named by ``cfg`` (no network).

    ``deterministic_tts`` turns Piper's sampling noise off (the same text always gives
    the same samples and durations), which replay on a virtual clock needs to give the
    same events for the same input.
    """
    from assistant.app.models import resolve_asr, resolve_voice
    from assistant.llm.host import EngineHost
    from assistant.llm.step_gate import StepGate
    from audio.asr import ASROptions, Transcriber
    from audio.tts import Synthesizer, TTSOptions
    from engine import ChatTemplate

    say = progress or (lambda _msg: None)
    say("loading speech recognition")
    asr = cfg.asr
    transcriber = Transcriber(resolve_asr(cfg), ASROptions(
        device="cpu" if asr.device == "auto" else asr.device, compute_type=asr.compute_type,
        beam_size=asr.beam_size, language=asr.language, window_s=asr.window_s))
    say("loading voice")
    onnx, config_json = resolve_voice(cfg)
    noise = 0.0 if deterministic_tts else None
    synthesizer = Synthesizer(onnx, config_json, TTSOptions(
        length_scale=cfg.tts.length_scale, noise_scale=noise, noise_w_scale=noise))
    say("loading language model")
    backend, tokenizer, engine = load_llm(cfg, progress=progress)
    template = ChatTemplate(tokenizer)
    template.verify()
    # A local engine on the CPU shares its cores with Piper: its steps may yield to a
    # reply's first audio (`tts.first_clause_priority`).
    gate = StepGate() if engine is not None and cfg.engine.device == "cpu" else None
    end_model = None
    if end_of_turn_options(cfg).uses_audio:
        from assistant.app.models import resolve_smart_turn
        from audio.smart_turn import SmartTurn

        say("loading end-of-turn model")
        end_model = SmartTurn(resolve_smart_turn(cfg))
    return LoopModels(engine, template, transcriber, synthesizer, EngineHost(backend, gate=gate),
                      end_model)


def load_llm(cfg: AppConfig, *, progress: Callable[[str], None] | None = None
             ) -> tuple[LLMBackend, TokenizerLike, Engine | None]:
    """The configured LLM backend, its tokenizer, and the local engine (None on vLLM,
    whose servers must serve ``models.llm``: the local copy gives the tokenizer)."""
    from assistant.app.llm_convert import WEIGHTS_SUBDIR
    from assistant.app.models import cache_dir, resolve_llm
    from engine import Engine

    path = resolve_llm(cfg, progress=progress)
    e = cfg.engine
    if e.backend == "vllm":
        from assistant.llm.vllm.connect import connect

        remote = connect(vllm_options(cfg), path, progress=progress)
        return remote, remote.tokenizer, None
    from assistant.llm.local import LocalBackend
    from engine.cpu_features import cpu_features
    from engine.weight_formats import dense_copy_for, resolve_weight_format

    if e.device == "cpu":
        import torch

        torch.set_num_threads(engine_threads(e.threads))  # process-wide, at load

    copy = dense_copy_for(e.dense_prefill, e.device)
    weights = None if e.weights is None else resolve_weight_format(e.weights, e.device)
    if progress is not None and e.weights == "auto":
        where = (f"this CPU: {cpu_features().describe()}" if e.device == "cpu"
                 else f"this {e.device.upper()}")
        progress(f"{weights} weights (engine.weights: auto, on {where})")
    if progress is not None and weights in ("int8", "int4") and copy is not None:
        kind = "a bfloat16" if copy == "bf16" else "a float16 (fbgemm)"
        progress(f"{weights} weights with {kind} copy for prefill and batches "
                 f"(engine.dense_prefill: {e.dense_prefill})")
    engine = Engine.load(path, device=e.device, dtype=e.dtype, page_size=e.page_size,
                         num_pages=e.num_pages, max_batch=e.max_batch,
                         prefill_chunk=e.prefill_chunk, weights=weights,
                         dense_prefill=e.dense_prefill, cuda_graphs=e.cuda_graphs,
                         cache_dir=cache_dir(cfg) / WEIGHTS_SUBDIR)
    return LocalBackend(engine), engine.tokenizer, engine


def engine_threads(setting: int, cores: int | None = None) -> int:
    """The local engine's torch threads for ``engine.threads`` (0: every core of this
    machine's ``cores`` but one, at least one).

    Why not every core: the loop decodes beside faster-whisper (CTranslate2, its own
    OpenMP runtime) and Piper; a torch thread contending with them for the last core slows
    each decode step down (`bench/bench_loop.py`'s waterfall shows the step time)."""
    if setting > 0:
        return setting
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, cores - 1)


def vllm_options(cfg: AppConfig) -> VLLMOptions:
    from assistant.llm.vllm.connect import VLLMOptions

    e = cfg.engine
    return VLLMOptions(urls=e.url, block_size=e.vllm_block_size,
                       windowed_penalty=e.vllm_penalty == "windowed")


def vad_options(cfg: AppConfig) -> VadOptions:
    from audio.vad import VadOptions

    v = cfg.vad
    # The VAD's own limit is the longest silence any end-of-turn rule may wait; the
    # turn manager shortens it pause by pause (semantic end of turn).
    return VadOptions(backend=v.backend, aggressiveness=v.aggressiveness,
                      silero_threshold=v.silero_threshold, min_speech_ms=v.min_speech_ms,
                      prefix_padding_ms=v.prefix_padding_ms, short_pause_ms=v.short_pause_ms,
                      pause_onset_ms=v.pause_onset_ms, end_of_turn_ms=end_of_turn_options(cfg).longest_ms,
                      sample_rate=cfg.audio.sample_rate, frame_ms=cfg.audio.frame_ms)


def end_of_turn_options(cfg: AppConfig) -> EndOfTurnOptions:
    """The end-of-turn rule; semantic needs speculation (the score is read on its fork)."""
    v = cfg.vad
    mode = v.end_of_turn if cfg.turns.speculate else "fixed"
    return EndOfTurnOptions(mode=mode, fallback_ms=v.end_of_turn_ms,
                            min_silence_ms=v.semantic_min_ms, max_silence_ms=v.semantic_max_ms,
                            p_complete=v.semantic_p_complete,
                            p_incomplete=v.semantic_p_incomplete,
                            short_words=v.semantic_short_words,
                            p_complete_short=v.semantic_p_complete_short,
                            audio_wait_ms=v.smart_turn_wait_ms if v.smart_turn else 0,
                            audio_wait_short_ms=v.smart_turn_wait_short_ms,
                            audio_sure_ms=v.smart_turn_sure_ms,
                            audio_sure_p=v.smart_turn_sure_p)


def echo_options(cfg: AppConfig) -> EchoOptions:
    from audio.echo import EchoOptions

    return EchoOptions(mode=cfg.echo.mode, gate_margin_db=cfg.echo.gate_margin_db,
                       sample_rate=cfg.audio.sample_rate, aec_align=cfg.echo.aec_align,
                       gate_stands_down=cfg.echo.gate_stands_down,
                       stand_down_probe_ms=cfg.echo.stand_down_probe_ms)


@dataclass
class LiveAudio:
    """The live microphone and speaker on one device clock, with the echo processor
    (None when ``echo.mode`` is off) fed by exactly what the speaker plays."""

    clock: Clock
    echo: EchoProcessor | None
    sink: SpeakerSink
    mic: MicSource


def open_live_audio(cfg: AppConfig, models: LoopModels) -> LiveAudio:
    """Open the configured devices for the live loop (``talk``, ``serve --local-audio``).

    The echo processor gets the setting that only live devices need (``echo:``'s
    ``aec_lead_ms``; a virtual clock's times are exact). When
    the microphone cannot be opened, the speaker opened before it is closed again."""
    from dataclasses import replace

    from audio.clock import DeviceClock
    from audio.echo import EchoProcessor
    from audio.sources import MicSource
    from audio.speaker_sink import SpeakerSink

    clock = DeviceClock(cfg.audio.sample_rate)
    echo = None
    if cfg.echo.mode != "off":
        echo = EchoProcessor(replace(echo_options(cfg), aec_lead_ms=cfg.echo.aec_lead_ms))
    sink = SpeakerSink(clock, models.synthesizer.sample_rate, cfg.audio.output_device,
                       cfg.audio.output_buffer_ms,
                       tap=echo.push_reference if echo is not None else None)
    try:
        mic = MicSource(clock, cfg.audio.sample_rate, cfg.audio.frame_ms,
                        cfg.audio.input_device, cfg.audio.mic_queue_frames)
    except BaseException:
        sink.close()
        raise
    return LiveAudio(clock, echo, sink, mic)


def clause_rule(cfg: AppConfig) -> ClauseRule:
    return ClauseRule(min_chars=cfg.tts.min_clause_chars,
                      first_max_chars=cfg.tts.first_clause_max_chars)


def dialogue_options(cfg: AppConfig) -> DialogueOptions:
    llm = cfg.llm
    return DialogueOptions(system_prompt=llm.system_prompt, max_new_tokens=llm.max_new_tokens,
                           temperature=llm.temperature, top_p=llm.top_p, top_k=llm.top_k,
                           seed=llm.seed, stop=tuple(llm.stop),
                           repetition_penalty=llm.repetition_penalty,
                           repetition_window=llm.repetition_window,
                           clauses=clause_rule(cfg),
                           interrupted_marker=cfg.turns.interrupted_marker,
                           loop_guard=LoopGuardOptions(min_repeats=llm.loop_min_repeats,
                                                       max_ngram=llm.loop_max_ngram),
                           max_context_tokens=llm.max_context_tokens,
                           score_end_of_turn=end_of_turn_options(cfg).semantic)


def turn_options(cfg: AppConfig) -> TurnOptions:
    t = cfg.turns
    return TurnOptions(barge_in_min_ms=t.barge_in_min_ms, speculate=t.speculate,
                       pause_at_onset=t.pause_at_onset,
                       continue_within_ms=t.continue_within_ms,
                       end_of_turn=end_of_turn_options(cfg),
                       interruption=InterruptionOptions(
                           mode=t.interruption, backchannels=tuple(t.backchannels),
                           interrupt_words=tuple(t.interrupt_words),
                           interrupt_word_min_p=t.interrupt_word_min_p,
                           max_backchannel_ms=t.max_backchannel_ms,
                           interim_every_ms=t.interim_every_ms,
                           min_words_ms=t.min_words_ms))


def conversation_settings(cfg: AppConfig,
                          pipeline_options: PipelineOptions | None = None
                          ) -> ConversationSettings:
    """The config mapped onto each component's options (``pipeline_options``: the
    surface's own scheduling, e.g. a virtual clock; the config's priorities win)."""
    from audio.streaming_asr import StreamingASROptions

    opts = dataclasses.replace(pipeline_options or PipelineOptions(),
                               first_clause_priority=cfg.tts.first_clause_priority,
                               pause_priority=cfg.turns.pause_priority)
    tools = local_tools(cfg)
    dialogue = with_local_tools(dialogue_options(cfg), tools, cfg)
    return ConversationSettings(
        dialogue=dialogue, turns=turn_options(cfg), vad=vad_options(cfg),
        asr=StreamingASROptions(partial_interval_ms=cfg.asr.partial_interval_ms),
        clauses=clause_rule(cfg), pipeline=opts, tools=tools)


def with_local_tools(options: DialogueOptions, tools: LocalTools | None,
                     cfg: AppConfig) -> DialogueOptions:
    """``options`` showing the model ``tools`` (from :func:`local_tools`) under the
    configured ``tools.choice``."""
    if tools is None:
        return options
    return dataclasses.replace(options, tools=tuple(tools.registry.specs_for_template()),
                               tool_choice=cfg.tools.choice)


def local_tools(cfg: AppConfig) -> LocalTools | None:
    """A new conversation's tools (``tools.enabled``; None: none), each conversation
    with its own timers."""
    from assistant.tools.loading import build_registry
    from assistant.tools.options import ToolOptions
    from assistant.tools.timers import TimerService

    t = cfg.tools
    if not t.enabled:
        return None
    time = LoopTime()
    timers = TimerService(time)
    registry = build_registry(t.enabled, speculative_ok=t.speculative_ok, timers=timers)
    if t.choice not in ("auto", "none", "required", *registry.names):
        from assistant.app.errors import ConfigError

        raise ConfigError(f"tools.choice: {t.choice!r} is not auto, none, required or an "
                          f"enabled tool ({', '.join(registry.names)})")
    return LocalTools(registry, ToolOptions(**t.model_dump()), timers, time)


def open_conversation(models: LoopModels, cfg: AppConfig, *, clock: Clock, sink: Sink,
                      echo: EchoProcessor | None,
                      pipeline_options: PipelineOptions | None = None,
                      on_entry: EntryCallback | None = None,
                      on_output: OutputCallback | None = None) -> Conversation:
    """A fresh conversation over ``models`` with the config's settings (call inside a
    running loop); see :meth:`Conversation.open`."""
    return Conversation.open(models, conversation_settings(cfg, pipeline_options),
                             clock=clock, sink=sink, echo=echo, on_entry=on_entry,
                             on_output=on_output)
