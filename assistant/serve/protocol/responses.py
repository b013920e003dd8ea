"""Conversation items and responses of a session, and the server events that frame them.

`ItemRecord` is what a session remembers of an item (for retrieve and truncate);
`ActiveResponse` is the response in progress. The functions below give the Realtime
events that frame a response and its output items, in the API's order::

    response.created
    (message item, with the reply's first words:)
      response.output_item.added, conversation.item.added, response.content_part.added,
      ... deltas ...,
      response.output_audio.done (or response.output_text.done),
      response.output_audio_transcript.done, response.content_part.done,
      response.output_item.done, conversation.item.done
    (each function call:)
      response.output_item.added, conversation.item.added,
      response.function_call_arguments.delta, response.function_call_arguments.done,
      response.output_item.done, conversation.item.done
    response.done
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
    "created_event",
    "message_opening_events",
    "message_closing_events",
    "function_call_events",
    "done_event",
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
    """A message's role; for a function call ``assistant``, for its output ``user``
    (who made it; not sent, the API's function items have no role)."""
    kind: Literal["input_audio", "input_text", "output_audio", "output_text",
                  "function_call", "function_call_output"]
    transcript: str | None = None
    status: Literal["completed", "incomplete", "in_progress"] = "completed"
    response_key: int | None = None
    audio_samples: int = 0
    """Output audio sent to the client for this item (24 kHz samples)."""
    previous_item_id: str | None = None
    """The item before this one when it joined the conversation."""
    call_id: str = ""
    """Function items: the call."""
    name: str = ""
    """``function_call``: the function called."""
    arguments: str = ""
    """``function_call``: JSON text of the arguments."""
    output: str = ""
    """``function_call_output``: what the tool returned."""

    def to_item(self) -> S.ConversationItem:
        if self.kind == "function_call":
            return S.FunctionCallItem(id=self.item_id, status=self.status, call_id=self.call_id,
                                      name=self.name, arguments=self.arguments)
        if self.kind == "function_call_output":
            return S.FunctionCallOutputItem(id=self.item_id, status=self.status,
                                            call_id=self.call_id, output=self.output)
        if self.kind in ("input_text", "output_text"):
            part = S.ContentPart(type=self.kind, text=self.transcript or "")
        else:
            part = S.ContentPart(type=self.kind, transcript=self.transcript)
        return S.Item(id=self.item_id, status=self.status, role=self.role, content=(part,))


@dataclass
class ActiveResponse:
    """The response in progress.

    Its message ``item`` (the reply's audio or text) joins the conversation with the
    reply's first words, not before: a reply that only calls tools has no message. Its
    function calls follow the message, each a ``function_call`` item of its own.
    """

    key: int
    response_id: str
    conversation_id: str
    item: ItemRecord
    """The message item (``output_audio`` / ``output_text``), once ``message`` is open."""
    modalities: tuple[Literal["text", "audio"], ...]
    max_output_tokens: int | None
    metadata: dict[str, str] | None
    text: list[str] = field(default_factory=list)
    started_at: float = 0.0
    """Clock time of ``response.created`` (seconds)."""
    first_audio: bool = False
    pending_truncate: C.ConversationItemTruncate | None = None
    """A truncate of this item that waits for the response to finish."""
    message: Literal["pending", "open", "closed"] = "pending"
    """The message item: not announced yet, announced, or done (or skipped: nothing was
    said before a call)."""
    outputs: list[ItemRecord] = field(default_factory=list)
    """The response's output items in order (the message if it opened, then calls)."""

    @property
    def calls(self) -> list[ItemRecord]:
        return [o for o in self.outputs if o.kind == "function_call"]

    def index_of(self, record: ItemRecord) -> int:
        """``output_index`` of one of this response's items."""
        return self.outputs.index(record)

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
            output=() if status == "in_progress" else tuple(o.to_item() for o in self.outputs),
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


def created_event(active: ActiveResponse, ids: IdFactory) -> S.ResponseCreated:
    """``response.created`` for a new response."""
    return S.ResponseCreated(event_id=ids("event"), response=active.response("in_progress"))


def message_opening_events(active: ActiveResponse, ids: IdFactory) -> list[Any]:
    """``response.output_item.added`` .. ``response.content_part.added`` for the
    response's message item (already among its ``outputs``)."""
    rid, item = active.response_id, active.item
    index = active.index_of(item)
    return [
        S.OutputItemAdded(event_id=ids("event"), response_id=rid, output_index=index,
                          item=S.Item(id=item.item_id, status="in_progress", role="assistant")),
        S.ConversationItemAdded(event_id=ids("event"), previous_item_id=item.previous_item_id,
                                item=item.to_item()),
        S.ContentPartAdded(event_id=ids("event"), response_id=rid, item_id=item.item_id,
                           output_index=index, part=active.part()),
    ]


def message_closing_events(active: ActiveResponse, ids: IdFactory) -> list[Any]:
    """The ``*.done`` events of the response's message item (already updated)."""
    rid, iid = active.response_id, active.item.item_id
    index = active.index_of(active.item)
    text = active.item.transcript or ""
    out: list[Any] = []
    if active.item.kind == "output_audio":
        out.append(S.OutputAudioDone(event_id=ids("event"), response_id=rid, item_id=iid,
                                     output_index=index))
        out.append(S.OutputAudioTranscriptDone(event_id=ids("event"), response_id=rid,
                                               item_id=iid, output_index=index,
                                               transcript=text))
    else:
        out.append(S.OutputTextDone(event_id=ids("event"), response_id=rid, item_id=iid,
                                    output_index=index, text=text))
    out.append(S.ContentPartDone(event_id=ids("event"), response_id=rid, item_id=iid,
                                 output_index=index, part=active.part()))
    out.append(S.OutputItemDone(event_id=ids("event"), response_id=rid, output_index=index,
                                item=active.item.to_item()))
    out.append(S.ConversationItemDone(event_id=ids("event"),
                                      previous_item_id=active.item.previous_item_id,
                                      item=active.item.to_item()))
    return out


def function_call_events(active: ActiveResponse, call: ItemRecord, ids: IdFactory
                         ) -> list[Any]:
    """A ``function_call`` item of the response (already among its ``outputs``), from
    ``response.output_item.added`` to ``conversation.item.done``: the arguments come
    whole, as one delta. Marks ``call`` completed."""
    rid, iid, index = active.response_id, call.item_id, active.index_of(call)
    started = S.FunctionCallItem(id=iid, status="in_progress", call_id=call.call_id,
                                 name=call.name)
    out: list[Any] = [
        S.OutputItemAdded(event_id=ids("event"), response_id=rid, output_index=index,
                          item=started),
        S.ConversationItemAdded(event_id=ids("event"), previous_item_id=call.previous_item_id,
                                item=started),
    ]
    if call.arguments:
        out.append(S.FunctionCallArgumentsDelta(event_id=ids("event"), response_id=rid,
                                                item_id=iid, output_index=index,
                                                call_id=call.call_id, delta=call.arguments))
    out.append(S.FunctionCallArgumentsDone(event_id=ids("event"), response_id=rid, item_id=iid,
                                           output_index=index, call_id=call.call_id,
                                           name=call.name, arguments=call.arguments))
    call.status = "completed"
    out.append(S.OutputItemDone(event_id=ids("event"), response_id=rid, output_index=index,
                                item=call.to_item()))
    out.append(S.ConversationItemDone(event_id=ids("event"),
                                      previous_item_id=call.previous_item_id,
                                      item=call.to_item()))
    return out


def done_event(active: ActiveResponse, finished: B.ResponseFinished, ids: IdFactory
               ) -> S.ResponseDone:
    """``response.done``, listing the response's output items."""
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
    return S.ResponseDone(event_id=ids("event"),
                          response=active.response(finished.status, details=details,
                                                   usage=usage))
