"""GPU figures for `bench_engine.py --device cuda`: how close batch-1 decode comes to the
memory-bandwidth roofline, what a CUDA graph of the same step would take, and whether each
weight format's CUDA kernels compute what its CPU kernels do.

- `copy_bandwidth`: device-to-device copy, bytes read + written per second (the roofline's
  bandwidth, measured rather than taken from a datasheet);
- `decode_bytes`: what one batch-1 decode step must read at least: every projection's
  weight in its format (scales included), the output projection, the token's embedding
  row, and the K/V of `span` positions;
- `graph_step`: `engine.model.decode_one_token` at a fixed span, eager and replayed as one
  `torch.cuda.CUDAGraph` (fixed shapes, so no Python and no launch per op): the gap is
  the per-op overhead a static-shape runner would remove;
- `kernel_check`: teacher-forced logits of the same weights in the same format on CUDA and
  on CPU (different kernels over the same quantized values);
- `int8_kernels`: the two CUDA int8 paths per projection shape at one row;
- `new_spans`: batch-1 decode steps at key lengths the process has not seen yet, as every
  step of a growing conversation is, under the runner's attention backends or torch's own
  choice (see `engine.paged_runner.attention_backends_for`).

Random weights (`random_model`) decode exactly as fast as trained ones, so speed needs only
the model's config: what a machine that cannot hold the weights measures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from engine import model
from engine.paged_runner import PagedRunner
from engine.quantize import Int8Linear
from engine.runner import DecodeItem


def random_model(model_dir: Path, seed: int = 0) -> Any:
    """The model of `model_dir`'s config.json with transformers' random initialisation."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).float().eval()


