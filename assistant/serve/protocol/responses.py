"""Conversation items and responses of a session, and the server events that frame them.

`ItemRecord` is what a session remembers of an item (for retrieve and truncate);
`ActiveResponse` is the response in progress. `opening_events` / `closing_events` are
pure functions giving the Realtime event sequence that opens and closes a response, in
the API's order::

    response.created, response.output_item.added, conversation.item.added,
    response.content_part.added, ... deltas ...,
    response.output_audio.done (or response.output_text.done),
    response.output_audio_transcript.done, response.content_part.done,
    response.output_item.done, conversation.item.done, response.done
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import MISSING

from assistant.serve.backend import contract as B
from assistant.serve.protocol import client_events as C
from assistant.serve.protocol import server_events as S

__all__ = [
    "IdFactory",
    "ItemRecord",
    "ActiveResponse",
    "response_shape",
    "opening_events",
    "closing_events",
]

Status = Literal["in_progress", "completed", "cancelled", "incomplete", "failed"]


class IdFactory:
    """Ids unique within a session: ``item_<stem><n>``; deterministic for a given stem."""

    def __init__(self, stem: str) -> None:
        self._stem = stem
        self._counter = itertools.count(1)

    def __call__(self, prefix: str) -> str:
        return f"{prefix}_{self._stem}{next(self._counter):05d}"


@dataclass
class ItemRecord:
    item_id: str
    role: Literal["user", "assistant", "system"]
    kind: Literal["input_audio", "input_text", "output_audio", "output_text"]
    transcript: str | None = None
    status: Literal["completed", "incomplete", "in_progress"] = "completed"
    response_key: int | None = None
    audio_samples: int = 0
    """Output audio sent to the client for this item (24 kHz samples)."""

    def to_item(self) -> S.Item:
        if self.kind in ("input_text", "output_text"):
            part = S.ContentPart(type=self.kind, text=self.transcript or "")
        else:
            part = S.ContentPart(type=self.kind, transcript=self.transcript)
        return S.Item(id=self.item_id, status=self.status, role=self.role, content=(part,))


@dataclass
class ActiveResponse:
    """The response in progress."""

    key: int
    response_id: str
    conversation_id: str
    item: ItemRecord
    modalities: tuple[Literal["text", "audio"], ...]
    max_output_tokens: int | None
    metadata: dict[str, str] | None
    text: list[str] = field(default_factory=list)
    started_at: float = 0.0
    """Clock time of ``response.created`` (seconds)."""
    first_audio: bool = False
    pending_truncate: C.ConversationItemTruncate | None = None
    """A truncate of this item that waits for the response to finish."""
    previous_item_id: str | None = None
    """The item before this response's item in the conversation."""

    def part(self) -> S.ContentPart:
        if self.item.kind == "output_audio":
            return S.ContentPart(type="audio", transcript=self.item.transcript or "")
        return S.ContentPart(type="text", text=self.item.transcript or "")

    def response(self, status: Status, *, details: S.StatusDetails | None = None,
                 usage: S.Usage | None = None) -> S.Response:
        return S.Response(
            id=self.response_id,
            status=status,
            status_details=details,
            output=() if status == "in_progress" else (self.item.to_item(),),
            output_modalities=self.modalities,
            conversation_id=self.conversation_id,
            max_output_tokens="inf" if self.max_output_tokens is None else self.max_output_tokens,
            metadata=self.metadata,
            usage=usage,
        )


def response_shape(
    settings: B.SessionSettings, params: C.ResponseParam | None
) -> tuple[tuple[Literal["text", "audio"], ...], int | None, dict[str, str] | None]:
    """(modalities, max output tokens, metadata) of a response: the session's settings,
    overridden by the ``response.create`` parameters that asked for it, if any."""
    modalities = settings.output_modalities
    max_tokens = settings.max_output_tokens
    metadata: dict[str, str] | None = None
    if params is not None:
        chosen: Any = params.output_modalities
        if chosen is MISSING:
            chosen = params.modalities
        if chosen is not MISSING:
            modalities = ("audio",) if "audio" in chosen else ("text",)
        limit: Any = params.max_output_tokens
        if limit is MISSING:
            limit = params.max_response_output_tokens
        if limit is not MISSING:
            max_tokens = None if limit == "inf" else int(limit)
        metadata = None if params.metadata is MISSING else params.metadata
    return modalities, max_tokens, metadata


def opening_events(active: ActiveResponse, ids: IdFactory) -> list[Any]:
    """``response.created`` .. ``response.content_part.added`` for a new response."""
    rid, item = active.response_id, active.item
    return [
        S.ResponseCreated(event_id=ids("event"), response=active.response("in_progress")),
        S.OutputItemAdded(event_id=ids("event"), response_id=rid,
                          item=S.Item(id=item.item_id, status="in_progress", role="assistant")),
        S.ConversationItemAdded(event_id=ids("event"), previous_item_id=active.previous_item_id,
                                item=item.to_item()),
        S.ContentPartAdded(event_id=ids("event"), response_id=rid, item_id=item.item_id,
                           part=active.part()),
    ]


def closing_events(active: ActiveResponse, finished: B.ResponseFinished, ids: IdFactory
                   ) -> list[Any]:
    """The ``*.done`` events that close a response (its item is already updated)."""
    rid, iid = active.response_id, active.item.item_id
    text = active.item.transcript or ""
    out: list[Any] = []
    if active.item.kind == "output_audio":
        out.append(S.OutputAudioDone(event_id=ids("event"), response_id=rid, item_id=iid))
        out.append(S.OutputAudioTranscriptDone(event_id=ids("event"), response_id=rid,
                                               item_id=iid, transcript=text))
    else:
        out.append(S.OutputTextDone(event_id=ids("event"), response_id=rid, item_id=iid,
                                    text=text))
    out.append(S.ContentPartDone(event_id=ids("event"), response_id=rid, item_id=iid,
                                 part=active.part()))
    out.append(S.OutputItemDone(event_id=ids("event"), response_id=rid,
                                item=active.item.to_item()))
    out.append(S.ConversationItemDone(event_id=ids("event"),
                                      previous_item_id=active.previous_item_id,
                                      item=active.item.to_item()))
    u = finished.usage
    usage = S.Usage(
        total_tokens=u.input_tokens + u.output_tokens,
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        input_token_details=S.InputTokenDetails(cached_tokens=u.cached_tokens,
                                                text_tokens=u.input_tokens),
        output_token_details=S.OutputTokenDetails(text_tokens=u.output_tokens),
    )
    details = None
    if finished.status != "completed":
        details = S.StatusDetails(type=finished.status, reason=finished.reason)
    out.append(S.ResponseDone(event_id=ids("event"),
                              response=active.response(finished.status, details=details,
                                                       usage=usage)))
    return out
