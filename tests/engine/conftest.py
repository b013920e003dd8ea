"""Engine test fixtures: tiny random-weight transformers models built from configs.

Every fixture here is prefixed ``tiny_`` (the model and cache test modules share this
file). Weights are seeded and scaled up from transformers' default init, and biases are
made non-zero, so that a wrong head layout, rotary angle or bias shows in the logits.
"""

from __future__ import annotations

from typing import Any

import pytest

TINY_VOCAB = 256
"""Vocabulary size of every tiny model."""


def build_tiny_model(kind: str, *, seed: int = 0) -> Any:
    """An eval-mode fp32 ``*ForCausalLM`` with 2 layers, 4 query heads over 2 K/V heads.

    kind: ``llama`` (untied lm_head, llama3 rope scaling that is active within 100
    positions), ``qwen2`` (Q/K/V biases, tied embeddings) or ``mistral`` (sliding window
    of 8 tokens).
    """
    import torch
    import transformers

    common: dict[str, Any] = dict(
        vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    if kind == "llama":
        config: Any = transformers.LlamaConfig(
            **common, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 32})
    elif kind == "qwen2":
        config = transformers.Qwen2Config(**common, tie_word_embeddings=True,
                                          rope_parameters={"rope_type": "default",
                                                           "rope_theta": 1000.0})
    elif kind == "mistral":
        config = transformers.MistralConfig(**common, sliding_window=8,
                                            tie_word_embeddings=False)
    else:
        raise ValueError(f"unknown tiny model kind {kind!r}")
    torch.manual_seed(seed)
    model_cls = {"llama": transformers.LlamaForCausalLM,
                 "qwen2": transformers.Qwen2ForCausalLM,
                 "mistral": transformers.MistralForCausalLM}[kind]
    model = model_cls(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.add_(torch.randn_like(param) * 0.1)
    return model


@pytest.fixture(scope="session")
def tiny_llama() -> Any:
    return build_tiny_model("llama")


@pytest.fixture(scope="session")
def tiny_qwen2() -> Any:
    return build_tiny_model("qwen2")


@pytest.fixture(scope="session")
def tiny_mistral() -> Any:
    return build_tiny_model("mistral")