def _timed(device: torch.device, fn: Callable[[], object], count: int) -> float:
    """Seconds per call of `fn`, by CUDA events around `count` calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(count):
        fn()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) / 1000 / count


def copy_bandwidth(device: torch.device, gib: float = 1.0) -> float:
    """Bytes per second of a device-to-device copy, read and write counted."""
    src = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    seconds = _timed(device, lambda: dst.copy_(src), 10)
    return 2 * src.numel() / seconds


def decode_bytes(runner: PagedRunner, span: int) -> int:
    """Bytes one batch-1 decode step reads at least (see the module's doc)."""
    w = runner.weights
    linears = [lin for layer in w.layers for lin in (layer.qkv, layer.o, layer.gate_up,
                                                     layer.down)]
    weights = sum(lin.nbytes() for lin in [*linears, w.lm_head])
    norms = sum(t.numel() * t.element_size() for layer in w.layers
                for t in (layer.attn_norm, layer.mlp_norm))
    embed_row = w.embed.shape[1] * w.embed.element_size()
    cfg = runner.config
    kv = 2 * cfg.num_layers * cfg.num_kv_heads * span * cfg.head_dim * runner.kv.k.element_size()
    return weights + norms + embed_row + kv


def graph_step(runner: PagedRunner, span: int, count: int = 200) -> tuple[float, float]:
    """Seconds per batch-1 decode step at `span` positions: eager, and replayed as one CUDA
    graph. The step reads the runner's last pages in place (as a fresh sequence's
    consecutive pages are read) and writes its token's K/V to the last of them."""
    device = runner.device
    size = runner.page_size
    first = runner.num_pages - -(-span // size)
    ids = torch.zeros(1, dtype=torch.long, device=device)
    positions = torch.full((1,), span - 1, dtype=torch.long, device=device)
    slots = torch.full((1,), first * size + span - 1, dtype=torch.long, device=device)
    # Nothing inside the capture may read a tensor back to the host: forget any gathered
    # copy (whose bookkeeping reads the write slots) and grow the RoPE tables beforehand.
    runner.kv.note_writes(range(runner.num_pages))
    runner.weights.rope.lookup(positions, span)

    def step() -> torch.Tensor:
        return model.decode_one_token(runner.config, runner.weights, runner.kv, ids,
                                      positions, slots, first, span, None, None)

    with torch.inference_mode(), runner.attention():
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream(device).wait_stream(side)
        eager = _timed(device, step, count)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        graph.replay()
        replayed = _timed(device, graph.replay, count)
    return eager, replayed


def kernel_check(device_runner: PagedRunner, cpu_runner: PagedRunner, ids: list[int]
                 ) -> tuple[float, float]:
    """Relative L2 difference of the two runners' teacher-forced logits over `ids`, and the
    share of positions whose top-1 token agrees. Each runner uses its last pages."""
    def logits(runner: PagedRunner) -> torch.Tensor:
        count = -(-len(ids) // runner.page_size)
        pages = list(range(runner.num_pages - count, runner.num_pages))
        return runner.prefill(pages, 0, ids, all_logits=True)

    ours, reference = logits(device_runner), logits(cpu_runner)
    rel = float((ours - reference).norm() / reference.norm())
    top1 = float((ours.argmax(-1) == reference.argmax(-1)).float().mean())
    return rel, top1


def int8_kernels(runner: PagedRunner, count: int = 500) -> list[str]:
    """Microseconds per one-row call of layer 0's int8 projections and the output
    projection, as the engine runs them on CUDA (the weight converted to the activations'
    dtype, then ``F.linear``, then the scales) and by ``aten._weight_int8pack_mm``."""
    device = runner.device
    layer = runner.weights.layers[0]
    named = [("qkv", layer.qkv), ("o", layer.o), ("gate_up", layer.gate_up),
             ("down", layer.down), ("lm_head", runner.weights.lm_head)]
    lines = []
    for name, lin in named:
        if not isinstance(lin, Int8Linear):
            continue
        x = torch.randn(1, lin.in_features, dtype=lin.scales.dtype, device=device)
        engine_path = _timed(device, lambda lin=lin, x=x: lin(x), count)
        try:
            packed = _timed(device, lambda lin=lin, x=x: torch.ops.aten._weight_int8pack_mm(
                x, lin.weight, lin.scales), count)
            kernel = f"{packed * 1e6:7.1f} us"
        except (RuntimeError, NotImplementedError) as exc:
            kernel = f"unavailable ({str(exc).splitlines()[0][:60]})"
        dense = lin.weight.to(lin.scales.dtype)
        bf16 = _timed(device, lambda dense=dense, x=x: F.linear(x, dense), count)
        lines.append(f"{name:8s} {lin.out_features:6d} x {lin.in_features:5d}: engine "
                     f"{engine_path * 1e6:7.1f} us, _weight_int8pack_mm {kernel}, "
                     f"bf16 F.linear {bf16 * 1e6:7.1f} us")
    return lines


def new_spans(runner: PagedRunner, start: int, steps: int = 16) -> float:
    """Seconds per batch-1 `PagedRunner.decode` step at spans start+1 .. start+steps, on
    consecutive pages at the end of the pool (read in place). The caller picks a `start`
    no earlier step of this process reached, and separate ranges for each measurement."""
    size = runner.page_size
    count = -(-(start + steps) // size)
    pages = list(range(runner.num_pages - count, runner.num_pages))
    began = time.perf_counter()
    for position in range(start, start + steps):
        runner.decode([DecodeItem(pages, position, 0)])
    return (time.perf_counter() - began) / steps


def graphs_vs_eager(runner: PagedRunner, prompt: list[int], steps: int = 64
                    ) -> tuple[float, float, float, int] | None:
    """Batch-1 `PagedRunner.decode` tokens/s, greedy, after `prompt` (on the pool's last
    pages): with the runner's CUDA graphs (`engine.graph_decode`) and with every step
    eager; the seconds of a step whose span bucket has no graph yet (its capture); and how
    many of the two runs' greedy tokens agree, position by position. None without
    graphs."""
    static = runner.static_decode
    if static is None:
        return None
    size = runner.page_size
    far = 5000  # a bucket no other step reaches
    pages = list(range(runner.num_pages - -(-(far + 1) // size), runner.num_pages))

    def rate(tokens: list[int]) -> float:
        token = int(runner.prefill(pages, 0, prompt)[-1].argmax())
        token = int(runner.decode([DecodeItem(pages, len(prompt), token)])[0].argmax())
        began = time.perf_counter()
        for position in range(len(prompt) + 1, len(prompt) + 1 + steps):
            token = int(runner.decode([DecodeItem(pages, position, token)])[0].argmax())
            tokens.append(token)
        return steps / (time.perf_counter() - began)

    graph_tokens: list[int] = []
    eager_tokens: list[int] = []
    with_graphs = rate(graph_tokens)
    runner.static_decode = None
    try:
        eager = rate(eager_tokens)
    finally:
        runner.static_decode = static
    began = time.perf_counter()
    runner.decode([DecodeItem(pages, far, 0)])
    capture = time.perf_counter() - began
    same = sum(a == b for a, b in zip(graph_tokens, eager_tokens, strict=True))
    return with_graphs, eager, capture, same
