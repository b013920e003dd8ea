"""Grammar-constrained sampling: a JSON schema as a mask on the next-token logits.

A generation whose `engine.params.SamplingParams.json_schema` is set samples only ids that
keep its text a prefix of a JSON document matching the schema (compact: no whitespace
between tokens of the JSON, ``,`` and ``:`` as separators), so a tool call's arguments are
valid by construction. The grammar work is xgrammar's (the library vLLM's structured
outputs use by default, so both backends constrain alike):

- `GrammarVocabulary`: a tokenizer's vocabulary as xgrammar reads it, and a compiler over
  it that caches what it compiled. Built once per tokenizer by whoever owns the tokenizer
  (the engine keeps one, see `engine.engine.Engine.grammar_vocabulary`), never a global.
- `JsonGrammar`: one schema compiled against one vocabulary; immutable and shared by
  every generation under that schema.
- `JsonSchemaConstraint`: one generation's position in its grammar: `mask` the logits,
  `advance` by the id sampled, `is_done` once the document is whole and nothing but a stop
  id could follow (the generation then ends there, as if that stop id had been sampled).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = [
    "GrammarError",
    "GrammarVocabulary",
    "JsonGrammar",
    "JsonSchemaConstraint",
    "apply_bitmask",
    "bias_table",
    "canonical_schema",
    "tool_call_schema",
]

SEPARATORS = (",", ":")
"""Item and key separators of the JSON the grammars allow: compact, no whitespace (a
vLLM server does the same with ``disable_any_whitespace``)."""


class GrammarError(ValueError):
    """A schema that cannot be compiled, a tokenizer whose vocabulary cannot be read, or a
    token that its grammar does not allow."""


def tool_call_schema(tools: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call of one of ``tools`` (name -> that tool's parameters
    schema): an object ``{"name": <a tool's name>, "arguments": <its parameters>}``, one
    alternative per tool, so that a tool's arguments are checked against its own schema."""
    if not tools:
        raise ValueError("a tool call schema needs at least one tool")
    calls = [{"type": "object",
              "properties": {"name": {"const": name}, "arguments": dict(parameters)},
              "required": ["name", "arguments"], "additionalProperties": False}
             for name, parameters in tools.items()]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def canonical_schema(schema: str | Mapping[str, Any]) -> str:
    """``schema`` (JSON text or a mapping) as compact JSON text, the form `SamplingParams`
    keeps and grammars are cached by. Keys keep their order: a grammar generates an
    object's properties in the order its schema declares them. Raises `GrammarError` when
    it is not a JSON object."""
    try:
        value = json.loads(schema) if isinstance(schema, str) else dict(schema)
    except (TypeError, ValueError) as exc:
        raise GrammarError(f"a JSON schema must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise GrammarError(f"a JSON schema must be a JSON object, got {type(value).__name__}")
    try:
        return json.dumps(value, separators=SEPARATORS, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise GrammarError(f"a JSON schema must be JSON: {exc}") from None


class GrammarVocabulary:
    """A tokenizer's vocabulary as the grammar compiler reads it (which ids spell which
    bytes, which ids are special, which stop), and the compiler over it, which keeps what
    it compiled (`compile` of a schema seen before costs nothing). Build one per tokenizer
    with `from_tokenizer` or `from_pieces`, and keep it."""

    def __init__(self, info: Any, *, cache_bytes: int = 64 << 20) -> None:
        """``info``: an ``xgrammar.TokenizerInfo``; ``cache_bytes``: what compiled
        grammars the compiler keeps may take (least recently used go first)."""
        import xgrammar

        self._compiler = xgrammar.GrammarCompiler(info, cache_enabled=True,
                                                  cache_limit_bytes=cache_bytes)
        self.vocab_size: int = int(info.vocab_size)
        """Width of the logits rows the masks are for."""
        self.stop_token_ids: tuple[int, ...] = tuple(int(t) for t in info.stop_token_ids)
        """Ids allowed once a document is whole (and only then)."""
        self.printable = _printable_bitmask(info.decoded_vocab, self.vocab_size,
                                            self.stop_token_ids)
        """Bitmask of the ids whose bytes have no control character (below 0x20), and
        of the stop ids: compact JSON never holds a raw one (whitespace is not allowed
        between tokens, and a string escapes them), so every grammar's mask is cut to
        these (xgrammar lets some strings, those with a ``maxLength``, take them)."""

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, *, vocab_size: int,
                       stop_token_ids: Iterable[int] = ()) -> GrammarVocabulary:
        """From a transformers tokenizer; ``vocab_size``: the model's logits width (may be
        larger than the tokenizer's, the rest never allowed); ``stop_token_ids``: the ids
        that end a generation (the tokenizer's EOS when empty)."""
        import xgrammar

        stops = [int(t) for t in stop_token_ids] or None
        try:
            info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                           stop_token_ids=stops)
        except Exception as exc:  # xgrammar reads transformers' tokenizers only
            raise GrammarError(
                f"cannot read the vocabulary of {type(tokenizer).__name__} for constrained "
                f"decoding ({type(exc).__name__}: {exc}); build a GrammarVocabulary with "
                "from_pieces and pass it to the Engine") from exc
        return cls(info)

    @classmethod
    def from_pieces(cls, pieces: Sequence[bytes], *, stop_token_ids: Iterable[int],
                    vocab_size: int | None = None) -> GrammarVocabulary:
        """From each id's bytes (``pieces[i]`` is what id ``i`` spells; an empty piece is
        never allowed); ``vocab_size`` defaults to ``len(pieces)``."""
        import xgrammar

        stops = [int(t) for t in stop_token_ids]
        if not stops:
            raise GrammarError("a vocabulary needs at least one stop id")
        info = xgrammar.TokenizerInfo(list(pieces), xgrammar.VocabType.RAW,
                                      vocab_size=vocab_size or len(pieces),
                                      stop_token_ids=stops)
        return cls(info)

    def compile(self, schema: str | Mapping[str, Any]) -> JsonGrammar:
        """``schema`` compiled (or taken from the cache): raises `GrammarError` if it is not
        a JSON schema the compiler supports."""
        text = canonical_schema(schema)
        try:
            compiled = self._compiler.compile_json_schema(
                text, any_whitespace=False, separators=SEPARATORS, strict_mode=True)
        except Exception as exc:  # xgrammar raises RuntimeError / ValueError on bad schemas
            raise GrammarError(f"cannot compile the JSON schema: {exc}") from exc
        return JsonGrammar(compiled, self.vocab_size, self.stop_token_ids, text,
                           self.printable)


