"""Weight formats: quantized linears against their own dequantized weights, whole models
against fp32 (tiny random models and, loosely, the packaged SmolLM2's quality gates), and
the quantized-weight cache."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import torch.nn.functional as F

from engine import Engine, SamplingParams, weight_formats
from engine.cpu_features import CpuFeatures, cpu_features
from engine.errors import ContextLimitError, EngineError
from engine.loader import runner_from_hf_model
from engine.quality import fixed_text, greedy_agreement, greedy_tokens, perplexity
from engine.quantize import (
    DenseLinear,
    Fp16PackedLinear,
    Int4Linear,
    Int8Linear,
    bf16_linear,
    bf16_packs_float16,
    linear_from_quantized,
    tinygemm_inner_k_tiles,
)
from engine.runner import DecodeItem
from engine.weight_cache import ALIGN, cache_path, load_or_quantize
from engine.weight_formats import (
    DENSE_ROWS,
    FP16_ROWS,
    PREFILL_ROWS,
    compute_dtype_for,
    dense_copy_for,
    dense_rows_for,
    resolve_weight_format,
    vnni_int8_for,
)
from engine.weight_quant import dequantize, quantize_linear
from tests.cpu_profiles import CPU_PROFILES, fbgemm_int8_saturates, pretend_cpu
from tests.engine.conftest import TINY_VOCAB
from tests.engine.fake_runner import ByteTokenizer

CPU = torch.device("cpu")


def dequantized(tensors: dict[str, torch.Tensor], shape: torch.Size) -> torch.Tensor:
    if "q" in tensors:
        return tensors["q"].float() * tensors["scale"][:, None]
    nibbles = tensors["nibbles"]
    q = torch.stack([nibbles & 0xF, nibbles >> 4], dim=-1).view(shape).float()
    groups = tensors["scale"].shape[0]
    return (q.view(shape[0], groups, -1) * tensors["scale"].t()[..., None]
            + tensors["min"].t()[..., None]).view(shape)


@pytest.mark.parametrize("rows", [3, PREFILL_ROWS])  # the kernel and the prefill path
@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_quantized_linear_computes_with_its_dequantized_weight(fmt: str, rows: int) -> None:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 64, generator=gen)
    bias = torch.randn(96, generator=gen)
    x = torch.randn(2, rows, 64, generator=gen).bfloat16()
    tensors = quantize_linear(weight, resolve_weight_format(fmt))
    assert tensors is not None
    linear = linear_from_quantized(tensors, bias, device=CPU, dtype=torch.bfloat16)
    assert isinstance(linear, Int8Linear if fmt == "int8" else Int4Linear)
    deq = dequantized(tensors, weight.shape)
    ref = x.float() @ deq.t() + bias
    out = linear(x)
    assert out.shape == (2, rows, 96) and out.dtype == torch.bfloat16
    assert float((out.float() - ref).abs().max()) < 0.02 * float(ref.abs().max())
    # Quantization error itself is bounded by half a step.
    step = 1 / 127 if fmt == "int8" else 1 / 15
    assert float((deq - weight).abs().max()) <= 1.01 * step * float(weight.abs().max())


FBGEMM = "fbgemm" in torch.backends.quantized.supported_engines


@pytest.mark.parametrize("kind", ["bf16", pytest.param("fp16", marks=pytest.mark.skipif(
    not FBGEMM, reason="fbgemm's float16 GEMM is not in this torch build"))])
@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_a_16_bit_copy_serves_many_rows_and_the_kernel_few(fmt: str, kind: str) -> None:
    gen = torch.Generator().manual_seed(2)
    weight, bias = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    tensors = quantize_linear(weight, resolve_weight_format(fmt))
    assert tensors is not None
    rows = dense_rows_for("layers.0.qkv", cast(Any, kind))
    assert rows == (DENSE_ROWS if kind == "bf16" else FP16_ROWS)
    plain = linear_from_quantized(tensors, bias, device=CPU, dtype=torch.bfloat16)
    dense = linear_from_quantized(tensors, bias, device=CPU, dtype=torch.bfloat16,
                                  dense=cast(Any, kind), dense_rows=rows)
    assert isinstance(dense, Int8Linear | Int4Linear) and dense.dense is not None
    assert torch.allclose(dequantize(tensors), dequantized(tensors, weight.shape), atol=1e-6)
    few = torch.randn(rows - 1, 64, generator=gen).bfloat16()
    many = torch.randn(rows, 64, generator=gen).bfloat16()
    assert torch.equal(dense(few), plain(few))  # the same quantized kernel below the rows
    out = dense(many)
    assert out.dtype == torch.bfloat16
    if kind == "bf16":
        assert isinstance(dense.dense, DenseLinear)
        assert torch.equal(dense.dense.weight, dequantize(tensors).bfloat16())
        copy = F.linear(many, dense.dense.weight)
    else:  # fbgemm's float16 GEMM on the dequantized weight, float32 activations
        assert isinstance(dense.dense, Fp16PackedLinear)
        copy = Fp16PackedLinear.build(dequantize(tensors), None)(many.float()).bfloat16()
        assert not torch.equal(out, plain(many))  # not the quantized kernel's result
    assert torch.equal(out, copy + bias.bfloat16())
    ref = many.float() @ dequantize(tensors).t() + bias
    assert float((out.float() - ref).abs().max()) < 0.02 * float(ref.abs().max())


@pytest.mark.skipif(not FBGEMM, reason="fbgemm's float16 GEMM is not in this torch build")
def test_a_float16_output_projection_is_the_copy_alone_and_returns_float32() -> None:
    gen = torch.Generator().manual_seed(4)
    weight, bias = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    tensors = quantize_linear(weight, "int8")
    assert tensors is not None
    assert dense_rows_for("lm_head", "fp16") == 1 and dense_rows_for("lm_head", "bf16") > 1
    head = linear_from_quantized(tensors, bias, device=CPU, dtype=torch.bfloat16,
                                 dense="fp16", dense_rows=1, vnni=True)
    assert isinstance(head, Fp16PackedLinear)  # no int8 weight and no VNNI copy kept
    for rows in (1, 3, 20):
        x = torch.randn(rows, 64, generator=gen).bfloat16()
        out = head(x)
        assert out.shape == (rows, 96) and out.dtype == torch.float32
        ref = x.float() @ dequantize(tensors).t() + bias
        assert float((out - ref).abs().max()) < 1e-3 * float(ref.abs().max())


COPY_KIND = {"avx2": "fp16", "avx512-vnni": None, "avx512-bf16": "bf16", "amx": "bf16"}
"""auto's 16-bit copy per CPU profile (`tests/cpu_profiles.py`)."""
AUTO_FORMAT = {"avx2": "bf16", "avx512-vnni": "int4", "avx512-bf16": "int4", "amx": "int4"}
"""``weights: auto`` per CPU profile: bf16 where int8/int4 would keep fbgemm float16
copies (AVX2 CPUs), where the bf16 format measured as fast and closer to fp32; int4 on
other CPUs and on GPUs."""


