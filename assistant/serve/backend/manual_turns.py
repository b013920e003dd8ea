"""User turns the client commits itself (``turn_detection: null``).

Without server VAD the client decides what a turn is: it appends audio, commits it
(``input_audio_buffer.commit``: we transcribe it off the event loop) or adds user text
items, then asks for a response. :class:`ManualTurns` collects those pieces in order and
hands the joined text to ``response.create``. Every transcription task is owned here:
a failure reaches the caller of :meth:`take_text`, and :meth:`cancel` stops them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from assistant.turns.turn_manager import join_text

__all__ = ["ManualTurns"]


class ManualTurns:
    """See the module docstring. ``transcribe`` is a blocking call (run on a thread)."""

    def __init__(self, transcribe: Callable[[npt.NDArray[np.float32]], str]) -> None:
        self._transcribe = transcribe
        self._parts: list[asyncio.Task[str] | str] = []

    @property
    def pending(self) -> bool:
        """Something was committed or added since the last :meth:`take_text`."""
        return bool(self._parts)

    def add_text(self, text: str) -> None:
        self._parts.append(text)

    def commit(self, pcm: npt.NDArray[np.float32]) -> asyncio.Task[str]:
        """Transcribe ``pcm`` in the background; its text joins the turn in order."""
        task = asyncio.get_running_loop().create_task(
            asyncio.to_thread(self._transcribe, pcm), name="manual-turn-transcription")
        self._parts.append(task)
        return task

    async def take_text(self) -> str:
        """The turn so far, joined (waits for its transcriptions; raises if one failed)."""
        parts, self._parts = self._parts, []
        text = ""
        try:
            for part in parts:
                text = join_text(text, part if isinstance(part, str) else await part)
        except BaseException:
            for part in parts:
                if isinstance(part, asyncio.Task):
                    part.cancel()
            raise
        return text

    async def cancel(self) -> None:
        """Stop every transcription in progress and forget the turn."""
        tasks = [p for p in self._parts if isinstance(p, asyncio.Task)]
        self._parts = []
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise  # our own caller was cancelled, not the task
            except Exception:
                pass  # the turn is abandoned: its transcription no longer matters
