"""Reading architecture parameters from transformers configs, and the loader's errors."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.errors import EngineError, UnsupportedModelError
from engine.loader import eos_token_ids_for, load_runner, resolve_dtype
from engine.model_config import ModelConfig
from engine.rope import RopeTables, rope_inv_freq


def llama_namespace(**overrides: Any) -> SimpleNamespace:
    """A transformers-4.x-style Llama config (``rope_theta`` + ``rope_scaling``)."""
    fields: dict[str, Any] = dict(
        model_type="llama", vocab_size=100, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
        rope_theta=500000.0, rope_scaling=None, max_position_embeddings=4096,
        hidden_act="silu")
    fields.update(overrides)
    return SimpleNamespace(**fields)


def test_llama_fields_and_gqa() -> None:
    cfg = ModelConfig.from_hf(llama_namespace())
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.kv_groups) == (4, 2, 8, 2)
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling is None
    assert not (cfg.qkv_bias or cfg.o_bias or cfg.mlp_bias or cfg.tie_word_embeddings)


def test_qwen2_has_qkv_bias_only(tiny_qwen2: Any) -> None:
    cfg = ModelConfig.from_hf(tiny_qwen2.config)
    assert (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) == (True, False, False)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 1000.0


def test_mistral_sliding_window(tiny_mistral: Any) -> None:
    assert ModelConfig.from_hf(tiny_mistral.config).sliding_window == 8


@pytest.mark.parametrize("scaling", [
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},
    {"type": "linear", "factor": 2.0},
])
def test_rope_scaling_matches_transformers(scaling: dict[str, Any]) -> None:
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    # transformers 4.x layout read by us; transformers' own functions as the reference.
    ours = ModelConfig.from_hf(llama_namespace(rope_scaling=scaling))
    kind = scaling.get("rope_type", scaling.get("type"))
    assert ours.rope_scaling is not None and ours.rope_scaling.kind == kind
    params = {k: v for k, v in scaling.items() if k != "type"}
    hf_config = transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rope_parameters={**params, "rope_type": kind, "rope_theta": 500000.0})
    ref, _ = ROPE_INIT_FUNCTIONS[kind](hf_config, torch.device("cpu"))
    assert torch.equal(rope_inv_freq(ours), ref.float())
    assert not torch.equal(rope_inv_freq(ours), rope_inv_freq(ModelConfig.from_hf(
        llama_namespace())))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_tables_grow_and_match_tables_computed_per_step(dtype: torch.dtype) -> None:
    """The looked-up cos / signed sin are the values a step would compute for its own
    positions, before and after the tables grow past their first size."""
    inv_freq = rope_inv_freq(ModelConfig.from_hf(llama_namespace()))
    tables = RopeTables(inv_freq, dtype)
    for positions in ([0, 3], [255], [256, 1000], [7]):
        pos = torch.tensor(positions)
        freqs = pos[:, None, None].float() * inv_freq
        want_cos = torch.cat((freqs.cos(), freqs.cos()), dim=-1).to(dtype)
        want_sin = torch.cat((-freqs.sin(), freqs.sin()), dim=-1).to(dtype)
        cos, sin = tables.lookup(pos, max(positions) + 1)
        assert cos.shape == sin.shape == (len(positions), 1, 2 * inv_freq.shape[0])
        assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)
        assert cos.dtype == dtype


def test_unsupported_architecture_names_model_type() -> None:
    with pytest.raises(UnsupportedModelError, match="'gpt2'"):
        ModelConfig.from_hf(SimpleNamespace(model_type="gpt2"))


def test_unsupported_rope_type_and_activation() -> None:
    with pytest.raises(UnsupportedModelError, match="yarn"):
        ModelConfig.from_hf(llama_namespace(rope_scaling={"rope_type": "yarn", "factor": 2.0}))
    with pytest.raises(UnsupportedModelError, match="gelu"):
        ModelConfig.from_hf(llama_namespace(hidden_act="gelu"))


def test_load_runner_errors_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(EngineError, match="nope"):
        load_runner(missing)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(UnsupportedModelError, match="'gpt2'"):
        load_runner(tmp_path)
    with pytest.raises(EngineError, match="x.gguf"):
        load_runner(tmp_path, gguf_file="x.gguf")


def test_resolve_dtype() -> None:
    assert resolve_dtype("bf16") is torch.bfloat16
    assert resolve_dtype(torch.float16) is torch.float16
    with pytest.raises(EngineError, match="int3"):
        resolve_dtype("int3")


def test_eos_ids_merge_sources_and_end_of_turn() -> None:
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[7, 9]),
                            config=SimpleNamespace(eos_token_id=7))
    tokenizer = SimpleNamespace(eos_token_id=3,
                                get_vocab=lambda: {"<|im_end|>": 11, "hello": 12})
    assert eos_token_ids_for(model, tokenizer) == (7, 9, 3, 11)
    assert eos_token_ids_for(model, None) == (7, 9)
