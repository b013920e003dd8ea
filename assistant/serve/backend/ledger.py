"""Which Realtime response is which loop turn, and how each one ended.

The pipeline numbers its replies by ``turn_id``; the protocol session names responses
by the backend's ``response_key``. :class:`ResponseLedger` keeps the mapping and what a
response needs when it closes (its usage, its kept text, why it was cut). A response
requested by the client (``response.create``) gets its key at once and is bound to the
turn that starts next; a reply the server VAD starts gets a fresh key.

Pure bookkeeping, table-tested; no I/O, no pipeline.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from assistant.serve.backend.contract import ResponseFinished, TokenUsage

__all__ = ["ResponseLedger"]


class ResponseLedger:
    """See the module docstring."""

    def __init__(self) -> None:
        self._next_key = 1
        self._key_of_turn: dict[int, int] = {}
        self._turn_of_key: dict[int, int] = {}
        self._usage: dict[int, TokenUsage] = {}
        self._texts: dict[int, str] = {}
        self._reasons: dict[int, str] = {}
        self.open_turn: int | None = None
        """The turn whose response is in progress."""
        self.requested: int | None = None
        """A key handed out by :meth:`request` whose turn has not started yet."""
        self.started = 0
        """Responses started so far."""

    # ------------------------------------------------------------------ queries

    @property
    def busy(self) -> bool:
        """A response is in progress or requested."""
        return self.open_turn is not None or self.requested is not None

    def key_of(self, turn_id: int) -> int | None:
        return self._key_of_turn.get(turn_id)

    def turn_of(self, key: int) -> int | None:
        return self._turn_of_key.get(key)

    def text_of(self, turn_id: int) -> str:
        return self._texts.get(turn_id, "")

    # ------------------------------------------------------------------ changes

    def new_key(self) -> int:
        key = self._next_key
        self._next_key += 1
        return key

    def request(self) -> int:
        """A key for a client-requested response (bound to the next turn that starts)."""
        self.requested = self.new_key()
        return self.requested

    def drop_request(self, key: int) -> bool:
        """Forget request ``key`` (it will not start); False if it is not the request."""
        if self.requested != key:
            return False
        self.requested = None
        return True

    def start(self, turn_id: int, usage: TokenUsage) -> int:
        """Turn ``turn_id`` started: its key (the request's, else a new one)."""
        key = self.requested if self.requested is not None else self.new_key()
        self.requested = None
        self.started += 1
        self._key_of_turn[turn_id] = key
        self._turn_of_key[key] = turn_id
        self._usage[turn_id] = usage
        self.open_turn = turn_id
        return key

    def set_reason(self, turn_id: int, reason: str) -> None:
        """Why ``turn_id`` will be cut, if it is (e.g. ``client_cancelled``)."""
        self._reasons[turn_id] = reason

    def set_text(self, turn_id: int, text: str) -> None:
        """What the conversation now keeps of ``turn_id`` (after a late truncation)."""
        self._texts[turn_id] = text

    def finish(self, turn_id: int, *, text: str, output_tokens: int,
               interrupted: bool) -> ResponseFinished | None:
        """Turn ``turn_id`` closed (played out, or cut): its ``response.done``."""
        key = self._key_of_turn.get(turn_id)
        if key is None:
            return None
        if self.open_turn == turn_id:
            self.open_turn = None
        self._texts[turn_id] = text
        usage = dataclasses.replace(self._usage.pop(turn_id, TokenUsage()),
                                    output_tokens=output_tokens)
        status: Literal["completed", "cancelled"] = "cancelled" if interrupted else "completed"
        reason = self._reasons.pop(turn_id, "turn_detected") if interrupted else None
        return ResponseFinished(response_key=key, status=status, reason=reason, text=text,
                                usage=usage)

    def withdraw(self, turn_id: int) -> ResponseFinished | None:
        """Turn ``turn_id`` was removed before or as it began to play (the user went on)."""
        key = self._key_of_turn.get(turn_id)
        if key is None or self.open_turn != turn_id:
            return None
        self.open_turn = None
        return ResponseFinished(response_key=key, status="cancelled",
                                reason=self._reasons.pop(turn_id, "turn_detected"),
                                usage=self._usage.pop(turn_id, TokenUsage()), withdrawn=True)

    def forget_before(self, turn_id: int) -> None:
        """Drop what is kept of turns older than ``turn_id`` except their ids and texts
        (a long session keeps a bounded amount of per-response state)."""
        for old in [t for t in self._reasons if t < turn_id]:
            del self._reasons[old]