def profile_name(cpu: CpuFeatures) -> str:
    return next(name for name, profile in CPU_PROFILES.items() if profile == cpu)


def test_the_copy_kind_follows_the_cpu(each_cpu: CpuFeatures) -> None:
    kind = COPY_KIND[profile_name(each_cpu)]
    assert dense_copy_for("auto", "cpu") == kind
    assert dense_copy_for("always", "cpu") == (kind or "bf16")
    assert dense_copy_for("never", "cpu") is None
    assert dense_copy_for("auto", "cuda") is None
    assert dense_copy_for("always", "cuda") == "bf16"


def test_a_cpu_torch_runs_only_plain_kernels_on_gets_no_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pretend_cpu(monkeypatch, CpuFeatures(capability="DEFAULT", amx=False, avx512_bf16=False,
                                         vnni=False, fbgemm=FBGEMM))
    assert dense_copy_for("auto", "cpu") is None
    assert resolve_weight_format("auto") == "int4"


def test_the_pretended_cpu_is_what_the_engine_reads(each_cpu: CpuFeatures) -> None:
    assert cpu_features() == each_cpu
    assert each_cpu.capability in cpu_features().describe()


def test_the_int8_output_projection_keeps_a_vnni_copy_on_cpus_with_vnni(
        each_cpu: CpuFeatures) -> None:
    for fmt in ("int8", "int4"):
        assert vnni_int8_for("lm_head", cast(Any, fmt), "cpu") is each_cpu.vnni
        assert not vnni_int8_for("layers.0.down", cast(Any, fmt), "cpu")
        assert not vnni_int8_for("lm_head", cast(Any, fmt), "cuda")
    assert not vnni_int8_for("lm_head", "fp32", "cpu")
    assert not vnni_int8_for("lm_head", "bf16", "cpu")