class JsonGrammar:
    """A schema compiled against a vocabulary (`GrammarVocabulary.compile`); start a
    generation's constraint with `JsonSchemaConstraint(grammar)`."""

    def __init__(self, compiled: Any, vocab_size: int, stop_token_ids: tuple[int, ...],
                 schema: str, printable: torch.Tensor) -> None:
        self.compiled = compiled
        """The ``xgrammar.CompiledGrammar``."""
        self.vocab_size = vocab_size
        self.stop_token_ids = stop_token_ids
        self.schema = schema
        """The schema, canonical JSON text."""
        self.printable = printable
        """`GrammarVocabulary.printable`."""
        self.table = bias_table()
        """`apply_bitmask`'s table, made once per grammar."""


class JsonSchemaConstraint:
    """One generation's state in a `JsonGrammar`. Call `mask` on each step's logits, then
    `advance` with the id sampled from them; `is_done` says the document is whole and only a
    stop id could follow."""

    def __init__(self, grammar: JsonGrammar) -> None:
        import xgrammar

        self.grammar = grammar
        self._matcher = xgrammar.GrammarMatcher(grammar.compiled)
        self._bitmask = xgrammar.allocate_token_bitmask(1, grammar.vocab_size)
        self._mask_valid = False  # the bitmask is this state's
        self._done = False

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """A new ``[vocab]`` float32 row: ``logits`` where the grammar allows the id,
        -inf elsewhere (``logits`` itself is not changed)."""
        self._fill()
        return apply_bitmask(logits, self._bitmask[0], self.grammar.table)

    def advance(self, token_id: int) -> None:
        """Take the id sampled; raises `GrammarError` if the grammar does not allow it
        (it was sampled from logits this constraint did not mask)."""
        if self._done:
            raise GrammarError(f"token {token_id} after the JSON document was complete")
        if not self._matcher.accept_token(int(token_id)):
            raise GrammarError(f"token {token_id} is not allowed by the JSON schema here")
        self._mask_valid = False
        if token_id in self.grammar.stop_token_ids:
            self._done = True
        elif self._matcher.is_completed():
            self._done = set(self.allowed()) <= set(self.grammar.stop_token_ids)

    def is_done(self) -> bool:
        """Whether the document is whole and nothing but a stop id may follow."""
        return self._done

    def allowed(self) -> list[int]:
        """The ids allowed next (for tests and diagnostics: `mask` is the fast path)."""
        import numpy as np

        self._fill()
        bits = np.unpackbits(self._bitmask[0].numpy().view(np.uint8), bitorder="little")
        return [int(i) for i in np.flatnonzero(bits[:self.grammar.vocab_size])]

    def _fill(self) -> None:
        if not self._mask_valid:
            self._matcher.fill_next_token_bitmask(self._bitmask)
            self._bitmask[0].bitwise_and_(self.grammar.printable)
            self._mask_valid = True


