"""vLLM over HTTP as an LLM backend (see :mod:`assistant.llm.protocol`).

A sequence is the client's token-id list (:mod:`~assistant.llm.vllm.sequence`); a
job is one streaming ``/v1/completions`` request whose prompt is that whole list
(:mod:`~assistant.llm.vllm.job` gives the ids the engine's meaning), sent, read and
failed over by :mod:`~assistant.llm.vllm.streams`; the server's prefix cache (whole
blocks) makes the resent history cheap. Every sequence and job is touched by the engine
thread only (:meth:`VLLMBackend.step`); the reader threads only queue what they read.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence

from assistant.llm.protocol import BackendStats, JobsFailed, LLMJob, LLMSequence
from assistant.llm.vllm.job import RemoteJob
from assistant.llm.vllm.remote_model import RemoteModel
from assistant.llm.vllm.router import Replica, ReplicaHealth, Router
from assistant.llm.vllm.sequence import RemoteSequence
from assistant.llm.vllm.streams import RequestRecord, RequestStreams
from engine.detokenize import TokenizerLike
from engine.errors import EngineInvariantError
from engine.events import PrefillStats
from engine.params import Priority, SamplingParams

__all__ = ["VLLMBackend"]


class VLLMBackend:
    """`LLMBackend` over one or several vLLM replicas (see the module docstring)."""

    def __init__(self, router: Router, model: RemoteModel, tokenizer: TokenizerLike, *,
                 poll_s: float = 0.02, records: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.router = router
        self.model = model
        self._tokenizer = tokenizer
        self._poll_s = poll_s
        self._ids = itertools.count(1)
        self._keys = random.Random()  # random routing keys: processes spread alike
        self._sequences: dict[int, RemoteSequence] = {}
        self._streams = RequestStreams(router, model, clock=clock, records=records)

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
        answer = self._streams.post(rseq.key, "/v1/completions", body)
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
            self._streams.start(job)
        except BaseException:  # no replica: as if never enqueued
            rseq.cut(before)
            raise
        rseq.job = job
        return job

    def cancel(self, job: LLMJob) -> None:
        rjob = self._own_job(job)
        if rjob.done:
            return
        self._streams.cancel(rjob)

    def has_work(self) -> bool:
        return self._streams.has_work()

    def step(self) -> None:
        """Apply what the servers sent since the last step (waiting up to ``poll_s`` for
        the first event when nothing came yet)."""
        failed = self._streams.receive(self._poll_s)
        if failed:
            for job, _error in failed:
                self.cancel(job)
            raise JobsFailed(tuple(job for job, _ in failed), failed[0][1])

    def stats(self) -> BackendStats:
        streams = self._streams
        return BackendStats(sequences=len(self._sequences), tokens_computed=streams.computed,
                            tokens_reused=streams.reused, tokens_decoded=streams.decoded)

    def is_out_of_pages(self, error: BaseException) -> bool:
        return False  # the server preempts and requeues; it never fails a request so

    def check(self) -> None:
        problems = self._streams.problems()
        for seq_id, seq in self._sequences.items():
            if seq.released:
                problems.append(f"sequence {seq_id} is released but still tracked")
            if len(seq) > self.max_positions:
                problems.append(f"sequence {seq_id} holds {len(seq)} > "
                                f"{self.max_positions} positions")
        if problems:
            raise EngineInvariantError("; ".join(problems))

    # ---- replicas ------------------------------------------------------------------

    @property
    def records(self) -> deque[RequestRecord]:
        """The latest requests, oldest first (turn accounting, benches, tests)."""
        return self._streams.records

    def health(self) -> tuple[ReplicaHealth, ...]:
        return self.router.health()

    def close(self, timeout_s: float = 5.0) -> None:
        """Abort every request in flight and wait for the reader threads."""
        for job in list(self._streams.jobs.values()):
            self.cancel(job)
        self._streams.close(timeout_s)

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

    # ---- helpers -------------------------------------------------------------------

    def _preferred(self, key: int) -> Replica | None:
        for replica in self.router.ranked(key):
            if replica.up:
                return replica
        return None

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
