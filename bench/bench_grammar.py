"""Grammar-constrained decoding libraries, side by side: what a tool call's JSON costs.

Not a test: prints figures. For each library installed (llguidance, xgrammar,
outlines-core: `grammar_libraries.py`) and each tokenizer (the packaged SmolLM2's 49,152
ids; the engine tests' 256-id byte tokenizer), on a three-tool call schema
(`engine.grammar.tool_call_schema`) and two calls (one mostly structure, one mostly a
string):

- vocab ms: building the library's tokenizer information (once per tokenizer);
- compile ms: compiling the schema against it (once per schema, cached by the engine);
- mask us: one decode step's mask, mean and p95: the allowed-token bitmask computed and
  applied to a float32 logits row (`engine.grammar.apply_bitmask`, the same for every
  library); step us: the mask and the sampled token consumed, over the tokens of the call;
- tokens: the call's length in tokens.

A last row per tokenizer, ``engine``, is `engine.grammar.JsonSchemaConstraint` itself
(mask, then advance), the path the sampler takes.

    .venv/bin/python bench/bench_grammar.py [--tokenizer smollm2,tiny] [--rounds 20]
        [--libs llguidance,xgrammar,outlines-core] [--model DIR] [--no-write]

Writes bench/results/grammar.md. A library that is not installed is reported as such; the
project installs xgrammar only. To compare all three, install the other two into a scratch
virtualenv that sees the project's packages, e.g.::

    python3 -m venv /tmp/gv && echo "$PWD/.venv/lib/python3.11/site-packages" \
        > /tmp/gv/lib/python3.11/site-packages/project.pth
    /tmp/gv/bin/pip install --no-deps llguidance outlines-core
    PYTHONPATH=. /tmp/gv/bin/python bench/bench_grammar.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from grammar_libraries import CANDIDATES, Candidate, Tok, smollm2_tokenizer, tiny_tokenizer
from results import Report, add_no_write, write_results

from engine.grammar import apply_bitmask, bias_table, tool_call_schema

TOOLS: dict[str, dict[str, Any]] = {
    "set_timer": {
        "type": "object",
        "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}},
        "required": ["seconds", "label"], "additionalProperties": False,
    },
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"},
                       "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False,
    },
    "play_music": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "shuffle": {"type": "boolean"}},
        "required": ["query"], "additionalProperties": False,
    },
}
CALLS = {
    "timer": {"name": "set_timer", "arguments": {"seconds": 300, "label": "tea is ready"}},
    "music": {"name": "play_music",
              "arguments": {"query": "the slow movement of a piano concerto by Mozart, "
                                     "played softly, nothing with singing in it please",
                            "shuffle": False}},
}
"""The calls each matcher spells (compact separators, as the grammars are compiled): a
short one, mostly structure, and one mostly inside a string."""


@dataclass(frozen=True)
class Row:
    lib: str
    tokenizer: str
    call: str
    vocab_ms: float
    compile_ms: float
    mask_us: list[float]
    """Per step: the bitmask computed and applied to a logits row."""
    advance_us: list[float]
    """Per step: the sampled token consumed."""
    tokens: int
    note: str = ""

Steps = tuple[list[float], list[float]]
"""Seconds per step: (mask, advance)."""


@dataclass
class Setup:
    """A library's one-time work done, ready to run matchers."""

    row: Row
    run: Callable[[], Steps] | None
    """One matcher over the whole call."""


