"""Turns the client takes itself (``turn_detection: null``) and the responses it asks for.

Without server VAD the client appends audio and commits it (``input_audio_buffer.commit``)
or adds user text items, then sends ``response.create``. :class:`ClientTurns` is the
backend's side of that: it refuses what cannot be done (a commit under server VAD, an
empty buffer, a reply with nothing to answer), reports each commit and its transcript,
and starts the requested response as a text turn of the conversation
(``submit_text``); a request that cannot start ends as a ``failed`` response.
:class:`~assistant.serve.backend.manual_turns.ManualTurns` holds the pieces in order.

The outputs of the client's tools (``function_call_output`` items) are input too: a
``response.create`` with outputs pending answers on them
(``Conversation.submit_tool_outputs``); with new user words as well, the outputs are
recorded first and the words answered. This holds with server VAD too, where the client
asks for the reply that answers its tools' outputs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from assistant.serve.backend import contract as B
from assistant.serve.backend.conversation_events import ConversationEvents
from assistant.serve.backend.ledger import ResponseLedger
from assistant.serve.backend.manual_turns import ManualTurns
from assistant.serve.backend.network_io import NetworkSource

if TYPE_CHECKING:
    from assistant.loop.conversation import Conversation, ToolOutput

__all__ = ["ClientTurns"]

log = logging.getLogger("assistant.serve")


class ClientTurns:
    """See the module docstring.

    ``transcribe`` is blocking (run on a thread); ``spawn(coro, name)`` starts a task the
    backend owns (its failure is reported); ``conversation()`` waits for the session's
    conversation to be ready.
    """

    def __init__(self, *, source: NetworkSource, sample_rate: int,
                 transcribe: Callable[[npt.NDArray[np.float32]], str],
                 ledger: ResponseLedger, output: ConversationEvents,
                 emit: Callable[[B.BackendEvent], None],
                 spawn: Callable[[Coroutine[Any, Any, None], str], object],
                 conversation: Callable[[], Awaitable[Conversation]]) -> None:
        self._source = source
        self._sample_rate = sample_rate
        self._manual = ManualTurns(transcribe)
        self._ledger = ledger
        self._output = output
        self._emit = emit
        self._spawn = spawn
        self._conversation = conversation
        self._outputs: list[ToolOutput] = []
        """Tool outputs the client gave that no response has taken yet."""

    @property
    def pending(self) -> bool:
        """Committed audio, user text or tool outputs that no response has taken yet."""
        return self._manual.pending or bool(self._outputs)

    def add_tool_output(self, call_id: str, output: str) -> None:
        from assistant.loop.conversation import ToolOutput

        name = self._output.take_call(call_id)
        if name is None:
            raise B.BackendRejected("unknown_call_id",
                                    f"no unanswered tool call with call_id {call_id!r}",
                                    param="item.call_id")
        self._outputs.append(ToolOutput(call_id, name, output))

    def commit_audio(self) -> None:
        if not self._source.hold:
            raise B.BackendRejected(
                "unsupported_event",
                "input_audio_buffer.commit needs turn_detection: null (server VAD commits)")
        pcm = self._source.take_held()
        if pcm.size == 0:
            raise B.BackendRejected("input_audio_buffer_commit_empty",
                                    "the input audio buffer is empty")
        audio_ms = pcm.size * 1000 // self._sample_rate
        self._emit(B.InputCommitted(audio_ms=audio_ms))
        task = self._manual.commit(pcm)

        def transcribed(task: asyncio.Task[str]) -> None:
            if not task.cancelled() and task.exception() is None:
                self._emit(B.UserTranscript(text=task.result(), audio_ms=audio_ms))

        task.add_done_callback(transcribed)

    def add_text(self, role: Literal["user", "assistant", "system"], text: str) -> None:
        if role != "user":
            raise B.BackendRejected("unsupported_item",
                                    f"{role} text items are not supported; send user text",
                                    param="item.role")
        self._manual.add_text(text)

    def create_response(self, request: B.ResponseRequest) -> int:
        if request.instructions:
            raise B.BackendRejected("unsupported_value", "per-response instructions are not "
                                    "supported; use session.update", param="response.instructions")
        if self._ledger.busy:
            raise B.BackendRejected("conversation_already_has_active_response",
                                    "a response is in progress")
        if not self.pending:
            raise B.BackendRejected(
                "no_user_input",
                "nothing to respond to: commit audio, or create a user text item or a "
                "function_call_output first")
        key = self._ledger.request()
        if request.output_modalities is not None:
            self._output.request_modalities(key, request.output_modalities)
        self._spawn(self._start_requested(key, request.max_output_tokens), "response-create")
        return key

    async def cancel(self) -> None:
        """Stop every transcription in progress and forget the turn."""
        await self._manual.cancel()

    async def _start_requested(self, key: int, max_tokens: int | None) -> None:
        pipeline = await self._conversation()
        outputs, self._outputs = self._outputs, []
        try:
            text = await self._manual.take_text()
        except Exception as exc:
            log.exception("transcribing the committed audio failed")
            if outputs:
                pipeline.submit_tool_outputs(outputs, respond=False)
            self._fail_request(key, "transcription_failed")
            self._emit(B.BackendFailure(code="transcription_failed",
                                        message=f"could not transcribe the audio: {exc}"))
            return
        if outputs and (text or self._ledger.requested != key):
            # Kept in the history, without a reply of their own.
            pipeline.submit_tool_outputs(outputs, respond=False)
        elif outputs:
            if pipeline.submit_tool_outputs(outputs, max_new_tokens=max_tokens) is None:
                self._fail_request(key, "busy")  # the outputs are kept, without a reply
            return
        if self._ledger.requested != key:
            return
        if not text:
            self._fail_request(key, "no_user_input")
            return
        if pipeline.submit_text(text, max_new_tokens=max_tokens) is None:
            self._fail_request(key, "busy")

    def _fail_request(self, key: int, reason: str) -> None:
        self._output.drop_request(key)
        if self._ledger.drop_request(key):
            self._emit(B.ResponseStarted(response_key=key))
            self._emit(B.ResponseFinished(response_key=key, status="failed", reason=reason))
