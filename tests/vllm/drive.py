"""Driving a Dialogue turn by turn on one backend, on this thread (as ``chat`` does)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from assistant.app.config import load_config
from assistant.dialogue.dialogue import Dialogue
from assistant.dialogue.types import DialogueOptions, ReplyDelta
from assistant.llm.protocol import LLMBackend
from assistant.loop.setup import dialogue_options
from engine.chat_template import ChatTemplate

__all__ = ["Talk", "options"]


def options(**overrides: object) -> DialogueOptions:
    """The shipped config's dialogue options (greedy, windowed penalty 1.1)."""
    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[2] / "config.yaml", env={},
                      overrides={"llm.max_new_tokens": 24, **overrides})
    return dialogue_options(cfg)


@dataclass
class Talk:
    backend: LLMBackend
    opts: DialogueOptions = field(default_factory=options)
    dialogue: Dialogue = field(init=False)
    turn_id: int = 0

    def __post_init__(self) -> None:
        template = ChatTemplate(self.backend.tokenizer)
        self.dialogue = Dialogue(self.backend, template, self.opts)

    @property
    def tokens(self) -> tuple[int, ...]:
        return self.dialogue.sequence.tokens

    def reply(self, text: str, *, hook: Callable[[int], None] | None = None) -> str:
        """Start a turn and generate its whole reply; ``hook(tokens so far)`` runs after
        every step that brought tokens. The turn stays open (finish or cut it)."""
        d = self.dialogue
        self.turn_id += 1
        d.start_turn(self.turn_id, text, None)
        out = ""
        done = False
        while not done:
            self.backend.step()
            for o in d.collect():
                if isinstance(o, ReplyDelta) and o.turn_id == self.turn_id:
                    out += o.text
                    done = done or o.done
                    if hook is not None and o.tokens:
                        hook(o.tokens)
        return out

    def finish(self) -> None:
        self.dialogue.finish_turn(self.turn_id, 0)

    def cut(self, heard_chars: int) -> None:
        self.dialogue.cut_turn(self.turn_id, heard_chars, 1000)

    def settle(self) -> None:
        """Let the backend finish its bookkeeping (a remote request's usage report)."""
        while self.backend.has_work():
            self.backend.step()

    def close(self) -> None:
        self.dialogue.close()