def set_up(cand: Candidate, tok: Tok, call: str, schema: dict[str, Any], ids: list[int],
           vocabs: dict[str, tuple[Any, float]]) -> Setup:
    """``vocabs``: each library's vocabulary for ``tok`` and what it took (ms), built on
    first use (once per tokenizer)."""
    if importlib.util.find_spec(cand.module) is None:
        return Setup(Row(cand.name, tok.name, call, 0, 0, [], [], len(ids), "not installed"),
                     None)
    importlib.import_module(cand.module)  # importing is not the vocabulary's cost
    if cand.name not in vocabs:
        t0 = time.perf_counter()
        vocabs[cand.name] = cand.vocab(tok), (time.perf_counter() - t0) * 1e3
    vocab, vocab_ms = vocabs[cand.name]
    t1 = time.perf_counter()
    compiled = cand.compile(vocab, schema)
    compile_ms = (time.perf_counter() - t1) * 1e3
    logits = torch.randn(tok.vocab, generator=torch.Generator().manual_seed(0))
    mask = torch.zeros((tok.vocab + 31) // 32, dtype=torch.int32)
    table = bias_table()

    def run() -> Steps:
        fill, consume = cand.matcher(compiled)
        masks, advances = [], []
        for token in ids:
            t0 = time.perf_counter()
            fill(mask)
            masked = apply_bitmask(logits, mask, table)
            t1 = time.perf_counter()
            consume(token)
            masks.append(t1 - t0)
            advances.append(time.perf_counter() - t1)
            if not torch.isfinite(masked[token]):
                raise RuntimeError(f"{cand.name} masked out token {token} of a valid call")
        return masks, advances
    return Setup(Row(cand.name, tok.name, call, vocab_ms, compile_ms, [], [], len(ids)), run)


def set_up_engine(tok: Tok, call: str, schema: dict[str, Any], ids: list[int],
                  vocabs: dict[str, tuple[Any, float]]) -> Setup:
    from engine.grammar import GrammarVocabulary, JsonSchemaConstraint

    if "engine" not in vocabs:
        t0 = time.perf_counter()
        vocab = (GrammarVocabulary.from_tokenizer(tok.hf, vocab_size=tok.vocab,
                                                  stop_token_ids=[tok.eos])
                 if tok.hf is not None
                 else GrammarVocabulary.from_pieces(tok.pieces, stop_token_ids=[tok.eos]))
        vocabs["engine"] = vocab, (time.perf_counter() - t0) * 1e3
    vocab, vocab_ms = vocabs["engine"]
    cached = "engine compiled" in vocabs
    t1 = time.perf_counter()
    grammar = vocab.compile(json.dumps(schema))
    compile_ms = (time.perf_counter() - t1) * 1e3
    vocabs["engine compiled"] = (grammar, compile_ms)
    logits = torch.randn(tok.vocab, generator=torch.Generator().manual_seed(0))

    def run() -> Steps:
        constraint = JsonSchemaConstraint(grammar)
        masks, advances = [], []
        for token in ids:
            t0 = time.perf_counter()
            constraint.mask(logits)
            t1 = time.perf_counter()
            constraint.advance(token)
            masks.append(t1 - t0)
            advances.append(time.perf_counter() - t1)
        if not constraint.is_done():
            raise RuntimeError("the engine's constraint did not finish on a whole call")
        return masks, advances
    note = "JsonSchemaConstraint" + ("; compile: the vocabulary's cache" if cached else "")
    return Setup(Row("engine", tok.name, call, vocab_ms, compile_ms, [], [], len(ids), note),
                 run)


def measure(setups: list[Setup], rounds: int) -> list[Row]:
    """Rounds of every library in turn, so that a disturbance hits them all."""
    masks: list[list[float]] = [[] for _ in setups]
    advances: list[list[float]] = [[] for _ in setups]
    for _ in range(rounds):
        for i, setup in enumerate(setups):
            if setup.run is not None:
                m, a = setup.run()
                masks[i] += [s * 1e6 for s in m]
                advances[i] += [s * 1e6 for s in a]
    return [replace(s.row, mask_us=m, advance_us=a)
            for s, m, a in zip(setups, masks, advances, strict=True)]

def stats(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    return statistics.fmean(values), float(np.percentile(values, 95))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="smollm2,tiny")
    parser.add_argument("--libs", default=",".join(CANDIDATES))
    parser.add_argument("--rounds", type=int, default=20,
                        help="matchers run over each whole call (steps = rounds x tokens)")
    parser.add_argument("--model", type=Path, default=None,
                        help="a transformers model directory for the smollm2 row's tokenizer "
                        "(default: the packaged SmolLM2, converted or its GGUF)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-engine", action="store_true",
                        help="the libraries alone, without engine.grammar's own row")
    add_no_write(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    schema = tool_call_schema(TOOLS)
    libs = [n.strip() for n in args.libs.split(",") if n.strip()]
    rows: list[Row] = []
    for name in [n.strip() for n in args.tokenizer.split(",") if n.strip()]:
        tok = smollm2_tokenizer(args.model) if name == "smollm2" else tiny_tokenizer()
        vocabs: dict[str, tuple[Any, float]] = {}
        for call, value in CALLS.items():
            ids = tok.encode(json.dumps(value, separators=(",", ":")))
            setups = [set_up(CANDIDATES[lib], tok, call, schema, ids, vocabs) for lib in libs]
            if not args.no_engine:
                setups.append(set_up_engine(tok, call, schema, ids, vocabs))
            rows += measure(setups, args.rounds)
    report = Report()
    report.line(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds; "
                f"schema: {len(TOOLS)} tools ({', '.join(TOOLS)}); mask = bitmask + apply, "
                "step = mask + advance; times in us are means, p95 beside them")
    table = []
    for r in rows:
        if not r.mask_us:
            table.append([r.lib, r.tokenizer, r.call, *["-"] * 6, r.tokens, r.note])
            continue
        mask, mask95 = stats(r.mask_us)
        step, step95 = stats([m + a for m, a in zip(r.mask_us, r.advance_us, strict=True)])
        table.append([r.lib, r.tokenizer, r.call, f"{r.vocab_ms:.1f}", f"{r.compile_ms:.1f}",
                      f"{mask:.1f}", f"{mask95:.1f}", f"{step:.1f}", f"{step95:.1f}", r.tokens,
                      r.note])
    report.table(["library", "tokenizer", "call", "vocab ms", "compile ms", "mask us", "p95",
                  "step us", "p95", "tokens", "note"], table)
    if not args.no_write:
        write_results("grammar", report.blocks, command=sys.orig_argv)

if __name__ == "__main__":
    main()
