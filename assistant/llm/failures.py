"""Failures stay with their owner: what the engine host does when work fails.

The host (:mod:`assistant.llm.host`) runs every conversation's commands and one backend
step for all of them, so one conversation's failure must not become everybody's:

- a session's own call that raises (collecting its outputs, taking a new budget) stops
  that session's generation and tells it (:func:`guard`);
- a step that fails in some jobs (`JobsFailed`) tells the sessions owning them, unless
  the jobs were their background work (a draft, a context recompute), simply dropped;
- a step out of KV memory (`OutOfPages`) makes speculative work yield first
  (:func:`shed_all`); with none, the conversation holding the most tokens loses its
  reply with a clear error and the others go on;
- a step that fails as a whole stops the generation of the sessions that had some in
  flight, and tells them.

Every function runs on the host thread, over the sessions whose state is built.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from assistant.llm.protocol import JobsFailed, OutOfPages
from assistant.llm.session import EngineFailed, Hosted, HostSession

__all__ = ["Built", "guard", "shed_all", "step_failed"]

Built = list[tuple[HostSession[Any], Hosted]]
"""The sessions whose state is built, with that state."""

_log = logging.getLogger(__name__)


def step_failed(host: str, built: Built, exc: Exception) -> None:
    """A backend step of host ``host`` raised ``exc``: stop and tell whom it concerns.
    Raises `RuntimeError` when out of KV memory with nothing generating (a bug)."""
    if isinstance(exc, OutOfPages):
        _relieve(host, built, exc)
    elif isinstance(exc, JobsFailed):
        _log.error("%s: %s", host, exc)
        for session, state in built:
            owned = [job for job in exc.jobs if state.owns(job)]
            if owned and not all([state.job_failed(job) for job in owned]):
                session.post(EngineFailed(session.name, exc.cause))
    else:
        _log.exception("%s: engine step failed", host)
        for session, state in built:
            if state.has_work():
                guard(session, state, state.abort)
                session.post(EngineFailed(session.name, exc))


def shed_all(host: str, built: Built, exc: BaseException) -> bool:
    """Every session drops its speculative drafts; True if any had one."""
    shed = [session.name for session, state in built if state.shed()]
    if shed:
        _log.info("%s: out of KV pages (%s); dropped the speculative drafts of %s",
                  host, exc, ", ".join(shed))
    return bool(shed)


def guard(session: HostSession[Any], state: Hosted, fn: Callable[[], None]) -> None:
    """Run ``fn`` for ``session``; if it raises, stop the session's generation and tell
    it (the host goes on)."""
    try:
        fn()
    except Exception as exc:
        _log.exception("%s: engine output failed", session.name)
        try:
            state.abort()
        except Exception:
            _log.exception("%s: abort failed", session.name)
        session.post(EngineFailed(session.name, exc))


def _relieve(host: str, built: Built, exc: OutOfPages) -> None:
    """No KV memory: speculative work yields first (every session sheds its drafts);
    if there was none, the conversation holding the most tokens loses its reply
    with a clear error and the others go on."""
    if shed_all(host, built, exc):
        return
    busy = [(state.tokens_held(), session, state) for session, state in built
            if state.has_work()]
    if not busy:
        raise RuntimeError(f"out of KV pages with no generation in flight: {exc}") from exc
    _held, session, state = max(busy, key=lambda b: b[0])
    _log.error("%s: out of KV pages; stopping the reply of %s (%d tokens held): %s",
               host, session.name, _held, exc)
    guard(session, state, state.abort)
    session.post(EngineFailed(session.name, exc))
