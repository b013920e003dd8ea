"""Scheduler: interleaves prompt prefill chunks with batched decode steps.

Each `step()` runs at most one prefill forward and one `runner.decode` for every job that
has a pending token (up to `max_batch`, live first). The prefill forward takes the next
prompt chunk of the first job waiting for its prompt (live before speculative, then first
come first served) and of the jobs of the same priority behind it, up to `prefill_chunk`
tokens in all (`engine.prefill_batch`): several short prompts (sessions starting together,
a burst of turns) cost one forward instead of one each, as vLLM's scheduler batches
prefills. Turns that end in the same step are closed in one forward too. Jobs are the
exllamav2-style enqueue / iterate / cancel API (after exllamav2 generator/dynamic.py); a
plain synchronous state machine, driven from one worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from engine.errors import CacheExhaustedError, EngineError, JobFailedError
from engine.events import TokenEvent
from engine.job import Job, JobState
from engine.params import Priority, SamplingParams
from engine.prefill_batch import ForwardPlan, extend_together, prefill_together
from engine.sampler import sample_batch

if TYPE_CHECKING:
    from engine.detokenize import TokenizerLike
    from engine.grammar import JsonSchemaConstraint
    from engine.page_cache import PageCache
    from engine.sequence import Sequence

__all__ = ["Scheduler"]


class Scheduler:
    def __init__(self, cache: PageCache, tokenizer: TokenizerLike, *, max_batch: int = 8
                 ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.max_batch = max_batch
        self._cache = cache
        self._tokenizer = tokenizer
        self._jobs: dict[int, Job] = {}  # active jobs in arrival order
        self._next_id = 0

    @property
    def jobs(self) -> tuple[Job, ...]:
        """Active (unfinished) jobs."""
        return tuple(self._jobs.values())

    def has_work(self) -> bool:
        return bool(self._jobs)

    def enqueue(self, seq: Sequence, params: SamplingParams, *,
                prompt_ids: Iterable[int] = (), priority: Priority | None = None,
                constraint: JsonSchemaConstraint | None = None) -> Job:
        """Start a generation on `seq` after `prompt_ids` (extended first, with reuse).
        A sequence runs at most one job at a time. ``constraint``: the grammar state of
        ``params.json_schema``, exactly when it is set (`engine.engine.Engine.enqueue`
        makes it)."""
        if seq.released:
            raise EngineError(f"sequence {seq.seq_id} was released")
        if any(job.seq is seq for job in self._jobs.values()):
            raise EngineError(f"sequence {seq.seq_id} already has a generation running")
        self._next_id += 1
        job = Job(self._next_id, seq, params, prompt_ids=prompt_ids,
                  priority=seq.priority if priority is None else priority,
                  tokenizer=self._tokenizer, eos_token_ids=self._cache.runner.eos_token_ids,
                  constraint=constraint)
        self._jobs[job.job_id] = job
        seq.attach(job)
        return job

    def cancel(self, job: Job) -> list[TokenEvent]:
        """Finish `job` now (on the engine's thread); its sequence keeps the tokens whose
        K/V was written and stays usable."""
        if self._jobs.pop(job.job_id, None) is None:
            return []
        return job.finish_cancelled()

    def cancel_sequence(self, seq: Sequence) -> None:
        for job in [j for j in self._jobs.values() if j.seq is seq]:
            self.cancel(job)

    def step(self) -> list[TokenEvent]:
        """Advance every active job by at most one token; returns the events produced
        (each job also keeps its own, see `Job.take_events`)."""
        events: list[TokenEvent] = []
        for job in [j for j in self._jobs.values() if j.cancel_requested]:
            events.extend(self.cancel(job))
        waiting = self._ordered(JobState.PREFILL)
        if waiting:
            events.extend(self._prefill(waiting))
        events.extend(self._decode())
        return events

    def _prefill(self, waiting: list[Job]) -> list[TokenEvent]:
        """One forward over the next prompt chunks of `waiting[0]` and of the jobs of its
        priority behind it that fit (see `engine.prefill_batch.ForwardPlan`). A job whose
        prompt could reuse what the forward writes waits a step, untouched."""
        plan = ForwardPlan(self._cache)
        chunks: list[tuple[Job, list[int]]] = []
        for job in waiting:
            if plan.tokens_left <= 0 or job.priority != waiting[0].priority:
                break
            head = not chunks
            try:
                if not head and plan.would_reuse(job.seq, job.prompt_left):
                    continue
                ids = job.prompt_chunk(plan.tokens_left)
                if ids and not head and not plan.fits(job.seq, ids):
                    continue
                plan.take(job.seq, ids)
            except CacheExhaustedError:
                if head:
                    raise  # memory is everybody's: not this job's fault
                break
            except Exception as exc:  # this job's prompt: the others are unaffected
                if head:
                    raise JobFailedError((job.job_id,), exc) from exc
                break  # it fails when its turn comes
            chunks.append((job, ids))
        computed = [(job.seq, ids) for job, ids in chunks if ids]
        try:
            if computed:
                prefill_together(self._cache.runner, computed)
        except CacheExhaustedError:
            raise  # memory is everybody's: not these jobs' fault
        except Exception as exc:  # these jobs' prompts: the jobs not in it are unaffected
            raise JobFailedError(tuple(job.job_id for job, _ in chunks), exc) from exc
        events: list[TokenEvent] = []
        failed: list[int] = []
        error: BaseException | None = None
        for job, ids in chunks:
            try:  # every job takes its chunk even if another one's first token fails
                events.extend(job.on_prefilled(len(ids)))
            except CacheExhaustedError as exc:
                error = error or exc
            except Exception as exc:
                error = error or exc
                failed.append(job.job_id)
            finally:
                self._retire(job)
        error = self._close_turns([job for job, _ in chunks], failed) or error
        if isinstance(error, CacheExhaustedError):
            raise error
        if error is not None:
            raise JobFailedError(tuple(failed), error) from error
        return events

    def _decode(self) -> list[TokenEvent]:
        ready = self._ordered(JobState.DECODE)
        if not ready:
            return []
        batch: list[Job] = []
        budget = self._cache.pool.available()
        for job in ready:
            need = job.seq.pages_needed(1)
            if len(batch) < self.max_batch and need <= budget:
                batch.append(job)
                budget -= need
        if not batch:
            pool = self._cache.pool
            raise CacheExhaustedError(
                f"KV cache exhausted: {len(ready)} generations need a new page and none of "
                f"the {pool.num_pages} pages is free or evictable; cancel or release "
                "sequences, or raise engine.num_pages")
        items = []
        try:
            for job in batch:
                items.append(job.decode_item())
            logits = self._cache.runner.decode(items)
        except BaseException:
            for job in batch:
                job.seq.rollback_pages()
            raise
        for row, job in enumerate(batch):
            job.on_decoded(logits[row])
        choices = sample_batch([job.sampler for job in batch], logits,
                               [job.recent() for job in batch])
        events: list[TokenEvent] = []
        failed: list[int] = []
        error: BaseException | None = None
        for job, token_id in zip(batch, choices, strict=True):
            try:  # every job takes its token even if closing another one's turn fails
                events.extend(job.sample_next(token_id))
            except CacheExhaustedError as exc:
                error = error or exc  # memory is everybody's: raised as is below
            except Exception as exc:
                error = error or exc
                failed.append(job.job_id)
            finally:
                self._retire(job)
        error = self._close_turns(batch, failed) or error
        if isinstance(error, CacheExhaustedError):
            raise error
        if error is not None:
            raise JobFailedError(tuple(failed), error) from error
        return events

    def _close_turns(self, jobs: list[Job], failed: list[int]) -> BaseException | None:
        """Extend the sequences of the jobs that finished with their closing ids
        (`Job.take_closing`), all in one forward per round. If that fails, each is extended
        alone: a job's own failure is its own (its id is added to `failed`). Returns the
        first error."""
        tails = [(job, tail) for job in jobs if (tail := job.take_closing())]
        if not tails:
            return None
        goal = {job.job_id: len(job.seq) + len(tail) for job, tail in tails}
        try:
            extend_together(self._cache, [(job.seq, tail) for job, tail in tails])
            return None
        except Exception:  # retried one by one below, where each job keeps its own error
            pass
        error: BaseException | None = None
        for job, tail in tails:
            left = goal[job.job_id] - len(job.seq)
            try:
                if left > 0:
                    job.seq.extend(tail[len(tail) - left:])
            except CacheExhaustedError as exc:
                error = error or exc
            except Exception as exc:
                error = error or exc
                failed.append(job.job_id)
        return error

    def _ordered(self, state: JobState) -> list[Job]:
        jobs = [j for j in self._jobs.values() if j.state is state]
        return sorted(jobs, key=lambda j: (j.priority, j.job_id))

    def _retire(self, job: Job) -> None:
        if job.done:
            self._jobs.pop(job.job_id, None)
