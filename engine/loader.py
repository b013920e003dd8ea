"""Build a `PagedRunner` (and tokenizer) from a local transformers checkpoint.

Weights come through `transformers` (safetensors directories, or a GGUF file that
transformers de-quantises), are copied into the fused layout of `engine.model_weights`, and the
transformers model is dropped. Local paths only: nothing is fetched from a hub.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from engine.paged_runner import PagedRunner
    from engine.weight_formats import DensePrefill
    from engine.weight_quant import QuantizedTensors

__all__ = ["eos_token_ids_for", "load_runner", "resolve_dtype", "runner_from_hf_model"]

# Turn terminators of common chat templates, counted as EOS when the vocabulary has them.
_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>")


def load_runner(model_path: str | Path, *, gguf_file: str | None = None, device: str = "cpu",
                dtype: str = "float32", page_size: int = 16, num_pages: int = 1024,
                weights: str | None = None, cache_dir: Path | None = None,
                dense_prefill: DensePrefill = "auto", cuda_graphs: bool = False
                ) -> tuple[PagedRunner, PreTrainedTokenizerBase]:
    """Load weights and tokenizer from `model_path` (a directory) and build the runner.

    weights: None keeps dense weights in `dtype`; ``fp32`` / ``bf16`` / ``int8`` / ``int4``
    pick a weight format (see `engine.weight_formats`), which also sets the compute dtype
    (float32 for fp32, else bfloat16; `dtype` is then ignored). Quantized weights are
    cached in `cache_dir` when given (see `engine.weight_cache`); `dense_prefill` says
    whether they also keep a 16-bit copy for many rows (see
    `engine.weight_formats.dense_copy_for`); `cuda_graphs`: on CUDA, batch-1 decode steps
    as CUDA graphs (see `engine.graph_decode`)."""
    import transformers

    from engine.model_config import ModelConfig
    from engine.weight_formats import compute_dtype_for, resolve_weight_format

    path = Path(model_path)
    if not path.is_dir():
        raise EngineError(f"model directory not found: {path}")
    if gguf_file is not None and not (path / gguf_file).is_file():
        raise EngineError(f"GGUF file not found: {path / gguf_file}")
    fmt = None if weights is None else resolve_weight_format(weights, device)
    torch_dtype = resolve_dtype(dtype) if fmt is None else compute_dtype_for(fmt, device)
    load_dtype = resolve_dtype("float32") if fmt in ("bf16", "int8", "int4") else torch_dtype
    extra: dict[str, Any] = {"local_files_only": True}
    if gguf_file is not None:
        extra["gguf_file"] = gguf_file
    try:
        hf_config = transformers.AutoConfig.from_pretrained(str(path), **extra)
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot read a model config from {path}: {exc}") from exc
    config = ModelConfig.from_hf(hf_config)  # fail on unsupported architectures early
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), **extra)
        hf_model = transformers.AutoModelForCausalLM.from_pretrained(
            str(path), **extra, **_dtype_kwarg(transformers.__version__, load_dtype))
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot load the model in {path}: {exc}") from exc
    quantized = None
    if fmt in ("int8", "int4") and cache_dir is not None:
        from engine.model_weights import fused_linears
        from engine.weight_cache import load_or_quantize
        from engine.weight_formats import format_for_linear
        from engine.weight_quant import quantize_linear

        state = hf_model.state_dict()
        quantized = load_or_quantize(
            Path(cache_dir), path, fmt,
            lambda: ((name, quantize_linear(weight, format_for_linear(name, fmt)) or {})
                     for name, weight, _ in fused_linears(config, state)))
    eos = eos_token_ids_for(hf_model, tokenizer)
    runner = runner_from_hf_model(hf_model, device=device, dtype=torch_dtype,
                                  page_size=page_size, num_pages=num_pages, eos_token_ids=eos,
                                  weights=fmt, quantized=quantized,
                                  dense_prefill=dense_prefill, cuda_graphs=cuda_graphs)
    del hf_model  # our copies (or shared storage) live on in the runner
    return runner, tokenizer


def runner_from_hf_model(hf_model: Any, *, device: str = "cpu",
                         dtype: str | torch.dtype = "float32", page_size: int = 16,
                         num_pages: int = 1024, eos_token_ids: Sequence[int] | None = None,
                         weights: str | None = None,
                         quantized: Mapping[str, QuantizedTensors] | None = None,
                         dense_prefill: DensePrefill = "auto", cuda_graphs: bool = False
                         ) -> PagedRunner:
    """A runner using the weights of a loaded transformers ``*ForCausalLM``. `weights` and
    `dense_prefill` as in `load_runner` (a format also sets the compute dtype);
    `quantized`: ready tensors by linear name (from `engine.weight_cache`), else int8/int4
    quantize here."""
    from engine.model_config import ModelConfig
    from engine.model_weights import weights_from_state_dict
    from engine.paged_runner import PagedRunner
    from engine.weight_formats import compute_dtype_for, dense_copy_for, resolve_weight_format

    config = ModelConfig.from_hf(hf_model.config)
    fmt = None if weights is None else resolve_weight_format(weights, device)
    torch_dtype = resolve_dtype(dtype) if fmt is None else compute_dtype_for(fmt, device)
    state = {name: tensor for name, tensor in hf_model.state_dict().items()}
    built = weights_from_state_dict(config, state, device=device, dtype=torch_dtype, fmt=fmt,
                                    quantized=quantized,
                                    dense=dense_copy_for(dense_prefill, device))
    if eos_token_ids is None:
        eos_token_ids = eos_token_ids_for(hf_model, None)
    return PagedRunner(config, built, page_size=page_size, num_pages=num_pages,
                       eos_token_ids=eos_token_ids, device=device, dtype=torch_dtype,
                       cuda_graphs=cuda_graphs)


def eos_token_ids_for(hf_model: Any, tokenizer: Any | None) -> tuple[int, ...]:
    """End-of-sequence ids from the generation config, model config and tokenizer, plus
    chat end-of-turn tokens (``<|im_end|>``, ``<|eot_id|>``) the vocabulary defines."""
    found: list[int] = []
    generation_config = getattr(hf_model, "generation_config", None)
    for source in (generation_config, getattr(hf_model, "config", None), tokenizer):
        found.extend(_as_ids(getattr(source, "eos_token_id", None)))
    if tokenizer is not None:
        vocab = tokenizer.get_vocab()
        found.extend(vocab[t] for t in _END_OF_TURN_TOKENS if t in vocab)
    return tuple(dict.fromkeys(found))


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"``/``"fp32"``, ``"bfloat16"``/``"bf16"``, ``"float16"``/``"fp16"``."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    try:
        return names[dtype.lower()]
    except KeyError:
        raise EngineError(f"unsupported dtype {dtype!r} (use one of {', '.join(names)})") from None


def _as_ids(value: int | Iterable[int] | None) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def _dtype_kwarg(version: str, dtype: torch.dtype) -> dict[str, Any]:
    """transformers renamed ``torch_dtype`` to ``dtype`` in 4.56."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}