def _printable_bitmask(pieces: Sequence[bytes], vocab_size: int,
                       stop_token_ids: Iterable[int]) -> torch.Tensor:
    """int32 bitmask of `GrammarVocabulary.printable` over ``vocab_size`` ids
    (``pieces[i]``: the bytes of id ``i``; ids past them are left out)."""
    import numpy as np
    import torch

    pieces = list(pieces[:vocab_size])
    ok = np.zeros((vocab_size + 31) // 32 * 32, dtype=np.uint8)
    ok[:len(pieces)] = 1
    ends = np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)))
    joined = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    # The id each control byte belongs to: the first piece ending after it.
    ok[np.searchsorted(ends, np.flatnonzero(joined < 0x20), side="right")] = 0
    for stop in stop_token_ids:
        if 0 <= stop < vocab_size:
            ok[stop] = 1
    return torch.from_numpy(np.packbits(ok, bitorder="little").view(np.int32).copy())


def bias_table() -> np.ndarray:
    """[256, 8] float32: for each byte of a bitmask, 0.0 where its bit (little-endian) is
    set, -inf where not."""
    import numpy as np

    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
    return np.where(bits.astype(bool), np.float32(0.0), np.float32(-np.inf)).astype(np.float32)


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor,
                  table: np.ndarray | None = None) -> torch.Tensor:
    """A new ``[vocab]`` float32 row: ``logits`` where bit ``i`` of the int32 ``bitmask``
    (one bit per id, little-endian, 32 ids a word) is set, -inf elsewhere (ids past the
    mask's bits included). ``table``: `bias_table()`, if the caller keeps one. Adds a
    0 / -inf bias looked up per mask byte: no branch per id, whatever the mask's pattern."""
    import numpy as np
    import torch

    table = bias_table() if table is None else table
    vocab = logits.shape[-1]
    bias = np.take(table, bitmask.numpy().view(np.uint8), axis=0).reshape(-1)
    row = logits.detach().float().cpu().numpy()
    if bias.shape[0] >= vocab:
        return torch.from_numpy(row + bias[:vocab])
    out = np.full(vocab, -np.inf, dtype=np.float32)
    np.add(row[:bias.shape[0]], bias, out=out[:bias.shape[0]])
    return torch.from_numpy(out)
