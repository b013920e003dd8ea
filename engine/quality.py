"""Quality gates for weight formats: perplexity on a fixed text and greedy agreement.

Hermetic: the text is generated from a seeded grammar (no downloads), so every run and
every format sees the same tokens. Used by ``bench/bench_engine.py`` (full size) and the
tests (smaller, loose bounds).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.runner import DecodeItem

if TYPE_CHECKING:
    from engine.paged_runner import PagedRunner

__all__ = ["Agreement", "fixed_text", "greedy_agreement", "greedy_tokens", "perplexity",
           "quality_prompts"]

_NAMES = ("Mara", "Tomas", "the old keeper", "a young doctor", "the baker", "Professor Lind",
          "my neighbour", "the ship's captain", "a tired student", "the mayor", "Aunt Ruth",
          "the gardener")
_PLACES = ("by the harbour", "in the library", "on the hill above the town", "at the market",
           "near the river", "in a small kitchen", "under the bridge", "at the train station",
           "in the workshop", "on the northern road")
_TIMES = ("Early in the morning", "Late that evening", "On the first day of spring",
          "After the storm", "Before anyone else woke up", "During the long winter",
          "At noon", "Some years later", "On a quiet Sunday", "When the bells rang")
_ACTIONS = ("repaired the broken clock", "wrote a long letter to a friend",
            "counted the boats returning home", "planted a row of beans",
            "read an old map of the coast", "baked bread for the whole street",
            "argued about the price of coal", "listened to the wind in the chimney",
            "painted the door a bright blue", "carried water up from the well",
            "measured the height of the tide", "taught a child to play chess")
_REASONS = ("because nobody else would do it", "since the weather had finally turned",
            "although it seemed a little foolish", "so that the work would be finished in time",
            "as the doctor had advised", "while the others were still asleep",
            "because it reminded them of home", "even though the light was fading")
_FACTS = ("Water boils at a lower temperature on high mountains, where the air pressure is "
          "lower.", "The moon takes about twenty-seven days to circle the Earth.",
          "Bees communicate the direction of flowers with a short dance.",
          "A kilometre is a thousand metres, and a mile is a little more than one and a half "
          "kilometres.", "Most of the oxygen we breathe comes from tiny plants in the ocean.",
          "Copper turns green when it is exposed to air and rain for many years.",
          "The heart of an adult beats roughly seventy times a minute at rest.",
          "Light from the sun reaches the Earth in a little over eight minutes.")
_QUESTIONS = ("What is the capital of France?", "How do I boil an egg?",
              "Tell me a fun fact about octopuses.", "Why is the sky blue?",
              "Give me three tips for sleeping better.", "What is two plus two?",
              "Write a haiku about autumn.", "How far is the moon?",
              "What should I cook for dinner tonight?", "Explain what a prime number is.",
              "Who wrote Romeo and Juliet?", "How do plants make food?",
              "What is the difference between weather and climate?",
              "Suggest a name for a small black cat.", "How many legs does a spider have?",
              "What does a bicycle chain do?", "Describe the ocean in two sentences.",
              "Why do we have seasons?", "How do I say thank you in Spanish?",
              "What is a good way to learn to type faster?")


def fixed_text(paragraphs: int = 40, seed: int = 1234) -> str:
    """Deterministic English prose of short narrative paragraphs and facts (~70 tokens
    per paragraph with the SmolLM2 tokenizer)."""
    rng = random.Random(seed)
    out = []
    for _ in range(paragraphs):
        who, other = rng.sample(_NAMES, 2)
        sentences = [
            f"{rng.choice(_TIMES)}, {who} {rng.choice(_ACTIONS)} {rng.choice(_PLACES)}.",
            f"{other.capitalize()} {rng.choice(_ACTIONS)} {rng.choice(_REASONS)}.",
            rng.choice(_FACTS),
        ]
        rng.shuffle(sentences)
        out.append(" ".join(sentences))
    return "\n\n".join(out)


def quality_prompts(count: int = 20) -> list[str]:
    """`count` fixed user questions (cycled past 20)."""
    return [_QUESTIONS[i % len(_QUESTIONS)] for i in range(count)]


def perplexity(runner: PagedRunner, token_ids: Sequence[int], *, chunk: int = 512) -> float:
    """exp(mean NLL) of tokens 1..N-1 given their prefix, prefilled in `chunk`-token
    pieces on one sequence (pages 0..; the runner's K/V is overwritten)."""
    import torch

    ids = [int(t) for t in token_ids]
    if len(ids) < 2:
        raise ValueError("perplexity needs at least 2 tokens")
    pages = list(range(-(-len(ids) // runner.page_size)))
    if len(pages) > runner.num_pages:
        raise ValueError(f"{len(ids)} tokens need {len(pages)} pages, runner has "
                         f"{runner.num_pages}")
    total = 0.0
    for start in range(0, len(ids) - 1, chunk):
        piece = ids[start:start + chunk]
        logits = runner.prefill(pages, start, piece, all_logits=True)
        targets = torch.tensor(ids[start + 1:start + 1 + len(piece)])
        logp = torch.log_softmax(logits[:len(targets)].double(), dim=-1)
        total -= float(logp.gather(1, targets[:, None]).sum())
    return math.exp(total / (len(ids) - 1))


def greedy_tokens(runner: PagedRunner, prompts: Sequence[Sequence[int]], count: int, *,
                  batch: int = 8) -> list[list[int]]:
    """`count` greedy tokens after each prompt (each prompt on its own run of pages),
    decoded `batch` prompts at a time: the engine's default ``max_batch``, so the steps
    take the kernels a served decode takes (20 rows at once would take the prefill path's
    dense copy, see `engine.weight_formats.DENSE_ROWS`)."""
    return _argmax_tokens(runner, prompts, count, batch, None)


def _argmax_tokens(runner: PagedRunner, prompts: Sequence[Sequence[int]], count: int,
                   batch: int, forced: Sequence[Sequence[int]] | None) -> list[list[int]]:
    """The argmax after each prompt and after each of the next ``count - 1`` tokens, which
    are the argmaxes themselves, or `forced`'s tokens (teacher forcing) when given."""
    width = -(-max(len(p) + count for p in prompts) // runner.page_size)
    if width * len(prompts) > runner.num_pages:
        raise ValueError(f"need {width * len(prompts)} pages, runner has {runner.num_pages}")
    tables = [list(range(i * width, (i + 1) * width)) for i in range(len(prompts))]
    out = [[int(runner.prefill(table, 0, list(p))[-1].argmax())]
           for table, p in zip(tables, prompts, strict=True)]
    feed = out if forced is None else forced
    for first in range(0, len(prompts), batch):
        group = range(first, min(first + batch, len(prompts)))
        for step in range(count - 1):
            items = [DecodeItem(tables[i], len(prompts[i]) + step, feed[i][step])
                     for i in group]
            logits = runner.decode(items)
            for i, token in zip(group, logits.argmax(dim=-1).tolist(), strict=True):
                out[i].append(int(token))
    return out


@dataclass(frozen=True)
class Agreement:
    prompts: int
    tokens: int
    """Tokens generated per prompt."""
    identical: int
    """Prompts whose whole greedy continuation equals the reference."""
    prefix_fraction: float
    """Mean over prompts of (common prefix with the reference) / tokens."""
    teacher_forced: float
    """Fraction of positions where the argmax equals the reference's next token when both
    read the reference continuation, a decode step per token (no compounding after a
    first flip)."""


def greedy_agreement(runner: PagedRunner, reference: Sequence[Sequence[int]],
                     prompts: Sequence[Sequence[int]], *, batch: int = 8) -> Agreement:
    """Compare `runner`'s greedy continuations with `reference` (one per prompt, e.g. from
    fp32 via `greedy_tokens`), both decoded `batch` prompts at a time."""
    count = len(reference[0])
    ours = greedy_tokens(runner, prompts, count, batch=batch)
    identical = 0
    prefix = 0
    for mine, ref in zip(ours, reference, strict=True):
        same = next((i for i, (a, b) in enumerate(zip(mine, ref, strict=True)) if a != b),
                    count)
        prefix += same
        identical += same == count
    forced = _argmax_tokens(runner, prompts, count, batch, reference)
    matches = sum(int(a == b) for mine, ref in zip(forced, reference, strict=True)
                  for a, b in zip(mine, ref, strict=True))
    n = len(prompts)
    return Agreement(prompts=n, tokens=count, identical=identical,
                     prefix_fraction=prefix / (n * count),
                     teacher_forced=matches / (n * count))
