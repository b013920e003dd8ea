"""vLLM over HTTP as an LLM backend (see :mod:`assistant.llm.protocol`).

A sequence is the client's token-id list (:mod:`~assistant.llm.vllm.sequence`); a
job is one streaming ``/v1/completions`` request whose prompt is that whole list
(:mod:`~assistant.llm.vllm.job` gives the ids the engine's meaning); the server's
prefix cache (whole blocks) makes the resent history cheap, and what it reused comes
back as ``usage.prompt_tokens_details.cached_tokens``, logged beside the value the
client expected (:mod:`~assistant.llm.vllm.prefix_estimate`).

Each request is read on its own thread, which only parses events and queues them;
:meth:`VLLMBackend.step` (the engine thread) applies them, so every sequence and job is
touched by one thread only. A replica that breaks mid-request is marked down and the
request is sent again to the conversation's next replica with the ids received so far
as part of its prompt (:mod:`~assistant.llm.vllm.router`): the reply goes on there.
"""

from __future__ import annotations

import itertools
import logging
import math
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from assistant.llm.protocol import BackendStats, JobsFailed, LLMJob, LLMSequence
from assistant.llm.vllm.client import Stream, Unreachable
from assistant.llm.vllm.job import RemoteJob
from assistant.llm.vllm.router import NoReplica, Replica, ReplicaHealth, Router
from assistant.llm.vllm.sequence import RemoteSequence
from engine.detokenize import TokenizerLike
from engine.errors import EngineInvariantError
from engine.events import PrefillStats
from engine.params import Priority, SamplingParams

__all__ = ["VLLMBackend", "RemoteModel", "RequestRecord", "PENALTY_ARGS"]

_log = logging.getLogger(__name__)

PENALTY_ARGS = ("repetition_penalty_window", "repetition_penalty_value")
"""``vllm_xargs`` keys of the windowed repetition penalty
(:mod:`assistant.llm.vllm.penalty`, loaded into the server)."""


@dataclass(frozen=True)
class RemoteModel:
    """What the server serves (from ``/v1/models``) and the local tokenizer's view of it."""

    name: str
    """The model id requests name."""
    max_positions: int
    """``max_model_len``."""
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    block_size: int
    """The server's prefix-cache block (``--block-size``), tokens."""
    windowed_penalty: bool = True
    """The server loads :mod:`assistant.llm.vllm.penalty` (``--logits-processors``),
    so the repetition penalty is the local engine's (the last window of ids); without
    it vLLM's own penalty applies (every id of the prompt and the reply)."""


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


