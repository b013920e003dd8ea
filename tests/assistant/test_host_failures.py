"""The engine host's failure rules (assistant/llm/failures.py) on plain session states:
who is stopped and told when a step fails, and that the others are not."""

from __future__ import annotations

from typing import Any

import pytest

from assistant.llm.failures import Built, guard, step_failed
from assistant.llm.protocol import JobsFailed, LLMJob, OutOfPages
from assistant.llm.session import Command, EngineFailed, HostSession


class _NoHost:
    def submit_command(self, command: Command, priority: str) -> bool:
        return False

    def idle_future(self, session: HostSession[Any]) -> Any:
        raise AssertionError("not used")

    def close_session(self, session: HostSession[Any]) -> Any:
        raise AssertionError("not used")


class _State:
    """A conversation's state as the host sees it."""

    def __init__(self, *, tokens: int = 0, working: bool = False, drafts: bool = False,
                 jobs: tuple[object, ...] = (), background: bool = False) -> None:
        self.tokens, self.working, self.drafts = tokens, working, drafts
        self.jobs, self.background = jobs, background
        self.aborted = self.shed_called = False

    def has_work(self) -> bool:
        return self.working

    def collect(self) -> list[Any]:
        return []

    def owns(self, job: LLMJob) -> bool:
        return job in self.jobs

    def job_failed(self, job: LLMJob) -> bool:
        return self.background

    def abort(self) -> None:
        self.aborted, self.working = True, False

    def shed(self) -> bool:
        self.shed_called = True
        had, self.drafts = self.drafts, False
        return had

    def tokens_held(self) -> int:
        return self.tokens

    def sequences_held(self) -> int:
        return 1

    def set_token_budget(self, tokens: int | None) -> None:
        pass

    def close(self) -> None:
        pass


def _sessions(*states: _State) -> tuple[Built, list[list[Any]]]:
    posted: list[list[Any]] = [[] for _ in states]
    built: Built = []
    for i, state in enumerate(states):
        session: HostSession[Any] = HostSession(_NoHost(), posted[i].append, f"s{i}")
        session.state = state
        built.append((session, state))
    return built, posted


def _failures(posted: list[Any]) -> list[BaseException]:
    return [p.error for p in posted if isinstance(p, EngineFailed)]


def test_out_of_pages_sheds_drafts_first_and_stops_nobody() -> None:
    a, b = _State(tokens=90, working=True), _State(tokens=10, working=True, drafts=True)
    built, posted = _sessions(a, b)
    step_failed("engine", built, OutOfPages("no pages"))
    assert a.shed_called and b.shed_called
    assert not a.aborted and not b.aborted and posted == [[], []]


def test_out_of_pages_without_drafts_stops_the_biggest_conversation_only() -> None:
    small, big, idle = _State(tokens=10, working=True), _State(tokens=90, working=True), \
        _State(tokens=500)
    built, posted = _sessions(small, big, idle)
    error = OutOfPages("no pages")
    step_failed("engine", built, error)
    assert big.aborted and not small.aborted and not idle.aborted
    assert _failures(posted[1]) == [error] and posted[0] == posted[2] == []


def test_out_of_pages_with_nothing_generating_is_a_bug() -> None:
    built, _ = _sessions(_State(tokens=10))
    with pytest.raises(RuntimeError, match="no generation in flight"):
        step_failed("engine", built, OutOfPages("no pages"))


def test_failed_jobs_are_told_to_their_owners_unless_background_work() -> None:
    live_job, draft_job = object(), object()
    live, drafting, other = (_State(jobs=(live_job,)), _State(jobs=(draft_job,), background=True),
                             _State(working=True))
    built, posted = _sessions(live, drafting, other)
    cause = ValueError("bad request")
    step_failed("engine", built, JobsFailed((live_job, draft_job), cause))  # type: ignore[arg-type]
    assert _failures(posted[0]) == [cause]
    assert posted[1] == posted[2] == [] and not other.aborted


def test_a_step_failing_as_a_whole_stops_and_tells_only_sessions_with_work() -> None:
    working, idle = _State(working=True), _State()
    built, posted = _sessions(working, idle)
    error = RuntimeError("kernel failed")
    step_failed("engine", built, error)
    assert working.aborted and not idle.aborted
    assert _failures(posted[0]) == [error] and posted[1] == []


def test_guard_turns_a_raising_call_into_an_abort_and_a_report() -> None:
    state = _State(working=True)
    built, posted = _sessions(state)
    error = KeyError("broken output")

    def fails() -> None:
        raise error

    guard(built[0][0], state, fails)
    assert state.aborted and _failures(posted[0]) == [error]
    guard(built[0][0], state, lambda: None)
    assert len(posted[0]) == 1
