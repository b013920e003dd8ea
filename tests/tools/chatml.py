"""A hermetic ChatML tokenizer for chat-template tests: byte-level BPE with no merges
(every byte a token, so any text round-trips), ``<|im_start|>`` / ``<|im_end|>`` as special
tokens and ``<tool_call>`` / ``</tool_call>`` as added ones (as in Qwen2.5's vocabulary),
with a chat template from ``tests/tools/data`` or given as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
QWEN2_5_TEMPLATE = (DATA / "qwen2_5_chat_template.jinja").read_text(encoding="utf-8")
"""Qwen2.5-Instruct's chat template (tools in the system turn, Hermes-style calls)."""

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}")
"""SmolLM2-135M-Instruct's chat template, as its packaged GGUF carries it (ChatML that
never looks at ``tools``)."""


def chatml_tokenizer(template: str = QWEN2_5_TEMPLATE) -> Any:
    """A transformers fast tokenizer with `template` as its chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    tokenizer.add_tokens(["<tool_call>", "</tool_call>"])
    tokenizer.chat_template = template
    return tokenizer
