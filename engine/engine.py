"""`Engine`: the facade over the page cache, sequences and the scheduler.

Not thread-safe: call it from one worker thread (never the event loop). Only
`Job.cancel()` may be called from other threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import EngineInvariantError
from engine.events import EngineStats, TokenEvent
from engine.page_cache import PageCache
from engine.params import Priority, SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence

if TYPE_CHECKING:
    from engine.detokenize import TokenizerLike
    from engine.grammar import GrammarVocabulary
    from engine.job import Job
    from engine.runner import ModelRunner
    from engine.weight_formats import DensePrefill

__all__ = ["Engine"]


class Engine:
    """Paged KV cache with prefix sharing over a `ModelRunner`.

    >>> with engine.sequence() as seq:
    ...     seq.extend(prompt_ids)
    ...     for event in seq.generate(SamplingParams(max_new_tokens=32)):
    ...         print(event.text_delta, end="")
    """

    def __init__(self, runner: ModelRunner, tokenizer: TokenizerLike, *, max_batch: int = 8,
                 prefill_chunk: int = 512,
                 grammar_vocabulary: GrammarVocabulary | None = None) -> None:
        """grammar_vocabulary: the tokenizer's vocabulary for JSON-schema constrained
        replies (`SamplingParams.json_schema`); by default built from a transformers
        `tokenizer` when the first such reply is enqueued."""
        self.runner = runner
        self.tokenizer = tokenizer
        self._cache: PageCache[Sequence] = PageCache(runner, prefill_chunk=prefill_chunk)
        self._scheduler = Scheduler(self._cache, tokenizer, max_batch=max_batch)
        self._grammar_vocabulary = grammar_vocabulary

    @classmethod
    def load(cls, model_path: str | Path, *, gguf_file: str | None = None, device: str = "cpu",
             dtype: str = "float32", page_size: int = 16, num_pages: int = 1024,
             max_batch: int = 8, prefill_chunk: int = 512, weights: str | None = None,
             cache_dir: Path | None = None, dense_prefill: DensePrefill = "auto",
             cuda_graphs: bool = False) -> Engine:
        """Load a local transformers model directory (see `engine.loader.load_runner`).

        weights: None (dense in `dtype`, as before) or a format ``fp32`` / ``bf16`` /
        ``int8`` / ``int4``, which also sets the compute dtype; cache_dir: where quantized
        weights are cached (computed on every load when None); dense_prefill: whether
        quantized weights also keep a 16-bit copy for many rows (auto: bfloat16 on CPUs
        with AMX or AVX512-BF16, float16 on AVX2 ones; see
        `engine.weight_formats.dense_copy_for`); cuda_graphs: on CUDA, batch-1 decode steps
        as CUDA graphs (`engine.graph_decode`)."""
        from engine.loader import load_runner

        runner, tokenizer = load_runner(model_path, gguf_file=gguf_file, device=device,
                                        dtype=dtype, page_size=page_size, num_pages=num_pages,
                                        weights=weights, cache_dir=cache_dir,
                                        dense_prefill=dense_prefill,
                                        cuda_graphs=cuda_graphs)
        tok: Any = tokenizer
        return cls(runner, tok, max_batch=max_batch, prefill_chunk=prefill_chunk)

    # ---- sequences -------------------------------------------------------------------

    def sequence(self, *, priority: Priority = Priority.LIVE) -> Sequence:
        """A new, empty sequence. Release it (or use it as a context manager)."""
        return Sequence(self._cache, self, priority=priority)

    def sequences(self) -> tuple[Sequence, ...]:
        """Live (unreleased) sequences."""
        return tuple(self._cache.sequences())

    # ---- jobs --------------------------------------------------------------------------

    def enqueue(self, seq: Sequence, params: SamplingParams, *,
                prompt_ids: Iterable[int] = (), priority: Priority | None = None) -> Job:
        """Start a generation on `seq` after `prompt_ids`; advance it with `step()`. With
        ``params.json_schema``, only ids its grammar allows are sampled and the job ends as
        soon as the JSON document is whole; a schema the grammar compiler cannot take
        raises `engine.grammar.GrammarError` here, before anything starts."""
        constraint = None
        if params.json_schema is not None:
            from engine.grammar import JsonSchemaConstraint

            grammar = self.grammar_vocabulary.compile(params.json_schema)
            constraint = JsonSchemaConstraint(grammar)
        return self._scheduler.enqueue(seq, params, prompt_ids=prompt_ids, priority=priority,
                                       constraint=constraint)

    def step(self) -> list[TokenEvent]:
        """One scheduler step: at most one prefill forward (the next prompt chunks of one
        or more jobs) and one batched decode."""
        return self._scheduler.step()

    def cancel(self, job: Job) -> list[TokenEvent]:
        """Finish `job` at once (its sequence keeps the tokens whose K/V was written)."""
        return self._scheduler.cancel(job)

    def has_work(self) -> bool:
        return self._scheduler.has_work()

    @property
    def jobs(self) -> tuple[Job, ...]:
        return self._scheduler.jobs

    @property
    def grammar_vocabulary(self) -> GrammarVocabulary:
        """The vocabulary JSON schemas compile against, with its cache of compiled schemas
        (``grammar_vocabulary.compile(schema)`` ahead of a reply compiles it then). Built
        on first use from the tokenizer (a transformers one) and the model's vocabulary
        size and EOS ids, unless one was given."""
        if self._grammar_vocabulary is None:
            from engine.grammar import GrammarVocabulary

            self._grammar_vocabulary = GrammarVocabulary.from_tokenizer(
                self.tokenizer, vocab_size=self.runner.vocab_size,
                stop_token_ids=self.runner.eos_token_ids)
        return self._grammar_vocabulary

    # ---- cache -------------------------------------------------------------------------

    def check(self) -> None:
        """Verify the cache invariants; raises `EngineInvariantError` naming each problem."""
        self._cache.check()
        for job in self._scheduler.jobs:
            if job.seq.released:
                raise EngineInvariantError(f"job {job.job_id} runs on a released sequence")

    def stats(self) -> EngineStats:
        return self._cache.stats()

    # ---- SequenceHost ------------------------------------------------------------------

    def generate(self, seq: Sequence, params: SamplingParams, *,
                 prompt_ids: Iterable[int] = ()) -> Iterator[TokenEvent]:
        """Run a job on `seq` to completion, yielding its events; other active jobs advance
        in the same steps. Closing the iterator early cancels the job."""
        job = self.enqueue(seq, params, prompt_ids=prompt_ids)
        return self._follow(job)

    def on_release(self, seq: Sequence) -> None:
        self._scheduler.cancel_sequence(seq)

    def _follow(self, job: Job) -> Iterator[TokenEvent]:
        try:
            while True:
                yield from job.take_events()
                if job.done:
                    return
                self.step()
        finally:
            if not job.done:
                self.cancel(job)