@pytest.mark.skipif(fbgemm_int8_saturates(),
                    reason="fbgemm's uint8 x int8 products saturate in 16 bits here (no "
                           "VNNI, or its kernels limited to AVX2): the copy is not kept")
def test_the_vnni_copy_serves_few_rows_and_the_dense_copy_many() -> None:
    gen = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    tensors = quantize_linear(weight, "int8")
    assert tensors is not None
    plain = linear_from_quantized(tensors, bias, device=CPU, dtype=torch.bfloat16)
    fast = linear_from_quantized(tensors, bias, device=CPU, dtype=torch.bfloat16,
                                 dense="bf16", vnni=True)
    assert isinstance(fast, Int8Linear) and fast.vnni is not None
    assert isinstance(plain, Int8Linear) and plain.vnni is None
    for rows in (1, 4, DENSE_ROWS - 1):
        x = torch.randn(rows, 64, generator=gen).bfloat16()
        out = fast(x)  # float32: the logits, as the kernel computes them
        assert out.shape == (rows, 96) and out.dtype == torch.float32
        ref = x.float() @ dequantize(tensors).t() + bias
        assert float((out.float() - ref).abs().max()) < 0.03 * float(ref.abs().max())
        # Not the bfloat16 kernel's result: the activations were quantized to uint8.
        assert not torch.equal(out.bfloat16(), plain(x))
    assert fast(torch.randn(2, 3, 64, generator=gen).bfloat16()).shape == (2, 3, 96)
    many = torch.randn(DENSE_ROWS, 64, generator=gen).bfloat16()
    assert isinstance(fast.dense, DenseLinear)
    assert torch.equal(fast(many), F.linear(many, fast.dense.weight) + bias.bfloat16())


def test_int4_with_inputs_not_a_multiple_of_the_group_falls_back_to_int8() -> None:
    tensors = quantize_linear(torch.randn(8, 48), "int4")
    assert tensors is not None and "q" in tensors


@pytest.mark.parametrize(("inputs", "tiles"), [(1536, 8), (576, 4), (64, 4), (96, 2)])
def test_cuda_int4_packs_as_many_k_tiles_as_divide_the_inputs(inputs: int, tiles: int) -> None:
    """tinygemm's layout needs inputs % (16 * tiles) == 0: SmolLM2's 576 inputs failed
    with gpt-fast's fixed 8 on an H200."""
    assert tinygemm_inner_k_tiles(inputs) == tiles


def test_cuda_int4_refuses_inputs_no_k_tiles_divide() -> None:
    with pytest.raises(EngineError, match="multiple of 32"):
        tinygemm_inner_k_tiles(48)


def test_the_auto_format_follows_the_cpu(each_cpu: CpuFeatures) -> None:
    fmt = AUTO_FORMAT[profile_name(each_cpu)]
    assert resolve_weight_format("auto") == fmt
    assert resolve_weight_format("AUTO", "cpu") == fmt
    assert resolve_weight_format("auto", "cuda") == "int4"


