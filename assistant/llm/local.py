"""The local paged-KV engine (:mod:`engine`) as an LLM backend.

A thin adapter: engine sequences and jobs already have the protocol's shape; this
class types them as the protocol's, turns a step that failed in some jobs
(`engine.errors.JobFailedError`) into `JobsFailed` with those jobs cancelled, and maps
the engine's cache counters onto `BackendStats`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, cast

from assistant.llm.protocol import BackendStats, JobsFailed, LLMJob, LLMSequence, OutOfPages
from engine.errors import CacheExhaustedError, JobFailedError
from engine.params import Priority, SamplingParams

if TYPE_CHECKING:
    from engine.detokenize import TokenizerLike
    from engine.engine import Engine
    from engine.job import Job
    from engine.sequence import Sequence as EngineSequence

__all__ = ["LocalBackend"]


class LocalBackend:
    """`LLMBackend` over one :class:`engine.Engine` (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def name(self) -> str:
        runner = self.engine.runner
        device = getattr(runner, "device", "cpu")
        dtype = str(getattr(runner, "dtype", "")).removeprefix("torch.")
        return f"local engine ({device} {dtype})".replace(" )", ")")

    @property
    def tokenizer(self) -> TokenizerLike:
        return self.engine.tokenizer

    @property
    def max_positions(self) -> int | None:
        value = getattr(self.engine.runner, "max_positions", None)
        return int(value) if value is not None else None

    @property
    def capacity_tokens(self) -> int | None:
        s = self.engine.stats()
        return s.pages_total * s.page_size

    def sequence(self, *, priority: Priority = Priority.LIVE) -> LLMSequence:
        return self.engine.sequence(priority=priority)

    def next_token_probability(self, seq: LLMSequence, token_ids: Collection[int]) -> float:
        import torch

        logits = cast("EngineSequence", seq).next_logits().float()
        ids = torch.tensor(sorted(set(token_ids)), dtype=torch.long)
        return float(torch.softmax(logits, dim=-1)[ids].sum())

    def enqueue(self, seq: LLMSequence, params: SamplingParams, *,
                prompt_ids: Sequence[int] = (), priority: Priority | None = None) -> LLMJob:
        return self.engine.enqueue(cast("EngineSequence", seq), params, prompt_ids=prompt_ids,
                                   priority=priority)

    def cancel(self, job: LLMJob) -> None:
        self.engine.cancel(cast("Job", job))

    def has_work(self) -> bool:
        return self.engine.has_work()

    def step(self) -> None:
        try:
            self.engine.step()
        except CacheExhaustedError as exc:
            raise OutOfPages(str(exc)) from exc
        except JobFailedError as exc:
            failed = tuple(j for j in self.engine.jobs if j.job_id in exc.job_ids)
            for job in failed:
                self.engine.cancel(job)
            raise JobsFailed(failed, exc.cause) from exc

    def stats(self) -> BackendStats:
        s = self.engine.stats()
        return BackendStats(
            sequences=s.sequences, tokens_computed=s.tokens_computed,
            tokens_reused=s.tokens_referenced + s.tokens_copied,
            tokens_decoded=s.tokens_decoded, pages_total=s.pages_total,
            pages_used=s.pages_used, pages_free=s.pages_free, pages_cached=s.pages_cached,
            pages_shared=s.pages_shared)

    def is_out_of_pages(self, error: BaseException) -> bool:
        return isinstance(error, (CacheExhaustedError, OutOfPages))

    def check(self) -> None:
        self.engine.check()
