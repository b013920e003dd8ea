"""Benchmark our engine against transformers on the same model, inputs and process.

Not a test: prints figures and ours-vs-peer ratios.

(a) batch-1 greedy decode tokens/s (target >= 1.0x transformers ``generate``);
(b) a multi-turn conversation with two barge-in truncations: wall time and prompt tokens
    computed, ours vs transformers re-prefilling the whole history each turn and vs
    transformers keeping a DynamicCache (cropped at barge-in); target: ours computes only
    the new tokens;
(c) N concurrent sequences: aggregate tokens/s vs N sequential ``generate`` calls
    (target >= 3x).

    .venv/bin/python bench/bench_engine.py [--model DIR] [--device cuda --dtype bfloat16]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine import Engine, SamplingParams
from engine.chat_template import ChatTemplate, Message
from engine.loader import resolve_dtype, runner_from_hf_model

QUESTIONS = (
    "Hi! Can you tell me about the moon?",
    "Why does it have phases?",
    "How far away is it?",
    "What about the sun?",
    "Tell me something surprising about Mars.",
    "Which planet is the largest?",
    "How many moons does it have?",
    "Could people live there?",
    "What should I read to learn more?",
    "Thanks! Summarise our chat in one line.",
    "One more: what is a comet?",
    "And an asteroid?",
)


@dataclass(frozen=True)
class Run:
    name: str
    seconds: float
    generated: int
    prompt_computed: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds


def clock() -> float:
    return time.perf_counter()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def hf_generate(hf: Any, ids: list[int], count: int, device: str, *, exact: bool,
                cache: Any = None) -> list[int]:
    kwargs: dict[str, Any] = {"max_new_tokens": count, "do_sample": False,
                              "pad_token_id": hf.generation_config.eos_token_id}
    if exact:
        kwargs.update(min_new_tokens=count)
    if cache is not None:
        kwargs["cache"] = cache
    with torch.inference_mode():
        out = hf.generate(torch.tensor([ids], device=device), **kwargs)
    return [int(t) for t in out[0, len(ids):]]


def hf_decode(template: ChatTemplate, ids: list[int]) -> str:
    return str(template.tokenizer.decode(ids))


def crop(cache: Any, length: int) -> None:
    """DynamicCache.crop: negative counts in transformers 5, absolute length before."""
    extra = cache.get_seq_length() - length
    if extra <= 0:
        return
    try:
        cache.crop(-extra)
    except (ValueError, TypeError):
        cache.crop(length)


def bench_decode(engine: Engine, hf: Any, prompt: list[int], count: int, device: str
                 ) -> tuple[Run, Run]:
    params = SamplingParams(max_new_tokens=count, ignore_eos=True)
    with engine.sequence() as seq:  # warm-up
        list(seq.generate(SamplingParams(max_new_tokens=4), prompt_ids=prompt))
    hf_generate(hf, prompt, 4, device, exact=True)

    with engine.sequence() as seq:
        times: list[float] = []
        ours_ids = []
        for event in seq.generate(params, prompt_ids=prompt):
            sync(device)
            times.append(clock())
            ours_ids.append(event.token_id)
    ours = Run("ours", times[-1] - times[0], count - 1)
    start = clock()
    hf_generate(hf, prompt, 1, device, exact=True)
    sync(device)
    prefill = clock() - start
    start = clock()
    hf_ids = hf_generate(hf, prompt, count, device, exact=True)
    sync(device)
    theirs = Run("transformers", clock() - start - prefill, count - 1)
    # transformers' min_new_tokens masks EOS; ours (ignore_eos) may sample it: compare the
    # tokens before the first EOS.
    eos = set(engine.runner.eos_token_ids)
    cut = next((i for i, t in enumerate(ours_ids) if t in eos), count)
    print(f"  greedy tokens identical before the first EOS: "
          f"{ours_ids[:cut] == hf_ids[:cut]} ({cut} tokens)")
    return ours, theirs


def conversation_plan(turns: int, tokens: int) -> list[tuple[str, int | None]]:
    """(user text, barge-in cut) per turn: two barge-ins keep a third of the reply."""
    cuts = {turns // 3, (2 * turns) // 3}
    return [(QUESTIONS[i % len(QUESTIONS)], max(tokens // 3, 1) if i in cuts else None)
            for i in range(turns)]


def conversation_ours(engine: Engine, template: ChatTemplate, system: Message,
                      plan: list[tuple[str, int | None]], tokens: int, device: str) -> Run:
    params = SamplingParams(max_new_tokens=tokens, stop_token_ids=template.stop_token_ids,
                            end_of_turn=template.end_of_turn_ids)
    before = engine.stats().tokens_computed
    generated = new_prompt = prompt_computed = 0
    start = clock()
    with engine.sequence() as seq:
        seq.extend(template.message_ids([], system))
        messages: list[Message] = [system]
        for text, cut in plan:
            prompt = template.turn_ids(messages, text)
            reply_start = len(seq) + len(prompt)
            job = engine.enqueue(seq, params, prompt_ids=prompt)
            while not job.done:
                engine.step()
            assert job.result is not None
            kept = list(job.result.token_ids)
            generated += job.result.sampled_tokens
            new_prompt += len(prompt)
            prompt_computed += job.result.prompt.computed
            if cut is not None and cut < len(kept):  # barge-in: keep what was "heard"
                kept = kept[:cut]
                seq.truncate(reply_start + cut)
                seq.extend(template.end_of_turn_ids)
            messages += [{"role": "user", "content": text},
                         {"role": "assistant", "content": engine.tokenizer.decode(kept)}]
        sync(device)
    seconds = clock() - start
    engine.check()
    print(f"    ours: turn prompts computed {prompt_computed} of {new_prompt} new prompt "
          "tokens; the rest of the computed count closes turns (end-of-turn ids, the "
          "last sampled token)")
    return Run("ours", seconds, generated, engine.stats().tokens_computed - before)


def conversation_hf(hf: Any, template: ChatTemplate, system: Message,
                    plan: list[tuple[str, int | None]], tokens: int, device: str, *,
                    keep_cache: bool) -> Run:
    from transformers import DynamicCache

    eot = list(template.end_of_turn_ids)
    stops = set(template.stop_token_ids) | {hf.generation_config.eos_token_id}
    cache = DynamicCache() if keep_cache else None
    history = template.message_ids([], system)
    messages: list[Message] = [system]
    computed = generated = 0
    start = clock()
    for text, cut in plan:
        ids = history + template.turn_ids(messages, text)
        cached = cache.get_seq_length() if cache is not None else 0
        computed += len(ids) - cached
        out = hf_generate(hf, ids, tokens, device, exact=False, cache=cache)
        generated += len(out)
        kept = out[:-1] if out and out[-1] in stops else out
        if cut is not None and cut < len(kept):
            kept = kept[:cut]
        if cache is not None:
            crop(cache, len(ids) + len(kept))
        history = ids + kept + eot
        messages += [{"role": "user", "content": text},
                     {"role": "assistant", "content": hf_decode(template, kept)}]
    sync(device)
    name = "transformers+DynamicCache" if keep_cache else "transformers re-prefill"
    return Run(name, clock() - start, generated, computed)


def bench_concurrent(engine: Engine, hf: Any, prompts: list[list[int]], count: int,
                     device: str) -> tuple[Run, Run]:
    params = SamplingParams(max_new_tokens=count, ignore_eos=True)
    seqs = [engine.sequence() for _ in prompts]
    start = clock()
    jobs = [engine.enqueue(s, params, prompt_ids=p) for s, p in zip(seqs, prompts, strict=True)]
    while engine.has_work():
        engine.step()
    sync(device)
    ours = Run("ours", clock() - start, sum(j.result.sampled_tokens for j in jobs
                                            if j.result is not None))
    for seq in seqs:
        seq.release()
    engine.check()
    start = clock()
    total = sum(len(hf_generate(hf, p, count, device, exact=True)) for p in prompts)
    sync(device)
    return ours, Run("transformers sequential", clock() - start, total)


def best_of(repeat: int, run: Callable[[], tuple[Run, ...]]) -> tuple[Run, ...]:
    """Each side's fastest run over `repeat` rounds (noisy, shared machines)."""
    rounds = [run() for _ in range(repeat)]
    return tuple(min(side, key=lambda r: r.seconds) for side in zip(*rounds, strict=True))