def test_format_names_and_dtypes() -> None:
    assert resolve_weight_format("bfloat16") == "bf16"
    assert compute_dtype_for("fp32") == torch.float32
    assert compute_dtype_for("int4") == torch.bfloat16
    # On CPU, too: fbgemm's float16 GEMM takes float32 activations, K/V stays bfloat16.
    assert compute_dtype_for("bf16") == compute_dtype_for("bf16", "cuda") == torch.bfloat16
    with pytest.raises(EngineError, match="unknown weight format"):
        resolve_weight_format("int3")


def test_bf16_on_cpu_computes_with_the_bfloat16_weights_in_float32() -> None:
    gen = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    assert bf16_packs_float16([weight], CPU)
    linear = bf16_linear(weight, bias, device=CPU, packed=True)
    assert isinstance(linear, Fp16PackedLinear) and linear.nbytes() == 2 * 96 * 64
    x = torch.randn(2, 5, 64, generator=gen)
    ref = x @ weight.bfloat16().float().t() + bias
    out = linear(x)
    assert out.shape == (2, 5, 96) and out.dtype == torch.float32
    assert float((out - ref).abs().max()) < 1e-4
    # float16 cannot hold it: dense bfloat16 instead
    assert not bf16_packs_float16([weight, weight * 1e5], CPU)
    assert isinstance(bf16_linear(weight, None, device=CPU, packed=False), DenseLinear)


