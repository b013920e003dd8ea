"""How a conversation uses its tools (the ``tools:`` section of config.yaml, as the
tools package takes it: the loop builds this from the typed config)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ToolOptions"]


@dataclass(frozen=True)
class ToolOptions:
    """Tools of a conversation and how their calls are run."""

    enabled: tuple[str, ...] = ()
    """``builtin:NAME`` or ``module:function`` references, in the order the model sees
    them; empty: no tools."""
    timeout_s: float = 5.0
    """A call running longer is given up on, in seconds (the model is told it timed out)."""
    filler_after_ms: int = 700
    """A call still running after this long, in ms, gets one short spoken filler."""
    filler_text: str = "One moment."
    """The filler ("": none)."""
    choice: str = "auto"
    """``auto``, ``none``, ``required`` or a tool's name (see the config's ``tools.choice``)."""
    speculative_ok: tuple[str, ...] = ("get_time", "calculator")
    """Tools that may run during a speculative draft, by name (read-only tools only)."""

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.filler_after_ms <= 0:
            raise ValueError(f"filler_after_ms must be > 0, got {self.filler_after_ms}")
