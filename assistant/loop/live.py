"""Running a pipeline on a live (blocking) frame source until it is told to stop:
what ``assistant talk`` and the daemon's local audio loop (``serve --local-audio``) share."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any

from assistant.loop.source_thread import SourceThread
from assistant.loop.tasks import cancel_and_wait

if TYPE_CHECKING:
    from audio.chunk import AudioChunk

__all__ = ["converse", "threaded_frames"]

_log = logging.getLogger(__name__)


def threaded_frames(frames: Iterable[AudioChunk]) -> SourceThread[AudioChunk]:
    """Iterate a blocking (clock-paced) frame source on a thread; the caller owns it and
    must ``await aclose()`` it (which joins the thread) before the loop closes."""
    return SourceThread(frames)


async def converse(pipeline: Any, frames: AsyncIterator[Any], stop: asyncio.Event,
                   on_stop: Callable[[], None]) -> None:
    """Feed ``frames`` to ``pipeline`` until they end or ``stop`` is set, then shut down
    in order: ``on_stop`` (closes the microphone, which ends its frames), the feeder, the
    pipeline (its worker threads), then ``frames`` themselves (a :class:`SourceThread`
    joins its thread), so no thread is left posting to a loop about to close."""
    feeder = asyncio.create_task(pipeline.run(frames))
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait({feeder, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if feeder in done:
            feeder.result()  # raise a pipeline failure
    finally:
        on_stop()
        await cancel_and_wait(feeder, stopper, logger=_log, what="talk task")
        await pipeline.aclose()
        close = getattr(frames, "aclose", None)
        if close is not None:
            await close()
