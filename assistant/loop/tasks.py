"""Stopping asyncio tasks without losing what went wrong.

``await asyncio.gather(*tasks, return_exceptions=True)`` after cancelling hides a task
that had already failed, and ``contextlib.suppress(asyncio.CancelledError)`` around an
await swallows the *caller's* own cancellation too. :func:`cancel_and_wait` cancels,
waits, logs every real failure, and re-raises if the caller itself is being cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(*tasks: asyncio.Future[Any], logger: logging.Logger,
                          what: str = "task",
                          expected: tuple[type[BaseException], ...] = ()
                          ) -> list[BaseException]:
    """Cancel ``tasks``, wait for all of them, log and return the failures (exceptions
    other than their cancellation; ``expected`` ones are returned but not logged)."""
    for task in tasks:
        task.cancel()
    failures: list[BaseException] = []
    for task in tasks:
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are being cancelled ourselves: never swallow that
        except expected as exc:
            failures.append(exc)
        except Exception as exc:
            name = task.get_name() if isinstance(task, asyncio.Task) else what
            logger.error("%s %s failed", what, name, exc_info=exc)
            failures.append(exc)
    return failures
