"""Architecture parameters of a Llama-family model, read from a transformers config.

Supported `model_type`s: ``llama`` (Llama 2/3, SmolLM/SmolLM2), ``mistral`` and ``qwen2``
(Qwen2 / Qwen2.5, which add biases to the Q/K/V projections). Anything else raises
`UnsupportedModelError` naming the model type. Reads both the transformers 5 layout
(``rope_parameters``) and the 4.x one (``rope_theta`` + ``rope_scaling``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import UnsupportedModelError

__all__ = ["SUPPORTED_MODEL_TYPES", "ModelConfig", "RopeScaling"]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")


@dataclass(frozen=True)
class RopeScaling:
    """Position-independent RoPE frequency scaling (``linear`` or ``llama3``)."""

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    """llama3 only."""
    high_freq_factor: float = 4.0
    """llama3 only."""
    original_max_position_embeddings: int = 8192
    """llama3 only: the context length (tokens) the model was pre-trained with."""


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: RopeScaling | None
    tie_word_embeddings: bool
    qkv_bias: bool
    """Bias on the Q, K and V projections (Qwen2, some Llamas)."""
    o_bias: bool
    """Bias on the attention output projection."""
    mlp_bias: bool
    sliding_window: int | None
    """Tokens a query may look back (itself included) in every layer; None = unlimited."""
    max_position_embeddings: int

    @property
    def kv_groups(self) -> int:
        """Query heads per K/V head (GQA)."""
        return self.num_heads // self.num_kv_heads

    @classmethod
    def from_hf(cls, hf_config: Any) -> ModelConfig:
        """Read a `transformers.PretrainedConfig` (or anything with the same attributes)."""
        model_type = str(getattr(hf_config, "model_type", "<missing>"))
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedModelError(
                f"model_type {model_type!r} is not supported by the engine "
                f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
            )
        act = getattr(hf_config, "hidden_act", "silu")
        if act != "silu":
            raise UnsupportedModelError(
                f"model_type {model_type!r}: hidden_act {act!r} is not supported (only 'silu')"
            )
        hidden = int(hf_config.hidden_size)
        heads = int(hf_config.num_attention_heads)
        kv_heads = int(getattr(hf_config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(hf_config, "head_dim", None) or hidden // heads)
        if heads % kv_heads:
            raise UnsupportedModelError(
                f"model_type {model_type!r}: {heads} heads not divisible by {kv_heads} KV heads"
            )
        theta, scaling = _read_rope(model_type, hf_config)
        if model_type == "qwen2":
            qkv_bias, o_bias, mlp_bias = True, False, False
        elif model_type == "mistral":
            qkv_bias, o_bias, mlp_bias = False, False, False
        else:
            attn_bias = bool(getattr(hf_config, "attention_bias", False))
            qkv_bias, o_bias = attn_bias, attn_bias
            mlp_bias = bool(getattr(hf_config, "mlp_bias", False))
        return cls(
            model_type=model_type,
            vocab_size=int(hf_config.vocab_size),
            hidden_size=hidden,
            intermediate_size=int(hf_config.intermediate_size),
            num_layers=int(hf_config.num_hidden_layers),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(hf_config.rms_norm_eps),
            rope_theta=theta,
            rope_scaling=scaling,
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            mlp_bias=mlp_bias,
            sliding_window=_read_sliding_window(model_type, hf_config),
            max_position_embeddings=int(getattr(hf_config, "max_position_embeddings", 2048)),
        )


def _read_rope(model_type: str, hf_config: Any) -> tuple[float, RopeScaling | None]:
    params: Mapping[str, Any] | None = getattr(hf_config, "rope_parameters", None)
    if params is not None and "rope_theta" not in params and "default" not in params:
        # Per-layer-type rope parameters (e.g. {"full_attention": {...}}): take the one set.
        values = list(params.values())
        if len(values) != 1 or not isinstance(values[0], Mapping):
            raise UnsupportedModelError(f"model_type {model_type!r}: per-layer RoPE not supported")
        params = values[0]
    if params is None:  # transformers 4.x layout
        params = dict(getattr(hf_config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    theta = float(params.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise UnsupportedModelError(f"model_type {model_type!r}: partial rotary not supported")
    kind = str(params.get("rope_type", params.get("type", "default")))
    if kind == "default":
        return theta, None
    if kind == "linear":
        return theta, RopeScaling(kind="linear", factor=float(params["factor"]))
    if kind == "llama3":
        return theta, RopeScaling(
            kind="llama3",
            factor=float(params["factor"]),
            low_freq_factor=float(params["low_freq_factor"]),
            high_freq_factor=float(params["high_freq_factor"]),
            original_max_position_embeddings=int(params["original_max_position_embeddings"]),
        )
    raise UnsupportedModelError(f"model_type {model_type!r}: rope type {kind!r} not supported")


def _read_sliding_window(model_type: str, hf_config: Any) -> int | None:
    window = getattr(hf_config, "sliding_window", None)
    if window is None or model_type == "llama":
        return None
    if model_type == "qwen2":
        if not getattr(hf_config, "use_sliding_window", False):
            return None
        layer_types = getattr(hf_config, "layer_types", None) or []
        if any(t != "sliding_attention" for t in layer_types):
            raise UnsupportedModelError(
                "model_type 'qwen2': sliding window on only some layers is not supported"
            )
    return int(window)
