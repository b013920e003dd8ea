"""Connecting to vLLM replicas: what they serve, and whether their ids mean ours.

The dialogue tokenizes with the local tokenizer (the converted model directory) and
sends ids, so the server's tokenizer must give the same ids for the same text,
special tokens included; :func:`check_tokenizer` compares both on probe texts and
:func:`connect` refuses a server that differs (a clear error, never garbled replies).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from assistant.llm.vllm.backend import VLLMBackend
from assistant.llm.vllm.client import Endpoint, Unreachable
from assistant.llm.vllm.remote_model import RemoteModel
from assistant.llm.vllm.router import Router

__all__ = ["VLLMOptions", "TokenizerMismatch", "connect", "check_tokenizer", "describe",
           "load_tokenizer", "PROBES"]

_log = logging.getLogger(__name__)

PROBES = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n",
    "Hello, world! It's 3:45 pm -- naïve café, ☃ 日本語 😀 <|im_end|>\n",
    "   leading spaces\ttabs\n\nand 12345678901234567890 digits.",
)
"""Texts whose ids must agree: chat-template special tokens, unicode, whitespace."""


class TokenizerMismatch(ValueError):
    """The server's tokenizer gives other ids than the local one."""


@dataclass(frozen=True)
class VLLMOptions:
    urls: tuple[str, ...]
    block_size: int = 32
    """The servers' ``--block-size`` (prefix-cache accounting)."""
    windowed_penalty: bool = True
    """The servers load :mod:`assistant.llm.vllm.penalty` (see `RemoteModel`)."""
    retry_after_s: float = 10.0
    timeout_s: float = 300.0


def load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)


def _model_facts(model_dir: Path, tokenizer: Any) -> tuple[int, tuple[int, ...]]:
    """(vocabulary size, end-of-sequence ids) as the local engine derives them."""
    from transformers import AutoConfig, GenerationConfig

    from engine.loader import eos_token_ids_for

    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    try:
        generation = GenerationConfig.from_pretrained(str(model_dir), local_files_only=True)
    except OSError:
        generation = None
    eos = eos_token_ids_for(SimpleNamespace(config=config, generation_config=generation),
                            tokenizer)
    vocab = int(getattr(config, "vocab_size", 0) or 0) or len(tokenizer)
    return vocab, eos


def describe(endpoint: Endpoint) -> tuple[str, int]:
    """(model id, max_model_len) of the first model the server lists."""
    models = endpoint.get_json("/v1/models").get("data") or []
    if not models:
        raise RuntimeError(f"{endpoint.url}: serves no model")
    return str(models[0]["id"]), int(models[0]["max_model_len"])


def check_tokenizer(endpoint: Endpoint, model: str, tokenizer: Any,
                    probes: Sequence[str] = PROBES) -> None:
    """Raise `TokenizerMismatch` naming the first probe whose ids differ."""
    for text in probes:
        local = [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]
        answer = endpoint.post_json("/tokenize", {"model": model, "prompt": text,
                                                  "add_special_tokens": False})
        remote = [int(t) for t in answer.get("tokens") or []]
        if local != remote:
            at = next((i for i, (a, b) in enumerate(zip(local, remote, strict=False))
                       if a != b), min(len(local), len(remote)))
            raise TokenizerMismatch(
                f"{endpoint.url} serves {model} with another tokenizer: {text!r} is "
                f"{local[at:at + 5]}... here and {remote[at:at + 5]}... there (from token "
                f"{at}); point engine.url at a server of models.llm, or models.llm at its model")


def connect(opts: VLLMOptions, model_dir: Path, *, tokenizer: Any | None = None,
            progress: Callable[[str], None] | None = None) -> VLLMBackend:
    """A backend over ``opts.urls``; every reachable replica must serve the same model
    with our tokenizer. Replicas down now are marked so (tried again later); at least
    one must answer."""
    say = progress or (lambda _msg: None)
    tok = tokenizer if tokenizer is not None else load_tokenizer(model_dir)
    endpoints = [Endpoint(u, timeout_s=opts.timeout_s) for u in opts.urls]
    router = Router(endpoints, block_size=opts.block_size, retry_after_s=opts.retry_after_s)
    served: tuple[str, int] | None = None
    for replica in router.replicas:
        try:
            name, max_len = describe(replica.endpoint)
        except Unreachable as exc:
            say(f"vLLM replica {replica.url} is not reachable ({exc}); continuing without it")
            router.failed(replica, exc)
            continue
        if served is not None and served != (name, max_len):
            raise RuntimeError(f"{replica.url} serves {name} (max_model_len {max_len}), "
                               f"another replica {served[0]} ({served[1]}): replicas must "
                               "serve the same model")
        check_tokenizer(replica.endpoint, name, tok)
        served = (name, max_len)
        say(f"vLLM replica {replica.url}: {name}, {max_len} positions, tokenizer matches")
    if served is None:
        raise Unreachable("no vLLM replica answered: " + ", ".join(opts.urls))
    vocab, eos = _model_facts(model_dir, tok)
    model = RemoteModel(name=served[0], max_positions=served[1], vocab_size=vocab,
                        eos_token_ids=eos, block_size=opts.block_size,
                        windowed_penalty=opts.windowed_penalty)
    return VLLMBackend(router, model, tok)
