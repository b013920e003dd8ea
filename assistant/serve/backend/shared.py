"""What every session's backend reads from the daemon's shared runtime.

:class:`~assistant.serve.runtime.ServeRuntime` (one per process: the loaded models, the
engine thread, the config mapped onto a conversation's settings) satisfies this
protocol; :class:`~assistant.serve.backend.pipeline_backend.PipelineBackend` only sees
it through here, so the backend never imports the runtime that builds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from assistant.app.config import AppConfig
    from assistant.loop.conversation import ConversationSettings
    from assistant.loop.setup import LoopModels

__all__ = ["SharedRuntime"]


class SharedRuntime(Protocol):
    """The models and per-component options every session of a daemon shares."""

    cfg: AppConfig
    models: LoopModels
    settings: ConversationSettings
    """Every conversation's configured settings (a session maps its own on top)."""
    session_queue: int
    audio_delta_ms: int
    """Longest ``response.output_audio.delta`` (ms of audio)."""
    audio_lead_ms: int
    """The most reply audio sent ahead of the client's playback (ms)."""
