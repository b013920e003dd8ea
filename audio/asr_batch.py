"""Whisper decodes of several callers (daemon sessions) batched into shared CTranslate2 calls.

A decode is faster-whisper's own code (`audio.asr.Transcriber.transcribe`: the silence
gate, the cut window and its guard, timestamps, word timings and probabilities) run on
the caller's thread. What is shared is the model's three heavy calls -- ``encode``,
``generate`` and ``align`` of the CTranslate2 ``Whisper`` -- which go through one
batcher thread: calls that are pending together and fit one call are run as one batch
and each caller gets its own row back.

Every result is the one the single path gives for the same audio: CTranslate2 computes
each row of a batch as it computes it alone (bit-identical encoder outputs, tokens,
scores and no-speech probabilities), except ``align``: its word probabilities in a
batch of texts differ from alone by rounding (up to 3.8e-4 seen on an AVX-512 AMD
EPYC; the word times did not move): ``tests/audio/test_asr_batch_model.py``.
What a batch needs in common:

- ``encode``: the same feature shape (the cut window makes short utterances alike);
  off by default (`BatchingTranscriber.batch_encode`): on a small CPU the encoder's
  matrices are already large, and a batch of them was no faster per row;
- ``generate``: the same encoder output shape, the same options, and the
  start-of-transcript token at the same place in every prompt (CTranslate2's rule). The
  prompts may differ, and so may ``max_length``: greedy decoding (one beam, no
  sampling) of a row does not depend on the limit until the row reaches it, so the
  batch runs to the largest limit and a row that came near its own is decoded again
  alone, with its own limit;
- ``align`` (word timings): the same encoder output shape and filter width; one text
  per encoder row.

A caller inside `BatchingTranscriber.transcribe` may be about to make a call (it is
computing features, or reading the previous call's result): the batcher waits for such
callers, at most ``window_ms`` after the first pending call, so that calls made at
nearly the same time share one batch; with one caller it never waits.
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from audio.asr import SAMPLE_RATE, ASROptions, Transcriber, Transcript
from audio.whisper_window import WindowGuard

__all__ = ["BatcherClosed", "BatchStats", "CallBatcher", "BatchingTranscriber"]

RunBatch = Callable[[Hashable, list[Any]], Sequence[Any]]
"""``run(key, items) -> results``: one result per item, in order."""


class BatcherClosed(RuntimeError):
    """The batcher was closed before (or while) the call waited."""


@dataclass
class _Call:
    key: Hashable
    item: Any
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


@dataclass(frozen=True)
class BatchStats:
    calls: int
    """Calls run (each caller's call counts once)."""
    batches: int
    """Batches run: ``calls / batches`` is the mean batch size."""
    largest: int
    """The largest batch run."""


class CallBatcher:
    """One thread that runs the calls of many threads, in batches of calls with the same key.

    ``call(key, item)`` blocks its thread until ``run(key, [items...])`` has run with
    its item in the batch, and returns its own result (or raises the batch's error).
    The oldest pending call's key goes first; its batch takes every pending call with
    that key, up to ``max_batch``.
    """

    def __init__(self, run: RunBatch, *, max_batch: int = 8, window_ms: float = 10.0,
                 name: str = "asr-batch") -> None:
        if max_batch < 1 or window_ms < 0:
            raise ValueError("max_batch must be >= 1 and window_ms >= 0")
        self._run = run
        self.max_batch = max_batch
        self.window_s = window_ms / 1000.0
        self._cond = threading.Condition()
        self._pending: list[_Call] = []
        self._active = 0
        self._closed = False
        self._calls = self._batches = self._largest = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # -- callers -----------------------------------------------------------------------
    def call(self, key: Hashable, item: Any) -> Any:
        """Run ``item`` in a batch of its key (blocks); its result, or the batch's error."""
        c = _Call(key, item)
        with self._cond:
            if self._closed:
                raise BatcherClosed("the ASR batcher is closed")
            self._pending.append(c)
            self._cond.notify_all()
        c.done.wait()
        if c.error is not None:
            raise c.error
        return c.result

    @contextmanager
    def caller(self) -> Iterator[None]:
        """While inside, this thread counts as one that may call soon: a batch waits for
        it (at most ``window_ms``)."""
        with self._cond:
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def stats(self) -> BatchStats:
        with self._cond:
            return BatchStats(self._calls, self._batches, self._largest)

    def close(self) -> None:
        """Stop the thread; pending and later calls raise `BatcherClosed`. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # -- the batcher thread --------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                results = list(self._run(batch[0].key, [c.item for c in batch]))
                if len(results) != len(batch):
                    raise RuntimeError(f"a batch of {len(batch)} calls gave {len(results)} results")
            except BaseException as exc:  # every caller of the batch sees its failure
                for c in batch:
                    c.error = exc
            else:
                for c, r in zip(batch, results, strict=True):
                    c.result = r
            with self._cond:
                self._calls += len(batch)
                self._batches += 1
                self._largest = max(self._largest, len(batch))
            for c in batch:
                c.done.set()

    def _next_batch(self) -> list[_Call] | None:
        with self._cond:
            while not self._closed and not self._pending:
                self._cond.wait()
            deadline = time.monotonic() + self.window_s
            while not self._closed and len(self._pending) < min(self._active, self.max_batch):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if self._closed:
                for c in self._pending:
                    c.error = BatcherClosed("the ASR batcher was closed")
                    c.done.set()
                self._pending.clear()
                return None
            key = self._pending[0].key
            batch = [c for c in self._pending if c.key == key][: self.max_batch]
            taken = {id(c) for c in batch}
            self._pending = [c for c in self._pending if id(c) not in taken]
            return batch


# -- CTranslate2 Whisper calls, batched ---------------------------------------------------

_GEN_SLACK = 2
"""A row that ends this close to its own ``max_length`` (tokens, counting the prompt) is
decoded again alone: it may have been cut there."""


class _BatchedModel:
    """The CTranslate2 ``Whisper`` as faster-whisper calls it, its heavy calls batched."""

    def __init__(self, model: Any, batcher_call: Callable[[Hashable, Any], Any],
                 batch_encode: bool, sot: int) -> None:
        self._model = model
        self._sot = sot
        self._call = batcher_call
        self._batch_encode = batch_encode
        self._solo = itertools.count()

    def __getattr__(self, name: str) -> Any:  # device, is_multilingual, ...
        return getattr(self._model, name)

    def encode(self, features: Any, to_cpu: bool = False) -> Any:
        arr = np.asarray(features)
        key = ("encode", arr.shape) if self._batch_encode else ("encode", "solo", next(self._solo))
        return self._call(key, arr)

    def generate(self, encoder_output: Any, prompts: list[list[int]], **kwargs: Any) -> Any:
        enc = np.asarray(encoder_output)
        greedy = kwargs.get("beam_size", 1) == 1 and not kwargs.get("sampling_temperature")
        if enc.shape[0] != 1 or len(prompts) != 1 or not greedy:
            key: Hashable = ("generate", "solo", next(self._solo))
        else:
            options = {k: v for k, v in kwargs.items() if k != "max_length"}
            key = ("generate", enc.shape, _sot_at(prompts[0], self._sot), len(prompts[0]), _frozen(options))
        return [self._call(key, (enc, prompts[0], kwargs))]

    def align(self, encoder_output: Any, start_sequence: list[int], text_tokens: list[list[int]],
              num_frames: int | list[int], **kwargs: Any) -> Any:
        enc = np.asarray(encoder_output)
        frames = [num_frames] if isinstance(num_frames, int) else list(num_frames)
        if enc.shape[0] != 1 or len(text_tokens) != 1 or len(frames) != 1:
            key: Hashable = ("align", "solo", next(self._solo))
        else:
            key = ("align", enc.shape, tuple(start_sequence), _frozen(kwargs))
        return [self._call(key, (enc, list(start_sequence), text_tokens, frames, kwargs))]

    # -- run on the batcher thread ---------------------------------------------------------
    def run(self, key: Hashable, items: list[Any]) -> list[Any]:
        kind = key[0] if isinstance(key, tuple) else key
        if kind == "encode":
            return self._run_encode(items)
        if kind == "generate":
            return self._run_generate(items)
        if kind == "align":
            return self._run_align(items)
        raise ValueError(f"unknown batched call {key!r}")

    def _run_encode(self, items: list[npt.NDArray[np.float32]]) -> list[Any]:
        import ctranslate2

        out = np.asarray(self._model.encode(_storage(np.concatenate(items)), to_cpu=True))
        rows, start = [], 0
        for arr in items:
            n = arr.shape[0]
            rows.append(ctranslate2.StorageView.from_array(np.ascontiguousarray(out[start:start + n])))
            start += n
        return rows

    def _run_generate(self, items: list[Any]) -> list[Any]:
        encs = [enc for enc, _, _ in items]
        prompts = [prompt for _, prompt, _ in items]
        limits = [kwargs.get("max_length", 448) for _, _, kwargs in items]
        kwargs = dict(items[0][2])
        kwargs["max_length"] = max(limits)
        results = self._model.generate(_storage(np.concatenate(encs)), prompts, **kwargs)
        out = []
        for (enc, prompt, own), limit, result in zip(items, limits, results, strict=True):
            if len(items) > 1 and limit < kwargs["max_length"] \
                    and len(prompt) + len(result.sequences_ids[0]) + _GEN_SLACK >= limit:
                result = self._model.generate(_storage(enc), [prompt], **own)[0]
            out.append(result)
        return out

    def _run_align(self, items: list[Any]) -> list[Any]:
        encs = [it[0] for it in items]
        _, start, _, _, kwargs = items[0]
        texts = [it[2][0] for it in items]
        frames = [it[3][0] for it in items]
        return list(self._model.align(_storage(np.concatenate(encs)), start, texts, frames,
                                      **kwargs))


def _storage(arr: npt.NDArray[np.float32]) -> Any:
    import ctranslate2

    return ctranslate2.StorageView.from_array(np.ascontiguousarray(arr))


def _sot_at(prompt: Sequence[int], sot: int) -> int:
    """Where the start-of-transcript token is in ``prompt`` (-1: not there)."""
    return prompt.index(sot) if sot in prompt else -1


def _frozen(options: dict[str, Any]) -> Hashable:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()))


# -- the Transcriber front ----------------------------------------------------------------


class BatchingTranscriber:
    """The :class:`audio.asr.Transcriber` interface over one loaded model, for many threads
    at once: each thread decodes with its own view of the model (its own window state
    and lock), and the views' CTranslate2 calls are batched (see the module).

    ``batch_encode``: batch ``encode`` too (a win on a GPU; not on a small CPU).
    :meth:`close` stops the batcher thread (later decodes raise `BatcherClosed`).
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, transcriber: Transcriber, *, max_batch: int = 8, window_ms: float = 10.0,
                 batch_encode: bool = False) -> None:
        self.inner = transcriber
        self.model_dir = transcriber.model_dir
        self.options: ASROptions = transcriber.options
        model = transcriber.model
        sot = model.hf_tokenizer.token_to_id("<|startoftranscript|>")
        self._batched = _BatchedModel(model.model, self._call, batch_encode, sot)
        self._batcher = CallBatcher(self._batched.run, max_batch=max_batch, window_ms=window_ms)
        self._model = model
        self._local = threading.local()
        self._counts = threading.Lock()
        self._fallbacks = self._dropped = 0

    def _call(self, key: Hashable, item: Any) -> Any:
        return self._batcher.call(key, item)

    @property
    def fallbacks(self) -> int:
        """Cut-window decodes decoded again on the full window (all threads)."""
        return self.inner.fallbacks + self._fallbacks

    @property
    def dropped(self) -> int:
        """Cut-window decodes dropped as not trusted (all threads)."""
        return self.inner.dropped + self._dropped

    def stats(self) -> BatchStats:
        return self._batcher.stats()

    def speech_regions(self, pcm16k: npt.NDArray[np.float32]) -> list[tuple[int, int]]:
        return self.inner.speech_regions(pcm16k)

    def has_speech(self, pcm16k: npt.ArrayLike) -> bool:
        return self.inner.has_speech(pcm16k)

    def transcribe(self, pcm16k: npt.ArrayLike, *, word_timestamps: bool | None = None,
                   initial_prompt: str | None = None, check_speech: bool = True,
                   guard: WindowGuard | None = None) -> Transcript:
        """`audio.asr.Transcriber.transcribe`, its model calls batched with other threads'."""
        view = self._view()
        before = (view.fallbacks, view.dropped)
        with self._batcher.caller():
            heard = view.transcribe(pcm16k, word_timestamps=word_timestamps,
                                    initial_prompt=initial_prompt, check_speech=check_speech,
                                    guard=guard)
        with self._counts:
            self._fallbacks += view.fallbacks - before[0]
            self._dropped += view.dropped - before[1]
        return heard

    def close(self) -> None:
        """Stop the batcher thread (idempotent); decodes in flight raise `BatcherClosed`."""
        self._batcher.close()

    def _view(self) -> Transcriber:
        """This thread's transcriber: a shallow copy of the model (its own cut-window
        state) whose CTranslate2 calls go through the batcher."""
        view: Transcriber | None = getattr(self._local, "view", None)
        if view is None:
            model = copy.copy(self._model)
            model.model = self._batched
            view = self._local.view = Transcriber.from_model(model, self.options)
        return view