def test_a_bf16_model_with_a_weight_float16_cannot_hold_runs_all_dense(
        tiny_llama: Any) -> None:
    """One weight past float16's range: no linear is packed (a model with both kinds
    failed at its first step: packed ones return float32, dense ones take bfloat16)."""
    model = copy.deepcopy(tiny_llama)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] = 1e5
    runner = runner_from_hf_model(model, page_size=4, num_pages=16, weights="bf16")
    linears = [linear for layer in runner.weights.layers
               for linear in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    assert all(isinstance(linear, DenseLinear) for linear in linears)
    assert runner.weights.float32_from is None and runner.kv.k.dtype == torch.bfloat16
    exact = runner_from_hf_model(model, page_size=4, num_pages=16)
    table, ids = list(range(16)), list(range(3, 23))
    ref = exact.prefill(table, 0, ids, all_logits=True)
    ours = torch.cat([runner.prefill(table, 0, ids[:-1], all_logits=True),
                      runner.decode([DecodeItem(table, len(ids) - 1, ids[-1])])])
    assert torch.isfinite(ours).all()  # (the 1e5 weight magnifies bfloat16's rounding)
    assert float((ours - ref).abs().max()) < 0.25 * float(ref.abs().max())
    assert float((ours.argmax(-1) == ref.argmax(-1)).float().mean()) >= 0.75


def test_bf16_dense_weights_keep_the_out_in_layout() -> None:
    """The [in, out] bf16 CPU matmul is >10x slower than F.linear's [out, in] form."""
    wide = torch.randn(128, 64)
    assert DenseLinear.build(wide, None).input_major
    assert not DenseLinear.build(wide.bfloat16(), None).input_major


def force_copy(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Make every runner built from here on keep a copy of `kind`, whatever this CPU is."""
    monkeypatch.setattr("engine.weight_formats.dense_copy_for", lambda mode, device: kind)


@pytest.mark.parametrize(("fmt", "dense"), [
    ("bf16", "never"), ("int8", "never"), ("int4", "never"), ("int4", "always"),
    pytest.param("int4", "fp16", marks=pytest.mark.skipif(not FBGEMM, reason="no fbgemm"))])
def test_tiny_models_in_each_format_stay_close_to_fp32(
        tiny_llama: Any, tiny_qwen2: Any, fmt: str, dense: Any, each_cpu: CpuFeatures,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if dense == "fp16":
        force_copy(monkeypatch, "fp16")
    ids = [int(t) for t in torch.randint(3, TINY_VOCAB, (24,),
                                         generator=torch.Generator().manual_seed(5))]
    table = list(range(16))
    # Random weights are the worst case for 4 bits (SmolLM2's gates are below).
    tol, agree = (0.3, 0.5) if fmt == "int4" else (0.1, 0.75)
    for hf_model in (tiny_llama, tiny_qwen2):
        exact = runner_from_hf_model(hf_model, page_size=4, num_pages=16)
        low = runner_from_hf_model(hf_model, page_size=4, num_pages=16, weights=fmt,
                                   dense_prefill=dense)  # 22 rows: the copy when kept
        assert low.dtype == compute_dtype_for(fmt) == low.kv.k.dtype
        vnni = getattr(low.weights.lm_head, "vnni", None) is not None
        # What the runner asked for: the patched choice when forced (`force_copy`).
        fp16_head = fmt != "bf16" and weight_formats.dense_copy_for(dense, "cpu") == "fp16"
        if fmt != "bf16":  # (bf16's linears are all float16-packed on CPU)
            assert isinstance(low.weights.lm_head, Fp16PackedLinear) is fp16_head
        # Decode steps below use the VNNI copy if kept.
        assert vnni is (vnni_int8_for("lm_head", fmt) and not fp16_head)
        if vnni and fbgemm_int8_saturates():
            pytest.skip("a pretended VNNI CPU: this CPU's fbgemm kernels saturate where "
                        "VNNI's do not, so the copy's numbers are checked on real VNNI")
        ref = exact.prefill(table, 0, ids, all_logits=True)
        ours = low.prefill(table, 0, ids[:-2], all_logits=True)
        for pos in (len(ids) - 2, len(ids) - 1):  # decode steps on the same cache
            ours = torch.cat([ours, low.decode([DecodeItem(table, pos, ids[pos])])])
        assert ours.dtype == torch.float32 and torch.isfinite(ours).all()
        assert float((ours - ref).abs().max()) < tol * float(ref.abs().max())
        assert float((ours.argmax(-1) == ref.argmax(-1)).float().mean()) >= agree


@pytest.mark.skipif(not FBGEMM, reason="fbgemm's float16 GEMM is not in this torch build")
def test_decode_steps_of_many_rows_take_the_float16_copies(
        tiny_llama: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    force_copy(monkeypatch, "fp16")
    runner = runner_from_hf_model(tiny_llama, page_size=4, num_pages=64, weights="int4")
    scripted = runner.scripted
    assert scripted is not None  # the int4 loop below FP16_ROWS, the float16 loop from it
    assert scripted.covers(FP16_ROWS - 1) and scripted.covers(FP16_ROWS)
    prompts = [[int(t) for t in torch.randint(3, TINY_VOCAB, (5 + i,),
                                              generator=torch.Generator().manual_seed(i))]
               for i in range(FP16_ROWS)]
    tables = [list(range(4 * i, 4 * i + 4)) for i in range(FP16_ROWS)]
    for table, ids in zip(tables, prompts, strict=True):
        runner.prefill(table, 0, ids[:-1])
    items = [DecodeItem(t, len(ids) - 1, ids[-1]) for t, ids in zip(tables, prompts,
                                                                     strict=True)]
    together = runner.decode(items)  # FP16_ROWS rows: float16 copies, scripted
    alone = torch.cat([runner.decode([item]) for item in items])  # one row: int4, scripted
    assert together.shape == alone.shape and together.dtype == torch.float32
    assert not torch.equal(together, alone)  # different kernels ran...
    # ...on the same dequantized weights (bfloat16 activations in the int4 kernel).
    assert float((together - alone).abs().max()) < 0.05 * float(alone.abs().max())
    assert torch.equal(together.argmax(-1), alone.argmax(-1))


@pytest.mark.skipif(not FBGEMM, reason="fbgemm's float16 GEMM is not in this torch build")
def test_rows_the_float16_copies_serve_keep_float32_activations(
        tiny_llama: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between float16 GEMMs (float32 in and out) activations stay float32: every copy gets
    float32 rows, and K/V is still written in the compute dtype. Rows the int4 kernel
    serves (the scripted step) compute in bfloat16 as before."""
    force_copy(monkeypatch, "fp16")
    runner = runner_from_hf_model(tiny_llama, page_size=4, num_pages=64, weights="int4")
    weights = runner.weights
    assert weights.float32_from == FP16_ROWS
    assert weights.activation_dtype(FP16_ROWS) == torch.float32
    assert weights.activation_dtype(FP16_ROWS - 1) == runner.dtype == torch.bfloat16
    bf16 = runner_from_hf_model(tiny_llama, page_size=4, num_pages=8, weights="bf16").weights
    assert bf16.float32_from == 1 and bf16.activation_dtype(1) == torch.float32
    fp32 = runner_from_hf_model(tiny_llama, page_size=4, num_pages=8, weights="fp32").weights
    assert fp32.float32_from is None
    seen: list[tuple[int, torch.dtype]] = []
    call = Fp16PackedLinear.__call__

    def spy(self: Fp16PackedLinear, x: torch.Tensor) -> torch.Tensor:
        seen.append((x.shape[0], x.dtype))
        return call(self, x)

    monkeypatch.setattr(Fp16PackedLinear, "__call__", spy)
    ids = [int(t) for t in torch.randint(3, TINY_VOCAB, (9,),
                                         generator=torch.Generator().manual_seed(3))]
    tables = [list(range(4 * i, 4 * i + 4)) for i in range(FP16_ROWS)]
    runner.prefill(tables[0], 0, ids)  # 9 rows
    assert seen and {dtype for _, dtype in seen} == {torch.float32}
    written = runner.kv.k[:, :, 0:3]  # pages 0-2 hold the 9 positions
    assert runner.kv.k.dtype == torch.bfloat16 and bool(written.abs().sum() > 0)
    for table in tables[1:]:
        runner.prefill(table, 0, ids[:5])
    seen.clear()
    scripted, runner.scripted = runner.scripted, None  # the Python loop (the scripted
    # float16 loop makes the same calls: tests/engine/test_scripted_step.py)
    runner.decode([DecodeItem(t, 5 if i else 9, ids[0]) for i, t in enumerate(tables)])
    assert len(seen) == 4 * tiny_llama.config.num_hidden_layers + 1  # the layers, lm_head
    assert {dtype for _, dtype in seen} == {torch.float32}
    runner.scripted = scripted
    seen.clear()
    runner.decode([DecodeItem(tables[0], 10, ids[1])])  # one row: the scripted int4 loop
    assert seen == [(1, torch.float32)]  # only the float16 output projection, unrounded


def test_engine_generates_in_int4(tiny_llama: Any) -> None:
    runner = runner_from_hf_model(tiny_llama, page_size=4, num_pages=64, weights="int4")
    engine = Engine(runner, ByteTokenizer())
    with engine.sequence() as seq:
        events = list(seq.generate(SamplingParams(max_new_tokens=12, ignore_eos=True),
                                   prompt_ids=[5, 6, 7, 8, 9]))
        assert len(events) == 12
        engine.check()


def test_runner_refuses_positions_past_the_model_maximum(tiny_llama: Any) -> None:
    runner = runner_from_hf_model(tiny_llama, page_size=64, num_pages=10)
    assert runner.max_positions == 512
    with pytest.raises(ContextLimitError):
        runner.decode([DecodeItem(list(range(9)), 512, 5)])


def test_weight_cache_is_keyed_by_format_and_written_once(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "model.safetensors").write_bytes(b"weights")
    cache = tmp_path / "cache"
    calls = []

    def compute() -> list[tuple[str, dict[str, torch.Tensor]]]:
        calls.append(1)
        tensors = quantize_linear(torch.randn(8, 64), "int4")
        assert tensors is not None
        return [("layers.0.qkv", tensors)]

    first = load_or_quantize(cache, model_dir, "int4", compute)
    second = load_or_quantize(cache, model_dir, "int4", compute)
    assert len(calls) == 1
    assert first.keys() == second.keys()
    for part, tensor in first["layers.0.qkv"].items():
        assert torch.equal(tensor, second["layers.0.qkv"][part])
    assert cache_path(cache, model_dir, "int4") != cache_path(cache, model_dir, "int8")
    assert [p.name for p in cache.iterdir()] == [cache_path(cache, model_dir, "int4").name]
    # A corrupt file is recomputed and replaced; a changed checkpoint gets a new key.
    cache_path(cache, model_dir, "int4").write_bytes(b"garbage")
    load_or_quantize(cache, model_dir, "int4", compute)
    assert len(calls) == 2
    (model_dir / "model.safetensors").write_bytes(b"other weights!")
    load_or_quantize(cache, model_dir, "int4", compute)
    assert len(calls) == 3


def test_a_cache_that_cannot_take_the_weights_costs_only_the_next_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A full disk or read-only cache: the weights just computed are used all the same,
    with a warning (the engine used to refuse to load)."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "model.safetensors").write_bytes(b"weights")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory should be")
    tensors = quantize_linear(torch.randn(8, 64), "int4")
    assert tensors is not None
    with caplog.at_level("WARNING", logger="engine.weight_cache"):
        got = load_or_quantize(blocked, model_dir, "int4", lambda: [("layers.0.qkv", tensors)])
    assert got["layers.0.qkv"] is tensors
    assert "quantized again at the next start" in caplog.text


def test_weights_read_from_the_cache_are_aligned_for_the_cpu_kernels(tmp_path: Path) -> None:
    # Odd-sized tensors end to end in the file: read in place, the later ones would sit at
    # odd offsets (the int8 kernel crashed on an 8-byte aligned lm_head from 4 rows on).
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "model.safetensors").write_bytes(b"weights")
    made = {f"layers.{i}.o": {"q": torch.randint(-127, 127, (8, 16 + i), dtype=torch.int8),
                              "scale": torch.rand(8 + i)} for i in range(5)}
    load_or_quantize(tmp_path / "cache", model_dir, "int8", lambda: made.items())
    loaded = load_or_quantize(tmp_path / "cache", model_dir, "int8", lambda: [])
    assert loaded.keys() == made.keys()
    for name, tensors in loaded.items():
        for part, tensor in tensors.items():
            assert tensor.data_ptr() % ALIGN == 0, (name, part)
            assert torch.equal(tensor, made[name][part])


