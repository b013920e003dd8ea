"""A scripted model that calls tools, for the loop's tool tests (no weights).

It answers the last message before the assistant header: a user message through
``reply(role, text)``; a tool result likewise (role ``tool``), so a test scripts both
the call and the answer that uses the result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from engine.chat_template import ChatTemplate
from tests.engine.fake_runner import ByteTokenizer, make_engine
from tests.replay.fakes import END, START, chatml, last_header, spell

Reply = Callable[[str, str], str]
"""(role of the last message, its content) -> the reply's text."""


def call_text(name: str, **arguments: Any) -> str:
    """A Hermes-style call in compact JSON (what decoding under the call's schema gives
    after the ``<tool_call>`` marker, so the scripted model and the grammar agree)."""
    return ("<tool_call>" + json.dumps({"name": name, "arguments": arguments},
                                       separators=(",", ":")) + "</tool_call>")


def tool_engine(reply: Reply, *, constrained: bool = True) -> tuple[Any, ChatTemplate]:
    """The scripted engine; ``constrained``: it can decode under a JSON schema
    (`SamplingParams.json_schema`), over the byte tokenizer's vocabulary."""
    tok = ByteTokenizer(merges=["assistant", "user"], specials=[START, END])
    start_id, end_id = tok.special_ids[START], tok.special_ids[END]
    header = [start_id, *tok.encode("assistant\n")]

    def next_token(ctx: tuple[int, ...]) -> int | None:
        i = last_header(ctx, header)
        if i is None:
            return None
        # The message before the header (a run of tool results: the last of them).
        j = max((k for k in range(i) if ctx[k] == start_id), default=-1)
        if j < 0:
            return end_id
        role, _, content = tok.decode(list(ctx[j + 1:i])).partition("\n")
        content = content.replace(END, "").strip()
        return spell(tok.encode(reply(role.strip(), content)), list(ctx[i + len(header):]),
                     end_id)

    engine, _ = make_engine(page_size=8, num_pages=1024, vocab_size=tok.vocab_size,
                            eos_token_ids=(end_id,), next_token=next_token, tokenizer=tok)
    if constrained:
        from engine.grammar import GrammarVocabulary

        engine._grammar_vocabulary = GrammarVocabulary.from_pieces(
            tok.pieces, stop_token_ids=(end_id,), vocab_size=tok.vocab_size)
    return engine, ChatTemplate(tok, render=chatml)
