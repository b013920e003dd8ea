"""The jobs in flight on vLLM: one streaming request each, its reader thread, failover.

A job is one streaming ``/v1/completions`` request whose prompt is its sequence's whole
id list (:mod:`~assistant.llm.vllm.remote_model`). Each request is read on its own
thread, which only parses events and queues them; :meth:`RequestStreams.receive` (the
engine thread) applies them, so every sequence and job is touched by one thread only. A
replica that breaks mid-request is marked down and the request is sent again to the
conversation's next replica with the ids received so far as part of its prompt
(:mod:`~assistant.llm.vllm.router`): the reply goes on there.

What the server reused of each prompt comes back as
``usage.prompt_tokens_details.cached_tokens``; it is recorded (`RequestRecord`) and
logged beside the value the client expected (:mod:`~assistant.llm.vllm.prefix_estimate`).
A job that ends before its usage arrives keeps its request draining until it does.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from assistant.llm.vllm.client import Stream, Unreachable
from assistant.llm.vllm.job import RemoteJob
from assistant.llm.vllm.remote_model import RemoteModel, completion_body
from assistant.llm.vllm.router import NoReplica, Replica, Router
from engine.events import PrefillStats

__all__ = ["RequestRecord", "RequestStreams"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestRecord:
    """One generation request as the server answered it."""

    job_id: int
    replica: str
    prompt_tokens: int
    cached_tokens: int | None
    """Reported by the server (None: it ended before saying, e.g. aborted)."""
    expected_cached: int
    """What this client expected from the blocks it had sent and received."""
    generated: int
    ttft_s: float | None
    """Seconds from sending to the first id (None: no id came)."""
    failover: bool
    """Sent again after another replica failed mid-request."""
    prompt_ids: tuple[int, ...] = ()
    """The prompt as the server echoed it (``return_token_ids``; empty if it did not)."""


@dataclass(frozen=True)
class _Item:
    job: RemoteJob
    attempt: int
    event: dict[str, Any] | None = None
    end: bool = False
    error: BaseException | None = None


@dataclass
class _Request:
    """The request in flight for one job."""

    replica: Replica
    attempt: int
    sent_at: float
    expected_cached: int
    prompt: list[int]
    failover: bool
    stream: Stream | None = None
    cancelled: bool = False
    first_at: float | None = None
    cached: int | None = None
    received: int = 0
    echoed: tuple[int, ...] = ()
    server_done: bool = False
    """The server ended the request (a finish reason came): its usage follows."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class RequestStreams:
    """The jobs in flight over `router`'s replicas (see the module docstring)."""

    def __init__(self, router: Router, model: RemoteModel, *, clock: Callable[[], float],
                 records: int) -> None:
        self.router = router
        self.model = model
        self._clock = clock
        self.jobs: dict[int, RemoteJob] = {}
        """Jobs not done, by id; each has a request in flight."""
        self._requests: dict[int, _Request] = {}
        self._draining: dict[int, tuple[RemoteJob, _Request]] = {}
        """Finished jobs whose request still owes its usage (``cached_tokens``)."""
        self._inbox: queue.Queue[_Item] = queue.Queue()
        self._threads: set[threading.Thread] = set()
        self.computed = 0
        """Prompt tokens the servers computed (from their usage)."""
        self.reused = 0
        """Prompt tokens the servers found in their prefix caches."""
        self.decoded = 0
        """Ids received."""
        self.records: deque[RequestRecord] = deque(maxlen=records)
        """The latest requests, oldest first (turn accounting, benches, tests)."""

    def start(self, job: RemoteJob) -> None:
        """Send ``job``'s request and track it. Raises `NoReplica` (nothing tracked) when
        every replica is down."""
        self._send(job, failover=False)
        self.jobs[job.job_id] = job

    def cancel(self, job: RemoteJob) -> None:
        """Abort a job that is not done, end it cancelled and record its request."""
        req = self._requests.get(job.job_id)
        if req is not None:
            self._close_stream(req)
        job.finish_cancelled()
        if req is not None:
            self._record(job, req)
        self._forget(job)

    def receive(self, poll_s: float) -> list[tuple[RemoteJob, BaseException]]:
        """Apply what the servers sent since the last call (waiting up to ``poll_s`` for
        the first event when nothing came yet); returns the jobs that failed and why (the
        caller cancels them)."""
        items: list[_Item] = []
        try:
            items.append(self._inbox.get(timeout=poll_s))
            while True:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        failed: list[tuple[RemoteJob, BaseException]] = []
        for item in items:
            error = self._apply(item)
            if error is not None:
                failed.append((item.job, error))
        return failed

    def has_work(self) -> bool:
        return bool(self.jobs or self._draining)

    def problems(self) -> list[str]:
        """Inconsistencies between the jobs tracked, their sequences and requests."""
        problems = []
        for job in self.jobs.values():
            if job.done:
                problems.append(f"job {job.job_id} is done but still tracked")
            if job.seq.released:
                problems.append(f"job {job.job_id} runs on a released sequence")
            if job.seq.job is not job:
                problems.append(f"job {job.job_id} is not its sequence's job")
            if job.job_id not in self._requests:
                problems.append(f"job {job.job_id} has no request in flight")
        return problems

    def close(self, timeout_s: float) -> None:
        """Close the streams still owing their usage and wait for the reader threads
        (cancel the jobs first)."""
        for _job, req in list(self._draining.values()):
            self._close_stream(req)
        self._draining.clear()
        for thread in list(self._threads):
            thread.join(timeout_s)

    def post(self, key: int, path: str, body: dict[str, Any]) -> Any:
        """A plain request for conversation ``key``, failing over like a stream does."""
        avoid: Replica | None = None
        while True:
            replica = self.router.pick(key, avoid=avoid)
            try:
                answer = replica.endpoint.post_json(path, body)
            except Unreachable as exc:
                self.router.failed(replica, exc)
                _log.warning("vLLM replica %s is down (%s); trying the next", replica.url, exc)
                avoid = replica
                continue
            self.router.succeeded(replica)
            return answer

    # ---- helpers ----------------------------------------------------------------------

    def _send(self, job: RemoteJob, *, failover: bool,
              avoid: Replica | None = None) -> None:
        """Send ``job``'s request (again, after a failover: with the ids received so far
        in its prompt) on a reader thread. Raises `NoReplica` when none is left."""
        old = self._requests.get(job.job_id)
        replica = self.router.pick(job.seq.key, avoid=avoid)
        prompt = [*job.seq.tokens[:job.base], *job.generated]
        req = _Request(replica, attempt=old.attempt + 1 if old else 1, sent_at=self._clock(),
                       expected_cached=replica.prefix.expected_cached(prompt),
                       prompt=prompt, failover=failover)
        self._requests[job.job_id] = req
        body = completion_body(self.model, job, prompt)
        thread = threading.Thread(target=self._pump, args=(job, req, body),
                                  name=f"vllm-job-{job.job_id}", daemon=True)
        self._threads.add(thread)
        thread.start()

    def _pump(self, job: RemoteJob, req: _Request, body: dict[str, Any]) -> None:
        """Reader thread: open the stream and queue its events (and how it ended)."""
        try:
            try:
                stream = req.replica.endpoint.stream("/v1/completions", body)
                with req.lock:
                    req.stream = stream
                    if req.cancelled:
                        stream.close()
                for event in stream.events():
                    self._inbox.put(_Item(job, req.attempt, event=event))
                self._inbox.put(_Item(job, req.attempt, end=True))
            except BaseException as exc:  # the engine thread decides (failover or fail)
                self._inbox.put(_Item(job, req.attempt, error=exc))
        finally:
            self._threads.discard(threading.current_thread())

    @staticmethod
    def _close_stream(req: _Request) -> None:
        with req.lock:
            req.cancelled = True
            stream = req.stream
        if stream is not None:
            stream.close()

    def _apply(self, item: _Item) -> BaseException | None:
        """One queued item on the engine thread; returns an error that fails its job."""
        job = item.job
        drained = self._draining.get(job.job_id)
        if drained is not None and drained[1].attempt == item.attempt:
            owed = drained[1]
            if item.event is not None:
                self._on_event(job, owed, item.event)
            if item.end or item.error is not None or owed.cached is not None:
                del self._draining[job.job_id]
                self._close_stream(owed)
                self._record(job, owed)
            return None
        req = self._requests.get(job.job_id)
        if req is None or req.attempt != item.attempt or job.done:
            return None  # from a request already replaced, aborted or finished
        if item.error is not None:
            return self._on_error(job, req, item.error)
        if item.event is not None:
            self._on_event(job, req, item.event)
        if item.end and not job.done:
            job.on_server_finished()
        if job.done:
            self._finish(job, req, ended=item.end)
        return None

    def _on_event(self, job: RemoteJob, req: _Request, event: dict[str, Any]) -> None:
        usage = event.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None and req.cached is None:
            req.cached = int(details["cached_tokens"])
            computed = len(req.prompt) - req.cached
            self.computed += computed
            self.reused += req.cached
            if not req.failover:
                job.prompt_stats = PrefillStats(computed, req.cached, 0)
        for choice in event.get("choices") or ():
            if choice.get("prompt_token_ids"):
                req.echoed = tuple(int(t) for t in choice["prompt_token_ids"])
            ids = [int(t) for t in choice.get("token_ids") or ()]
            if ids:
                req.first_at = req.first_at or self._clock()
                req.received += len(ids)
                self.decoded += len(ids)
                job.on_tokens(ids)
            if choice.get("finish_reason") is not None:
                req.server_done = True

    def _on_error(self, job: RemoteJob, req: _Request, error: BaseException) -> BaseException | None:
        if not isinstance(error, Unreachable):
            return error
        self.router.failed(req.replica, error)
        _log.warning("vLLM replica %s failed during job %d (%s); moving the conversation",
                     req.replica.url, job.job_id, error)
        self._record(job, req)
        try:
            self._send(job, failover=True, avoid=req.replica)
        except NoReplica as exc:
            return exc
        self.router.moved(req.replica)
        return None

    def _finish(self, job: RemoteJob, req: _Request, *, ended: bool) -> None:
        self.router.succeeded(req.replica)
        self._forget(job)
        if req.server_done and not ended and req.cached is None:
            self._draining[job.job_id] = (job, req)  # its usage is the next event
            return
        self._close_stream(req)  # ended here first (a stop string, the room): the server stops
        self._record(job, req)

    def _record(self, job: RemoteJob, req: _Request) -> None:
        if req.first_at is not None:
            # The server computed the prompt and the K/V of every id it sampled but the last.
            req.replica.prefix.record([*req.prompt[:job.base], *job.generated[:-1]])
        cached, expected = req.cached, req.expected_cached
        # Less than expected is news (evicted, or another replica); more is other clients.
        level = logging.INFO if cached is not None and cached < expected else logging.DEBUG
        _log.log(level, "vLLM job %d on %s: %s of %d prompt tokens cached (expected %d)",
                 job.job_id, req.replica.url, cached, len(req.prompt), expected)
        ttft = None if req.first_at is None else req.first_at - req.sent_at
        self.records.append(RequestRecord(job.job_id, req.replica.url, len(req.prompt),
                                          cached, expected, req.received, ttft, req.failover,
                                          req.echoed))

    def _forget(self, job: RemoteJob) -> None:
        self.jobs.pop(job.job_id, None)
        self._requests.pop(job.job_id, None)