def default_model() -> Path:
    from assistant.app.config import load_config
    from assistant.app.models import resolve_llm

    root = Path(__file__).resolve().parents[1]
    return resolve_llm(load_config(root / "config.yaml", env={}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="transformers model dir (default: "
                        "the packaged SmolLM2, converted)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--num-pages", type=int, default=2048)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--turn-tokens", type=int, default=24)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--concurrent-tokens", type=int, default=32)
    parser.add_argument("--only", default="abc", help="which parts to run, e.g. 'ac'")
    parser.add_argument("--repeat", type=int, default=2,
                        help="run each part this many times, report each side's best")
    args = parser.parse_args(argv)

    import transformers

    model_dir = args.model or default_model()
    dtype = resolve_dtype(args.dtype)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(model_dir), local_files_only=True, dtype=dtype).to(args.device).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir),
                                                           local_files_only=True)
    runner = runner_from_hf_model(hf, device=args.device, dtype=dtype,
                                  page_size=args.page_size, num_pages=args.num_pages,
                                  eos_token_ids=(hf.generation_config.eos_token_id,))
    max_batch = max(args.concurrent, 1)

    def fresh() -> Engine:
        """A new engine (empty prefix cache) on the same runner, so rounds do not reuse
        each other's pages."""
        return Engine(runner, tokenizer, max_batch=max_batch)

    template = ChatTemplate(tokenizer)
    template.verify()
    system: Message = {"role": "system", "content": "You are a helpful assistant."}
    print(f"model {model_dir.name}, device {args.device}, dtype {args.dtype}, "
          f"torch threads {torch.get_num_threads()}")

    repeat = max(args.repeat, 1)
    if "a" in args.only:
        prompt = template.render_ids([system, {"role": "user", "content": QUESTIONS[0]}],
                                     add_generation_prompt=True)
        ours, theirs = best_of(repeat, lambda: bench_decode(fresh(), hf, prompt,
                                                            args.decode_tokens, args.device))
        print(f"(a) batch-1 greedy decode: ours {ours.tokens_per_s:.1f} tok/s, "
              f"transformers {theirs.tokens_per_s:.1f} tok/s, "
              f"ratio {ours.tokens_per_s / theirs.tokens_per_s:.2f}x (target >= 1.0x)")
    if "b" in args.only:
        plan = conversation_plan(args.turns, args.turn_tokens)
        runs = best_of(repeat, lambda: (
            conversation_ours(fresh(), template, system, plan, args.turn_tokens, args.device),
            conversation_hf(hf, template, system, plan, args.turn_tokens, args.device,
                            keep_cache=False),
            conversation_hf(hf, template, system, plan, args.turn_tokens, args.device,
                            keep_cache=True)))
        print(f"(b) {args.turns}-turn conversation, 2 barge-ins, <= {args.turn_tokens} "
              "tokens per reply:")
        for run in runs:
            print(f"    {run.name:27s} {run.seconds:7.2f} s  prompt tokens computed "
                  f"{run.prompt_computed:6d}  generated {run.generated}")
        ours = runs[0]
        for peer in runs[1:]:
            print(f"    vs {peer.name}: wall time ratio {peer.seconds / ours.seconds:.2f}x, "
                  f"prompt tokens ratio "
                  f"{peer.prompt_computed / max(ours.prompt_computed, 1):.2f}x")
    if "c" in args.only:
        prompts = [template.render_ids([system, {"role": "user", "content": q}],
                                       add_generation_prompt=True)
                   for q in QUESTIONS[:args.concurrent]]
        ours, theirs = best_of(repeat, lambda: bench_concurrent(
            fresh(), hf, prompts, args.concurrent_tokens, args.device))
        print(f"(c) {args.concurrent} concurrent x {args.concurrent_tokens} tokens: ours "
              f"{ours.tokens_per_s:.1f} tok/s ({ours.seconds:.1f} s), sequential "
              f"transformers {theirs.tokens_per_s:.1f} tok/s ({theirs.seconds:.1f} s), "
              f"ratio {ours.tokens_per_s / theirs.tokens_per_s:.2f}x (target >= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
