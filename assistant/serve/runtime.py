"""What one daemon process shares between its sessions: models and the engine thread.

`build_runtime(cfg)` loads ASR, TTS and the LLM once (the same loader as ``talk`` and
``replay``), and maps the config onto each component's options. Every session's
`PipelineBackend` then runs on these: one engine thread (:class:`EngineHost`: each
session's dialogue lives on it, decode steps are batched across sessions, the system
prompt's KV pages are shared by all of them), one Whisper model, one Piper voice. The
sessions' Whisper decodes made at the same time share batched CTranslate2 calls
(``server.batch_asr``, :mod:`audio.asr_batch`); without it they take turns on the
model's lock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from assistant.serve.backend.contract import SessionBackend, SessionSettings, TurnDetectionSettings
from assistant.serve.protocol.settings import ServedModels

if TYPE_CHECKING:
    from assistant.app.config import AppConfig
    from assistant.loop.conversation import ConversationSettings
    from assistant.loop.setup import LoopModels
    from audio.asr import Transcriber
    from audio.asr_batch import BatchingTranscriber

__all__ = ["ServeRuntime", "build_runtime", "runtime_from_models"]

log = logging.getLogger("assistant.serve")


@dataclass
class ServeRuntime:
    cfg: AppConfig
    models: LoopModels
    settings: ConversationSettings
    """Every conversation's configured settings (a session maps its own on top)."""
    session_queue: int
    served: ServedModels
    defaults: SessionSettings
    audio_delta_ms: int = 100
    """Longest ``response.output_audio.delta`` (ms of audio)."""
    audio_lead_ms: int = 300
    """The most reply audio sent ahead of the client's playback (ms): a pause of the
    reply (a tentative interruption) is heard this late at worst."""
    asr_batcher: BatchingTranscriber | None = None
    """The sessions' shared ASR batcher, when this runtime made it (closed with it)."""

    def backend_factory(self, settings: SessionSettings) -> SessionBackend:
        from assistant.serve.backend.pipeline_backend import PipelineBackend

        return PipelineBackend(self, settings)

    def engine_stats(self, timeout_s: float = 30.0) -> dict[str, int]:
        """Exact counters, read on the engine thread (blocks: call off the event loop)."""
        return _gauges(self.models.host.call(lambda b: b.stats()).result(timeout_s))

    def engine_gauges(self) -> Mapping[str, int | Mapping[str, int]]:
        """For ``/metrics``: the engine thread's latest snapshot, with what each session
        holds (sequences nobody holds are a leak); never waits."""
        host = self.models.host
        stats = host.stats()
        if stats is None:
            return _replica_gauges(host.backend)
        owners = host.owners()
        owned = sum(o.sequences for o in owners)
        gauges: dict[str, int | Mapping[str, int]] = dict(_gauges(stats))
        gauges["sequences_unowned"] = max(0, stats.sequences - owned)
        gauges["session_sequences"] = {o.session: o.sequences for o in owners}
        gauges["session_tokens"] = {o.session: o.tokens for o in owners}
        gauges.update(_replica_gauges(host.backend))
        return gauges

    def check_engine(self, timeout_s: float = 30.0) -> None:
        """Run the backend's invariant check on the engine thread (tests, benchmarks)."""
        self.models.host.call(lambda b: b.check()).result(timeout_s)

    def close(self) -> None:
        """Stop the engine thread and the ASR batcher (after every session was closed)."""
        try:
            self.models.close()
        finally:
            if self.asr_batcher is not None:
                self.asr_batcher.close()

    async def run_local_audio(self, stop: asyncio.Event) -> None:
        """The local microphone/speaker loop (as ``assistant talk``), headless, on the
        shared engine, until ``stop`` is set."""
        from assistant.loop.conversation import Conversation
        from assistant.loop.live import converse, threaded_frames
        from assistant.loop.setup import open_live_audio

        models = self.models
        live = open_live_audio(self.cfg, models)
        clock, echo, sink, mic = live.clock, live.echo, live.sink, live.mic

        def on_output(event: Any) -> None:
            log.info("local audio: %s", type(event).__name__)

        conversation = Conversation.open(models, self.settings, clock=clock, sink=sink,
                                         echo=echo, on_output=on_output, name="local-audio")
        log.info("local audio loop started")
        try:
            await converse(conversation, threaded_frames(iter(mic)), stop, mic.close)
        finally:
            try:
                sink.close()
            except Exception:
                log.exception("closing the local speaker failed")
            log.info("local audio loop stopped")