# ---- the packaged SmolLM2: quality gates, loosely (the bench prints the full figures) ----


@pytest.mark.slow
def test_smollm2_quality_gates(llm_dir: Path, tmp_path: Path) -> None:
    from engine.loader import load_runner

    results: dict[str, float] = {}
    reference: list[list[int]] = []
    prompts: list[list[int]] = []
    for fmt, dense in (("fp32", "never"), ("bf16", "never"), ("int8", "never"),
                       ("int4", "never"), ("int4+dense", "always")):
        runner, tokenizer = load_runner(llm_dir, page_size=16, num_pages=96,
                                        weights=fmt.removesuffix("+dense"), cache_dir=tmp_path,
                                        dense_prefill=cast(Any, dense))
        text = [int(t) for t in tokenizer.encode(fixed_text(paragraphs=16))]
        results[fmt] = perplexity(runner, text)
        if fmt == "fp32":
            prompts = [[int(t) for t in tokenizer.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                return_dict=False)] for q in ("Why is the sky blue?", "What is 2 plus 2?")]
            reference = greedy_tokens(runner, prompts, 16)
        else:
            agreement = greedy_agreement(runner, reference, prompts)
            assert agreement.teacher_forced >= 0.8, (fmt, agreement)
    assert results["bf16"] <= 1.01 * results["fp32"], results
    assert results["int8"] <= 1.02 * results["fp32"], results
    assert results["int4"] <= 1.06 * results["fp32"], results
    # The dense copy for prefill is the same weights: a few rounding differences at most.
    assert abs(results["int4+dense"] / results["int4"] - 1) < 0.01, results
    assert len(list(tmp_path.glob("*-int4.safetensors"))) == 1