class VLLMBackend:
    """`LLMBackend` over one or several vLLM replicas (see the module docstring)."""

    def __init__(self, router: Router, model: RemoteModel, tokenizer: TokenizerLike, *,
                 poll_s: float = 0.02, records: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.router = router
        self.model = model
        self._tokenizer = tokenizer
        self._poll_s = poll_s
        self._clock = clock
        self._ids = itertools.count(1)
        self._keys = random.Random()  # random routing keys: processes spread alike
        self._sequences: dict[int, RemoteSequence] = {}
        self._jobs: dict[int, RemoteJob] = {}
        self._requests: dict[int, _Request] = {}
        self._draining: dict[int, tuple[RemoteJob, _Request]] = {}
        """Finished jobs whose request still owes its usage (``cached_tokens``)."""
        self._inbox: queue.Queue[_Item] = queue.Queue()
        self._threads: set[threading.Thread] = set()
        self._computed = 0
        self._reused = 0
        self._decoded = 0
        self.records: deque[RequestRecord] = deque(maxlen=records)
        """The latest requests, oldest first (turn accounting, benches, tests)."""

    # ---- LLMBackend ----------------------------------------------------------------

    @property
    def name(self) -> str:
        urls = ", ".join(r.url for r in self.router.replicas)
        return f"vLLM {self.model.name} at {urls}"

    @property
    def tokenizer(self) -> TokenizerLike:
        return self._tokenizer

    @property
    def max_positions(self) -> int:
        return self.model.max_positions

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def capacity_tokens(self) -> int | None:
        return None  # the server's cache is shared with every other client

    def sequence(self, *, priority: Priority = Priority.LIVE) -> LLMSequence:
        return self.new_sequence(key=self._keys.getrandbits(63), priority=priority)

    def next_token_probability(self, seq: LLMSequence, token_ids: Collection[int]) -> float:
        """From the top log-probabilities of a one-token completion (ids outside the top
        ``max_logprobs`` count as zero; raw model probabilities, no penalty)."""
        rseq = self._own(seq)
        wanted = {int(t) for t in token_ids}
        body = {"model": self.model.name, "prompt": list(rseq.tokens), "max_tokens": 1,
                "temperature": 0.0, "logprobs": 20, "return_tokens_as_token_ids": True}
        answer = self._post(rseq.key, "/v1/completions", body)
        top = (answer["choices"][0].get("logprobs") or {}).get("top_logprobs") or [{}]
        total = 0.0
        for name, logprob in (top[0] or {}).items():
            if _token_id(name) in wanted and logprob is not None:
                total += math.exp(float(logprob))
        return min(total, 1.0)

    def enqueue(self, seq: LLMSequence, params: SamplingParams, *,
                prompt_ids: Sequence[int] = (), priority: Priority | None = None) -> LLMJob:
        rseq = self._own(seq)
        before = len(rseq)
        stats = rseq.extend(prompt_ids)
        job = RemoteJob(next(self._ids), rseq, params,
                        priority=rseq.priority if priority is None else priority,
                        tokenizer=self._tokenizer, eos_token_ids=self.model.eos_token_ids)
        job.prompt_stats = stats
        try:
            self._send(job, failover=False)
        except BaseException:  # no replica: as if never enqueued
            rseq.cut(before)
            raise
        rseq.job = job
        self._jobs[job.job_id] = job
        return job

    def cancel(self, job: LLMJob) -> None:
        rjob = self._own_job(job)
        if rjob.done:
            return
        req = self._requests.get(rjob.job_id)
        self._abort(rjob)
        rjob.finish_cancelled()
        if req is not None:
            self._record(rjob, req)
        self._forget(rjob)

    def has_work(self) -> bool:
        return bool(self._jobs or self._draining)

    def step(self) -> None:
        """Apply what the servers sent since the last step (waiting up to ``poll_s`` for
        the first event when nothing came yet)."""
        items: list[_Item] = []
        try:
            items.append(self._inbox.get(timeout=self._poll_s))
            while True:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        failed: list[tuple[RemoteJob, BaseException]] = []
        for item in items:
            error = self._apply(item)
            if error is not None:
                failed.append((item.job, error))
        if failed:
            for job, _error in failed:
                self.cancel(job)
            raise JobsFailed(tuple(job for job, _ in failed), failed[0][1])

    def stats(self) -> BackendStats:
        return BackendStats(sequences=len(self._sequences), tokens_computed=self._computed,
                            tokens_reused=self._reused, tokens_decoded=self._decoded)

    def is_out_of_pages(self, error: BaseException) -> bool:
        return False  # the server preempts and requeues; it never fails a request so

    def check(self) -> None:
        problems = []
        for job in self._jobs.values():
            if job.done:
                problems.append(f"job {job.job_id} is done but still tracked")
            if job.seq.released:
                problems.append(f"job {job.job_id} runs on a released sequence")
            if job.seq.job is not job:
                problems.append(f"job {job.job_id} is not its sequence's job")
            if job.job_id not in self._requests:
                problems.append(f"job {job.job_id} has no request in flight")
        for seq_id, seq in self._sequences.items():
            if seq.released:
                problems.append(f"sequence {seq_id} is released but still tracked")
            if len(seq) > self.max_positions:
                problems.append(f"sequence {seq_id} holds {len(seq)} > "
                                f"{self.max_positions} positions")
        if problems:
            raise EngineInvariantError("; ".join(problems))

    # ---- replicas ------------------------------------------------------------------

    def health(self) -> tuple[ReplicaHealth, ...]:
        return self.router.health()

    def close(self, timeout_s: float = 5.0) -> None:
        """Abort every request in flight and wait for the reader threads."""
        for job in list(self._jobs.values()):
            self.cancel(job)
        for _job, req in list(self._draining.values()):
            self._close_stream(req)
        self._draining.clear()
        for thread in list(self._threads):
            thread.join(timeout_s)

    # ---- for RemoteSequence --------------------------------------------------------

    def new_sequence(self, *, key: int, priority: Priority,
                     tokens: Sequence[int] = ()) -> RemoteSequence:
        seq = RemoteSequence(self, next(self._ids), key, priority=priority, tokens=tokens)
        self._sequences[seq.seq_id] = seq
        return seq

    def expected_stats(self, seq: RemoteSequence, ids: Sequence[int]) -> PrefillStats:
        """The split of ``ids`` (to follow ``seq``'s) the server should report."""
        replica = self._preferred(seq.key)
        before = len(seq)
        hit = replica.prefix.cached_prefix([*seq.tokens, *ids]) if replica else 0
        reused = max(0, min(hit - before, len(ids)))
        return PrefillStats(len(ids) - reused, reused, 0)

    def on_release(self, seq: RemoteSequence) -> None:
        if seq.job is not None and not seq.job.done:
            self.cancel(seq.job)
        self._sequences.pop(seq.seq_id, None)

    # ---- requests ------------------------------------------------------------------

    def _preferred(self, key: int) -> Replica | None:
        for replica in self.router.ranked(key):
            if replica.up:
                return replica
        return None

    def _post(self, key: int, path: str, body: dict[str, Any]) -> Any:
        """A plain request, failing over like a stream does."""
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

    def _body(self, job: RemoteJob, prompt: list[int]) -> dict[str, Any]:
        p = job.params
        body: dict[str, Any] = {
            "model": self.model.name, "prompt": prompt, "max_tokens": job.max_tokens,
            "temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k or -1,
            "stream": True, "return_token_ids": True, "ignore_eos": True,
            "stop_token_ids": sorted(job.stop_ids), "skip_special_tokens": False,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if p.temperature > 0:
            body["seed"] = p.seed
        if p.repetition_penalty != 1.0 and p.repetition_window > 0:
            if self.model.windowed_penalty:
                body["vllm_xargs"] = dict(zip(PENALTY_ARGS, (p.repetition_window,
                                                             p.repetition_penalty),
                                              strict=True))
            else:
                body["repetition_penalty"] = p.repetition_penalty
        return body

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
        body = self._body(job, prompt)
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

    def _abort(self, job: RemoteJob) -> None:
        req = self._requests.get(job.job_id)
        if req is not None:
            self._close_stream(req)

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
            self._computed += computed
            self._reused += req.cached
            if not req.failover:
                job.prompt_stats = PrefillStats(computed, req.cached, 0)
        for choice in event.get("choices") or ():
            if choice.get("prompt_token_ids"):
                req.echoed = tuple(int(t) for t in choice["prompt_token_ids"])
            ids = [int(t) for t in choice.get("token_ids") or ()]
            if ids:
                req.first_at = req.first_at or self._clock()
                req.received += len(ids)
                self._decoded += len(ids)
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
        self._jobs.pop(job.job_id, None)
        self._requests.pop(job.job_id, None)

    def _own(self, seq: LLMSequence) -> RemoteSequence:
        if not isinstance(seq, RemoteSequence) or self._sequences.get(seq.seq_id) is not seq:
            raise ValueError("not a live sequence of this backend")
        return seq

    def _own_job(self, job: LLMJob) -> RemoteJob:
        if not isinstance(job, RemoteJob):
            raise ValueError("not a job of this backend")
        return job


def _token_id(name: str) -> int | None:
    """``token_id:123`` (``return_tokens_as_token_ids``) -> 123."""
    if name.startswith("token_id:"):
        try:
            return int(name[len("token_id:"):])
        except ValueError:
            return None
    return None