def runtime_from_models(cfg: AppConfig, models: LoopModels) -> ServeRuntime:
    """A runtime over already loaded models (tests and benchmarks share one load)."""
    from assistant.loop.setup import conversation_settings

    voice = Path(str(getattr(models.synthesizer, "model_path", "voice"))).name
    voice = voice.removesuffix(".onnx") or "default"
    llm = cfg.models.llm if cfg.models.llm != "default" else "SmolLM2-135M-Instruct"
    asr = cfg.models.asr if cfg.models.asr != "default" else "whisper-tiny.en"
    served = ServedModels(
        model=Path(llm).name, transcription_model=Path(asr).name, default_voice=voice,
        voices=frozenset({voice}),
    )
    defaults = SessionSettings(
        instructions=cfg.llm.system_prompt,
        voice=voice,
        # The Realtime API's server-VAD defaults; semantic_vad when the config asks for
        # the semantic end of turn (a client may pick either).
        turn_detection=TurnDetectionSettings(type="semantic_vad", eagerness="auto")
        if cfg.vad.end_of_turn == "semantic" and cfg.turns.speculate else TurnDetectionSettings(),
        max_output_tokens=cfg.llm.max_new_tokens,
    )
    settings = conversation_settings(cfg)
    batcher = _asr_batcher(cfg, models)
    if batcher is not None:
        # `Transcriber`'s interface, which is all a conversation calls.
        models = dataclasses.replace(models, transcriber=cast("Transcriber", batcher))
    return ServeRuntime(
        cfg=cfg, models=models, asr_batcher=batcher,
        # One engine serves every session: a pause in one must not hold the others'
        # steps (`PipelineOptions.pause_priority`), nor one's display partials their turns.
        settings=dataclasses.replace(settings, pipeline=dataclasses.replace(
            settings.pipeline, pause_priority=False,
            listening_partials=cfg.server.listening_partials)),
        session_queue=cfg.server.session_queue,
        served=served, defaults=defaults, audio_delta_ms=cfg.server.audio_delta_ms,
        audio_lead_ms=cfg.server.audio_lead_ms,
    )


def _asr_batcher(cfg: AppConfig, models: LoopModels) -> BatchingTranscriber | None:
    """A batcher over the loaded Whisper model for the sessions to share (``server.batch_asr``);
    None when off, or when the transcriber is not a loaded model (a fake, or a batcher
    another runtime made and closes)."""
    from audio.asr import Transcriber
    from audio.asr_batch import BatchingTranscriber

    if not cfg.server.batch_asr or type(models.transcriber) is not Transcriber:
        return None
    # The encoder's batch pays on an accelerator; on a CPU its matrices are already large.
    return BatchingTranscriber(models.transcriber,
                               batch_encode=models.transcriber.options.device != "cpu")


def build_runtime(cfg: AppConfig, progress: Callable[[str], None] | None = None,
                  freeze_heap: bool = True) -> ServeRuntime:
    """Load every model named by ``cfg`` (seconds) and wrap them for serving; then
    freeze the heap (:func:`assistant.app.heap.freeze_loaded`) unless told not to."""
    from assistant.app.heap import freeze_loaded
    from assistant.loop.setup import load_models

    runtime = runtime_from_models(cfg, load_models(cfg, progress=progress))
    if freeze_heap:
        freeze_loaded()  # full garbage collections walked the models: 200+ ms event-loop stalls
    return runtime


def _replica_gauges(backend: Any) -> dict[str, int | Mapping[str, int]]:
    """Per-replica health of a vLLM backend (none for the local engine)."""
    from assistant.llm.vllm.backend import VLLMBackend

    if not isinstance(backend, VLLMBackend):
        return {}
    health = backend.health()
    return {"replica_up": {h.url: int(h.up) for h in health},
            "replica_requests": {h.url: h.requests for h in health},
            "replica_failures": {h.url: h.failures for h in health},
            "replica_failovers": {h.url: h.failovers for h in health}}


def _gauges(stats: Any) -> dict[str, int]:
    return {
        "pages_total": stats.pages_total,
        "pages_used": stats.pages_used,
        "pages_free": stats.pages_free,
        "pages_cached": stats.pages_cached,
        "pages_shared": stats.pages_shared,
        "sequences": stats.sequences,
        "tokens_computed": stats.tokens_computed,
        "tokens_reused": stats.tokens_reused,
        "tokens_decoded": stats.tokens_decoded,
    }
