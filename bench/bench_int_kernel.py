"""ONNX Runtime's int4 ``MatMulNBits`` at one row against the engine's decode kernels.

Not a test: prints Markdown tables. Issue #47 item 3 asks whether an integer CPU kernel
from a well-kept library beats what the engine's batch-1 decode runs today. ONNX
Runtime's contrib op ``com.microsoft.MatMulNBits`` (bits 4, blocks of 32 inputs, one
uint8 zero point per block) at ``accuracy_level`` 0 dequantizes the weight to float32 in
MLAS; at level 4 it quantizes each block of 32 activations to int8 and runs MLAS's integer
kernels (AVX2 ``maddubs``/``madd``, AVX512-VNNI or AVX-VNNI ``dpbusd``, picked by CPUID
when ONNX Runtime loads: ``--as-cpu avx2`` masks CPUID to get an AVX2 CPU's path on a
newer one, `bench/cpu_mask.py`).

Per projection of one layer (fused QKV, o, fused gate/up, down) and the output projection
(int8 ``MatMulNBits`` as the engine keeps it int8, and int4), at M rows and T threads:

- ORT L0, ORT L4: one single-node session each, run through an IOBinding bound once to
  static buffers (the op's time plus ORT's per-run overhead); L0 is skipped for the int8
  output projection (MLAS has no 8-bit float path: a trial took ~0.6 s a call);
- ORT L4 as a Linear, f32 / bf16: what an engine format would pay per call: torch
  activations (float32, or bfloat16 as the int4 format computes) copied into the bound
  buffer, the run, the output copied out in the same dtype;
- ORT L4 exact: the weight a format would have to keep, the engine's own int4 values
  (llama.cpp's Q4_1, exactly), run by level 4 without zero points and each block's min
  term added in torch (`matmul_nbits_exact`); ORT L0 / L4 above run ORT's re-quantization
  of those values, which moves each block by up to half a step (their errors below);
- fbgemm fp16: ``engine.quantize.Fp16PackedLinear`` (the ``bf16`` format on CPU, and the
  default format on AVX2 CPUs: `engine.weight_formats.auto_weight_format`);
- fp32 / bf16 ``F.linear``;
- engine: the `Linear` the engine builds for this projection (`weights_from_state_dict`,
  `--weights`, ``auto`` by default), in its activation dtype; the kernels it ran, as
  torch.profiler saw them, are listed first.

Then the 120 layer projections of a whole batch-1 decode step, called back to back as the
engine calls them (each weight its own, so from L3; code warm): the engine's linears,
fbgemm fp16, and ORT L4 bare, as a Linear and exact. This is the figure to decide on: one
projection's session, called again and again, keeps its weight and its session state
warm, which flatters ORT more than torch (ORT's per-call cost over 120 sessions in turn is
~2-3x that of one layer's 4 sessions repeated; the int4 kernel's ~1.4x).

Calls are interleaved (each round runs every candidate once, in a random order) and each
figure is the median of the per-call times. One round reads more than an L2 of weights
(fp32 + bf16 + fp16 + int4 copies), so each call mostly finds its weight in L3, as a decode
step does; ``--flush-mib`` also reads a buffer before every call (which evicts code and
ORT's and torch's own data too: pessimistic). Relative errors are ``||y - y_ref|| /
||y_ref||`` over real inputs of the layer (``--error-rows`` prompt positions, each called
at one row), against the checkpoint's weight in float64. On a machine shared with other
work, two-thread figures suffer most (an OpenMP barrier waits for a descheduled thread):
run it more than once.

    .venv/bin/python bench/bench_int_kernel.py [--threads 1,2] [--rows 1,8] [--layer 15]
        [--projections qkv,o,gate_up,down,lm_head,lm_head_q4] [--seconds 2] [--flush-mib 0]
        [--model DIR | --random-weights DIR] [--weights auto] [--no-step]
    # as an AVX2 CPU runs it, ORT's MLAS included (bench/cpu_mask.py; the engine's default
    # there is the bf16 format, i.e. fbgemm fp16):
    .venv/bin/python bench/bench_int_kernel.py --as-cpu avx2
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import onnxruntime as ort
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi import _pybind_state as ort_c

from engine.model_config import ModelConfig
from engine.model_weights import ModelWeights, fused_linears, weights_from_state_dict
from engine.quality import fixed_text
from engine.quantize import Fp16PackedLinear, Linear
from engine.weight_formats import compute_dtype_for, dense_copy_for, resolve_weight_format
from engine.weight_quant import quantize_linear

import cpu_mask  # isort: skip (bench/, beside this script)
from results import add_no_write, capture, machine, write_results  # isort: skip (bench/)

BLOCK = 32
"""Inputs per MatMulNBits block (the engine's `INT4_GROUP`)."""
CANDIDATES = ("ort0", "ort4", "ort4_f32", "ort4_bf16", "ort4_exact", "fp16", "fp32", "bf16",
              "engine")


@dataclass(frozen=True)
class Projection:
    """One weight, the activations that reach it and the engine's linear for it."""

    name: str
    """``qkv``, ``o``, ``gate_up``, ``down``, ``lm_head`` (ORT int8) or ``lm_head_q4``."""
    weight: torch.Tensor
    """float32 ``[out, in]``, as the checkpoint holds it (fused as the engine fuses)."""
    inputs: torch.Tensor
    """float32 ``[rows, in]``: the projection's inputs at consecutive prompt positions."""
    engine: Linear
    engine_dtype: torch.dtype
    """The dtype the engine feeds `engine` at few rows."""
    bits: int
    """MatMulNBits' weight bits for this projection."""


@dataclass(frozen=True)
class Timing:
    projection: str
    shape: str
    rows: int
    threads: int
    micros: dict[str, float]
    """Median microseconds per call, by candidate (`CANDIDATES`)."""
    calls: int


# ---- ONNX Runtime --------------------------------------------------------------------------


def matmul_nbits_model(weight: np.ndarray, bits: int, level: int) -> bytes:
    """A one-node model ``Y = A @ W^T`` with `weight` (float32 ``[N, K]``) quantized by ORT's
    own block quantizer (asymmetric, uint8 zero points) in blocks of `BLOCK`."""
    n, k = weight.shape
    blocks = -(-k // BLOCK)
    packed = np.zeros((n, blocks, BLOCK * bits // 8), np.uint8)
    scales = np.zeros((n, blocks), np.float32)
    per_byte = 8 // bits
    zero_points = np.zeros((n, -(-blocks // per_byte)), np.uint8)
    quantize = ort_c.quantize_matmul_4bits if bits == 4 else ort_c.quantize_matmul_8bits
    quantize(packed, np.ascontiguousarray(weight.T), scales, zero_points, BLOCK, n, k, False)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zero_points"], ["Y"],
                            domain="com.microsoft", K=k, N=n, bits=bits, block_size=BLOCK,
                            accuracy_level=level)
    graph = helper.make_graph(
        [node], "matmul_nbits",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        [numpy_helper.from_array(packed, "B"),
         numpy_helper.from_array(scales.reshape(-1), "scales"),
         numpy_helper.from_array(zero_points.reshape(-1), "zero_points")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return bytes(model.SerializeToString())


def matmul_nbits_exact(weight: np.ndarray) -> tuple[bytes, torch.Tensor]:
    """The engine's own int4 values of `weight` (`quantize_linear`: llama.cpp's Q4_1, ``w =
    q * scale + min`` per block of 32) as a one-node model, and the rest of each weight.

    MatMulNBits' zero points are 4-bit integers, or floats it does not run at level 4 (it
    dequantizes the weight on every call: ~1.7 ms for the fused gate/up); a block's min is
    rarely a whole number of steps. So the node runs without zero points, ``(q - 8) *
    scale``, and what it leaves out, ``(8 * scale + min)`` per (block, output), multiplies
    the sum of the block's inputs: `OrtExactCall` adds ``block_sums(x) @ rest``. Re-quantizing
    the model's already-Q4_1 weights with ORT's own quantizer (`matmul_nbits_model`) moves
    every block by up to half a step instead."""
    tensors = quantize_linear(torch.from_numpy(weight), "int4")
    assert tensors is not None and "nibbles" in tensors
    n, k = weight.shape
    blocks = k // BLOCK
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=BLOCK, accuracy_level=4)
    graph = helper.make_graph(
        [node], "matmul_nbits_exact",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        [numpy_helper.from_array(tensors["nibbles"].numpy().reshape(n, blocks, BLOCK // 2), "B"),
         numpy_helper.from_array(tensors["scale"].t().contiguous().numpy().reshape(-1),
                                 "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    rest = (8 * tensors["scale"] + tensors["min"]).contiguous()  # [blocks, N]
    return bytes(model.SerializeToString()), rest


def ort_session(model: bytes, threads: int, spin: bool) -> ort.InferenceSession:
    """A CPU session of `threads` intra-op threads, sequential, spinning if `spin`."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


class OrtCall:
    """A session bound once to static buffers (rows fixed): `run` is the raw call (the
    public ``run_with_iobinding`` adds tens of us of Python checks), `linear` the whole
    torch-in, torch-out step an engine format would take: the input copied into the bound
    buffer (converted if not float32), the output copied out in the input's dtype."""

    def __init__(self, session: ort.InferenceSession, rows: int, k: int, n: int) -> None:
        self.x = torch.zeros(rows, k)
        self.y = torch.zeros(rows, n)
        binding = session.io_binding()
        binding.bind_input("A", "cpu", 0, np.float32, [rows, k], self.x.data_ptr())
        binding.bind_output("Y", "cpu", 0, np.float32, [rows, n], self.y.data_ptr())
        self._binding = binding  # keeps the C binding alive
        self._call = (session._sess.run_with_iobinding, binding._iobinding, ort.RunOptions())

    def run(self) -> None:
        run, binding, options = self._call
        run(binding, options)

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        self.x.copy_(x)
        self.run()
        return self.y.to(x.dtype, copy=True)


class OrtExactCall(OrtCall):
    """`OrtCall` of a `matmul_nbits_exact` model: its `linear` adds each block's min term."""

    def __init__(self, session: ort.InferenceSession, rows: int, rest: torch.Tensor) -> None:
        blocks, n = rest.shape
        super().__init__(session, rows, blocks * BLOCK, n)
        self.rest = rest

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        y = super().linear(x)
        sums = x.view(x.shape[0], self.rest.shape[0], BLOCK).sum(-1, dtype=torch.float32)
        return y.addmm_(sums.to(y.dtype), self.rest.to(y.dtype))  # no copy in float32


def mlas_qnbit_path(flags: set[str]) -> str:
    """The MLAS ``QNBitGemmDispatch`` table this CPU gets (MLAS's platform.cpp picks it by
    CPUID: AVX512-VNNI over AVX512 over AVX-VNNI over AVX2)."""
    if {"avx512f", "avx512bw", "avx512_vnni"} <= flags:
        return "Avx512vnni (dpbusd on zmm)"
    if {"avx512f", "avx512bw"} <= flags:
        return "Avx512 (maddubs/madd on zmm)"
    if "avx_vnni" in flags:
        return "Avx2vnni (vpdpbusd on ymm)"
    return "Avx2 (maddubs/madd on ymm)" if "avx2" in flags else "none (level 4 falls back)"


# ---- weights and activations ---------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """The model's fused projections, the engine's linears for them and real inputs."""

    weights: dict[str, torch.Tensor]
    """float32 ``[out, in]`` by `engine.model_weights.fused_linears` name."""
    built: ModelWeights
    """The engine's weights in its format (`--weights`)."""
    inputs: dict[str, torch.Tensor]
    """float32 ``[rows, in]`` by projection kind (``qkv``... ``lm_head``): the inputs of
    layer `--layer`'s projections (and the output projection's) at consecutive positions."""
    source: str

    def engine(self, name: str) -> Linear:
        """The engine's `Linear` for fused projection `name`."""
        if name == "lm_head":
            return self.built.lm_head
        _, index, kind = name.split(".")
        return cast(Linear, getattr(self.built.layers[int(index)], kind))

    def engine_dtype(self) -> torch.dtype:
        """The dtype the engine feeds its linears at one row."""
        return self.built.activation_dtype(1)


def default_model_dir() -> Path:
    """The packaged SmolLM2 as the assistant converted it (``assistant models``)."""
    found = sorted((Path.home() / ".cache" / "assistant").glob("SmolLM2-*/config.json"))
    if not found:
        raise SystemExit("no converted model found: run `assistant models` once, or pass --model")
    return found[0].parent


def load_checkpoint(args: argparse.Namespace) -> Checkpoint:
    """The model, its inputs over `args.error_rows` positions of
    `engine.quality.fixed_text` (position 0 left out), and the engine's weights built from
    it as the loader builds them (`weights_from_state_dict`)."""
    import transformers

    model_dir = args.random_weights or args.model or default_model_dir()
    hf_config = transformers.AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    if args.random_weights:
        torch.manual_seed(0)
        hf = transformers.AutoModelForCausalLM.from_config(hf_config).float().eval()
    else:
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            str(model_dir), local_files_only=True, dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    layer = hf.model.layers[args.layer]
    taps = {"qkv": layer.self_attn.q_proj, "o": layer.self_attn.o_proj,
            "gate_up": layer.mlp.gate_proj, "down": layer.mlp.down_proj, "lm_head": hf.lm_head}
    seen: dict[str, torch.Tensor] = {}
    hooks = [module.register_forward_hook(
        lambda _m, inp, _out, kind=kind: seen.__setitem__(kind, inp[0][0, 1:].float().clone()))
        for kind, module in taps.items()]
    ids = tokenizer(fixed_text(4), return_tensors="pt").input_ids[:, : args.error_rows + 1]
    try:
        with torch.inference_mode():
            hf(ids)
    finally:
        for hook in hooks:
            hook.remove()

    cfg = ModelConfig.from_hf(hf.config)
    state = dict(hf.state_dict())
    fmt = resolve_weight_format(args.weights, "cpu")
    dtype = compute_dtype_for(fmt, "cpu")
    built = weights_from_state_dict(cfg, state, device="cpu", dtype=dtype, fmt=fmt,
                                    dense=dense_copy_for(args.dense_prefill, "cpu"))
    weights = {name: w.float().contiguous() for name, w, _ in fused_linears(cfg, state)}
    source = (f"{'random weights, config of ' if args.random_weights else ''}{model_dir.name}, "
              f"layer {args.layer}; activations: {len(ids[0]) - 1} positions of fixed_text; "
              f"engine format {fmt} (--weights {args.weights}), compute dtype {dtype}")
    return Checkpoint(weights, built, seen, source)


def projection(ckpt: Checkpoint, name: str, layer: int) -> Projection:
    """Projection `name` (``qkv``... ``lm_head``, ``lm_head_q4``) of layer `layer`."""
    kind = "lm_head" if name.startswith("lm_head") else name
    fused = "lm_head" if kind == "lm_head" else f"layers.{layer}.{kind}"
    return Projection(name, ckpt.weights[fused], ckpt.inputs[kind], ckpt.engine(fused),
                      ckpt.engine_dtype(), 8 if name == "lm_head" else 4)


def engine_kernels(linear: Linear, x: torch.Tensor) -> str:
    """The matmul-like ops one call of `linear` on `x` ran, by torch.profiler."""
    with torch.inference_mode(), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        linear(x)
    names = [e.name for e in prof.events()
             if any(s in e.name for s in ("mm", "linear", "quantized::", "matmul"))]
    return ", ".join(f"`{n}`" for n in dict.fromkeys(names)) or "?"


# ---- measuring -------------------------------------------------------------------------------


def interleaved(candidates: Mapping[str, Callable[[], object]], seconds: float, max_calls: int,
                flush: Callable[[], None]) -> tuple[dict[str, float], int]:
    """Median microseconds per call of each candidate, calls interleaved in rounds of one
    call each, in a new random order every round (a fixed cyclic order would always run a
    candidate after the same one: after a call of the same session, its weight is in
    cache), `flush` before each; as many rounds as fit in `seconds` (15 at least)."""
    names = list(candidates)
    times: dict[str, list[float]] = {n: [] for n in names}
    shuffler = random.Random(0)

    def one_round(i: int) -> None:
        for name in shuffler.sample(names, len(names)):
            flush()
            start = time.perf_counter()
            candidates[name]()
            times[name].append(time.perf_counter() - start)

    with torch.inference_mode():
        for i in range(5):
            one_round(i)
        started = time.perf_counter()
        one_round(0)
        per_round = time.perf_counter() - started
        times = {n: [] for n in names}
        calls = max(15, min(max_calls, int(seconds / max(per_round, 1e-9))))
        for i in range(calls):
            one_round(i)
    return {n: statistics.median(t) * 1e6 for n, t in times.items()}, calls


def rel_error(fn: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor,
              weight: torch.Tensor) -> float:
    """``||y - x W^T|| / ||x W^T||`` over `inputs`, each row through `fn` alone."""
    with torch.inference_mode():
        y = torch.cat([fn(row[None]).double() for row in inputs])
        ref = inputs.double() @ weight.double().t()
    return float((y - ref).norm() / ref.norm())


def measure(projection: Projection, rows: int, threads: int, args: argparse.Namespace,
            flush: Callable[[], None]) -> tuple[Timing, dict[str, float] | None]:
    torch.set_num_threads(threads)
    w = projection.weight
    n, k = w.shape
    x = projection.inputs[:rows]
    x_engine = x.to(projection.engine_dtype)
    w_np = w.numpy()
    # One session per ORT candidate, each with its own copy of the weight: candidates that
    # shared one would find it in cache after each other.
    variants = {"ort0": 0, "ort4": 4, "ort4_f32": 4, "ort4_bf16": 4}
    if projection.bits == 8:
        del variants["ort0"]
    models = {level: matmul_nbits_model(w_np, projection.bits, level)
              for level in set(variants.values())}
    orts = {name: OrtCall(ort_session(models[level], threads, args.ort_spin), rows, k, n)
            for name, level in variants.items()}
    for call in orts.values():
        call.x.copy_(x)
    exact = None
    if projection.bits == 4:
        model, rest = matmul_nbits_exact(w_np)
        exact = OrtExactCall(ort_session(model, threads, args.ort_spin), rows, rest)
    fp16 = Fp16PackedLinear.build(w, None)
    w_bf16 = w.to(torch.bfloat16)
    x_bf16 = x.to(torch.bfloat16)
    candidates: dict[str, Callable[[], object]] = {
        "ort4": orts["ort4"].run,
        "ort4_f32": lambda: orts["ort4_f32"].linear(x),
        "ort4_bf16": lambda: orts["ort4_bf16"].linear(x_bf16),
        "fp16": lambda: fp16(x),
        "fp32": lambda: F.linear(x, w),
        "bf16": lambda: F.linear(x_bf16, w_bf16),
        "engine": lambda: projection.engine(x_engine),
    }
    if "ort0" in orts:
        candidates["ort0"] = orts["ort0"].run
    if exact is not None:
        candidates["ort4_exact"] = lambda: exact.linear(x)
    micros, calls = interleaved(candidates, args.seconds, args.calls, flush)
    errors = None
    if rows == 1:
        dtype = projection.engine_dtype
        errors = {
            "ort4": rel_error(orts["ort4"].linear, projection.inputs, w),
            "engine": rel_error(lambda r: projection.engine(r.to(dtype)), projection.inputs, w),
            "fp16": rel_error(fp16, projection.inputs, w),
        }
        if exact is not None:
            errors["ort4_exact"] = rel_error(exact.linear, projection.inputs, w)
        if "ort0" in orts:
            errors["ort0"] = rel_error(orts["ort0"].linear, projection.inputs, w)
            with torch.inference_mode():
                y0 = torch.cat([orts["ort0"].linear(r[None]) for r in projection.inputs])
                y4 = torch.cat([orts["ort4"].linear(r[None]) for r in projection.inputs])
            errors["ort4_vs_ort0"] = float((y4 - y0).norm() / y0.norm())
    return Timing(projection.name, f"{k}->{n}", rows, threads, micros, calls), errors


def decode_step(ckpt: Checkpoint, threads: int, args: argparse.Namespace) -> dict[str, float]:
    """Median milliseconds for the layer projections of one batch-1 decode step (every
    layer's qkv, o, gate_up, down in turn, each weight its own), by candidate: the
    engine's linears, fbgemm float16 (the ``bf16`` format on CPU), ORT L4's bare runs
    (inputs bound once: a bound no copying can reach), and ORT L4 as a Linear with float32
    and with bfloat16 activations. Called back to back as a decode step calls them, their
    code stays warm and their weights come from L3."""
    torch.set_num_threads(threads)
    names = [n for n in ckpt.weights if n != "lm_head"]
    kind = {n: n.split(".")[-1] for n in names}
    x32 = {k: x[:1] for k, x in ckpt.inputs.items()}
    x16 = {k: x.to(torch.bfloat16) for k, x in x32.items()}
    x_engine = {k: x.to(ckpt.engine_dtype()) for k, x in x32.items()}
    engine = [(ckpt.engine(n), x_engine[kind[n]]) for n in names]
    fp16 = [(Fp16PackedLinear.build(ckpt.weights[n], None), x32[kind[n]]) for n in names]
    orts, exact = [], []
    for n in names:
        out_features, in_features = ckpt.weights[n].shape
        model = matmul_nbits_model(ckpt.weights[n].numpy(), 4, 4)
        orts.append((OrtCall(ort_session(model, threads, args.ort_spin), 1, in_features,
                             out_features), kind[n]))
        model, rest = matmul_nbits_exact(ckpt.weights[n].numpy())
        exact.append((OrtExactCall(ort_session(model, threads, args.ort_spin), 1, rest).linear,
                      x32[kind[n]]))

    def chain(calls: Sequence[tuple[Callable[[torch.Tensor], object], torch.Tensor]]
              ) -> Callable[[], None]:
        def run() -> None:
            for fn, x in calls:
                fn(x)
        return run

    def bare(call: OrtCall) -> Callable[[torch.Tensor], None]:
        return lambda _x: call.run()

    for call, k in orts:
        call.x.copy_(x32[k])
    candidates = {
        "engine": chain(engine),
        "fp16": chain(fp16),
        "ort4": chain([(bare(call), x32[k]) for call, k in orts]),
        "ort4_f32": chain([(call.linear, x32[k]) for call, k in orts]),
        "ort4_bf16": chain([(call.linear, x16[k]) for call, k in orts]),
        "ort4_exact": chain(exact),
    }
    micros, _ = interleaved(candidates, args.seconds * 2, args.calls, lambda: None)
    return {name: us / 1e3 for name, us in micros.items()}


# ---- report ----------------------------------------------------------------------------------


def cpu_header() -> tuple[str, set[str]]:
    model, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    flags = cpu_mask.visible_flags(flags)
    if cpu_mask.masked():
        model += f" (run as an {cpu_mask.masked()} CPU: bench/cpu_mask.py)"
    shown = [f for f in ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16",
                         "amx_tile", "amx_int8", "amx_bf16") if f in flags]
    return f"{model}, {os.cpu_count()} CPUs; flags: {' '.join(shown)}", flags


def print_report(timings: list[Timing], errors: dict[str, dict[str, float]],
                 kernels: dict[str, str], steps: dict[int, dict[str, float]],
                 layers: int) -> None:
    print("\n| projection | engine kernels, M=1 |\n|---|---|")
    for name, text in kernels.items():
        print(f"| {name} | {text} |")
    print("\nMedian us per call (interleaved). Speedups are engine / ORT (>1: ORT faster): "
          "of the bare ORT L4 run, of ORT L4 as a float32 Linear, and of ORT L4 exact (the "
          "engine's own int4 values, each block's min added back: what a weight format "
          "would run). One session called repeatedly stays warm: the decode step below is "
          "the realistic figure.\n")
    print("| projection | in->out | M | thr | ORT L0 | ORT L4 | ORT L4 Linear f32 "
          "| ORT L4 Linear bf16 | ORT L4 exact | fbgemm fp16 | fp32 F.linear | bf16 F.linear "
          "| engine | L4 speedup | L4 Linear f32 speedup | L4 exact speedup | calls |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for t in timings:
        m = t.micros
        print(f"| {t.projection} | {t.shape} | {t.rows} | {t.threads} | "
              + " | ".join(f"{m[c]:.1f}" if c in m else "n/a" for c in CANDIDATES)
              + f" | {m['engine'] / m['ort4']:.2f}x | {m['engine'] / m['ort4_f32']:.2f}x"
              + (f" | {m['engine'] / m['ort4_exact']:.2f}x" if "ort4_exact" in m else " | n/a")
              + f" | {t.calls} |")
    print("\nRelative error at one row vs the checkpoint weight in float64 "
          "(L4 vs L0: the int8 activations alone).\n")
    print("| projection | ORT L0 | ORT L4 | ORT L4 exact | engine | fbgemm fp16 | L4 vs L0 |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for name, e in errors.items():
        print(f"| {name} | " + " | ".join(f"{e[c]:.4f}" if c in e else "n/a" for c in
                                          ("ort0", "ort4", "ort4_exact", "engine", "fp16",
                                           "ort4_vs_ort0"))
              + " |")
    if steps:
        print(f"\nThe {4 * layers} layer projections of one batch-1 decode step, median ms "
              "(speedups: engine / ORT).\n")
        print("| thr | engine | fbgemm fp16 | ORT L4 bare | ORT L4 Linear f32 "
              "| ORT L4 Linear bf16 | ORT L4 exact | speedup bare | speedup Linear f32 "
              "| speedup exact |")
        print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for threads, m in steps.items():
            print(f"| {threads} | {m['engine']:.2f} | {m['fp16']:.2f} | {m['ort4']:.2f} "
                  f"| {m['ort4_f32']:.2f} | {m['ort4_bf16']:.2f} | {m['ort4_exact']:.2f} "
                  f"| {m['engine'] / m['ort4']:.2f}x | {m['engine'] / m['ort4_f32']:.2f}x "
                  f"| {m['engine'] / m['ort4_exact']:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2", help="comma list (torch and ORT intra-op)")
    parser.add_argument("--rows", default="1,8", help="comma list of M")
    parser.add_argument("--projections", default="qkv,o,gate_up,down,lm_head,lm_head_q4")
    parser.add_argument("--layer", type=int, default=15)
    parser.add_argument("--model", type=Path, help="transformers model dir (default: the "
                        "converted SmolLM2 under ~/.cache/assistant)")
    parser.add_argument("--random-weights", type=Path, metavar="DIR",
                        help="DIR's config with random weights")
    parser.add_argument("--weights", default="auto", help="the engine's weight format")
    parser.add_argument("--dense-prefill", default="auto", choices=("auto", "always", "never"))
    parser.add_argument("--error-rows", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=2.0, help="per (projection, M, thr)")
    parser.add_argument("--calls", type=int, default=400, help="most rounds per figure")
    parser.add_argument("--flush-mib", type=float, default=0.0,
                        help="a buffer of this size read before each call")
    add_no_write(parser)
    parser.add_argument("--no-step", action="store_true",
                        help="skip the whole decode step's projections")
    parser.add_argument("--ort-spin", action="store_true",
                        help="let ORT's intra-op threads spin (off: they would take the "
                        "cores from torch's calls in between)")
    cpu_mask.add_argument(parser)
    args = parser.parse_args()
    cpu_mask.relaunch(args.as_cpu)

    header, flags = cpu_header()
    load_before = os.getloadavg()[0]
    ckpt = load_checkpoint(args)
    projections = [projection(ckpt, name, args.layer) for name in args.projections.split(",")]
    buffer = np.zeros(int(args.flush_mib * 2**20) // 4, np.float32)

    def flush() -> None:
        if buffer.size:  # a read: no dirty lines to write back during the next call
            buffer.sum()

    timings: list[Timing] = []
    errors: dict[str, dict[str, float]] = {}
    kernels: dict[str, str] = {}
    thread_counts = [int(t) for t in args.threads.split(",")]
    for proj in projections:
        kernels[proj.name] = engine_kernels(proj.engine, proj.inputs[:1].to(proj.engine_dtype))
        for rows in (int(r) for r in args.rows.split(",")):
            for threads in thread_counts:
                timing, errs = measure(proj, rows, threads, args, flush)
                timings.append(timing)
                if errs is not None and proj.name not in errors:
                    errors[proj.name] = errs
    steps = {} if args.no_step else {t: decode_step(ckpt, t, args) for t in thread_counts}
    with capture() as printed:
        print_header(header, flags, ckpt, args, load_before)
        print_report(timings, errors, kernels, steps, len(ckpt.built.layers))
    if not args.no_write:
        host = machine()
        write_results(f"int-kernel-{host.slug()}", printed.getvalue(), command=sys.orig_argv)


def print_header(header: str, flags: set[str], ckpt: Checkpoint, args: argparse.Namespace,
                 load_before: float) -> None:
    print(f"- CPU: {header}")
    print(f"- torch {torch.__version__}, ATen capability "
          f"{torch.backends.cpu.get_cpu_capability()}; onnxruntime {ort.__version__}, "
          f"MLAS QNBit path on this CPU: {mlas_qnbit_path(flags)}")
    env = [f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "FBGEMM_ENABLE_INSTRUCTIONS")
           if k in os.environ]
    print(f"- environment: {' '.join(env) or 'default'}; weights: {ckpt.source}")
    print(f"- flush: {args.flush_mib:g} MiB read before each call; ORT spinning "
          f"{'on' if args.ort_spin else 'off'}; load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after (the machine is shared: other work runs)")


if __name__ == "__main__":
    main()
