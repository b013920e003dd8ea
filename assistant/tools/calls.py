"""Tool calls in generated text: parsing a finished reply, and telling early, while it
streams, whether a reply is a call (so that it never reaches the speech synthesiser).

Formats:

- Hermes / Qwen2.5: ``<tool_call>\\n{"name": "get_time", "arguments": {...}}\\n</tool_call>``,
  one block per call, possibly after some text (the text is the reply's content).
- Llama 3.x JSON: the whole reply is ``{"name": "get_time", "parameters": {...}}``
  (``"arguments"`` is taken too), optionally after ``<|python_tag|>``; several calls as a
  JSON list or separated by ``;``.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from assistant.tools.errors import ToolCallParseError

__all__ = [
    "CallFormat",
    "DetectorStep",
    "ParsedReply",
    "ToolCall",
    "ToolCallDetector",
    "Verdict",
    "assistant_message",
    "call_json_start",
    "is_speech",
    "parse_tool_calls",
]

CallFormat = Literal["hermes", "llama"]

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"
_MARKERS = (_OPEN, _PYTHON_TAG)
_HERMES_BLOCK = re.compile(re.escape(_OPEN) + r"(.*?)(?:" + re.escape(_CLOSE) + r"|\Z)",
                           re.DOTALL)
_JSON_KEYS = ('"name"', '"type"', '"function"')
"""Keys a Llama-style JSON call opens with."""


@dataclass(frozen=True)
class ToolCall:
    """One call the model made."""

    name: str
    """The tool called (not checked against any registry here)."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """The arguments, as the model wrote them (a JSON object)."""

    @property
    def arguments_json(self) -> str:
        """The arguments as JSON text (what `run_tool` takes)."""
        return json.dumps(dict(self.arguments), ensure_ascii=False)

    def template_call(self) -> dict[str, Any]:
        """The call as a chat template's assistant message carries it
        (``{"type": "function", "function": {"name", "arguments"}}``)."""
        return {"type": "function",
                "function": {"name": self.name, "arguments": dict(self.arguments)}}


@dataclass(frozen=True)
class ParsedReply:
    """A finished reply split into what it says and what it calls."""

    content: str
    """The text outside any call, stripped ("" for a reply that is only calls)."""
    calls: tuple[ToolCall, ...] = ()
    """The calls, in order (empty: a plain reply)."""
    format: CallFormat | None = None
    """How the calls were written (None: no calls)."""


def assistant_message(calls: Iterable[ToolCall], content: str = "") -> dict[str, Any]:
    """The assistant message that records `calls` in a conversation for a chat template."""
    return {"role": "assistant", "content": content,
            "tool_calls": [call.template_call() for call in calls]}


def parse_tool_calls(text: str) -> ParsedReply:
    """The calls in a finished reply (either format), and its remaining content.

    A reply that opens a call whose JSON cannot be read (cut off by the token limit, or
    malformed) raises `ToolCallParseError`; text that merely looks like JSON but is not a
    call is content.
    """
    if _OPEN in text:
        return _parse_hermes(text)
    stripped = text.strip()
    if stripped.startswith(_PYTHON_TAG):
        calls = _parse_json_calls(stripped[len(_PYTHON_TAG):].strip(), strict=True)
        return ParsedReply(content="", calls=calls, format="llama")
    if stripped.startswith(("{", "[")):
        calls = _parse_json_calls(stripped, strict=_opens_json_call(stripped) is True)
        if calls:
            return ParsedReply(content="", calls=calls, format="llama")
    return ParsedReply(content=stripped)


class Verdict(enum.Enum):
    """What a streaming reply is, so far."""

    UNDECIDED = "undecided"
    """Too little text to tell (only whitespace, or the start of a call marker)."""
    SPEECH = "speech"
    """Words to speak (a call may still follow them, Qwen-style)."""
    TOOL_CALL = "tool_call"
    """A call has begun: nothing more of this reply is speech."""


@dataclass(frozen=True)
class DetectorStep:
    """What one delta gave."""

    speech: str
    """Text that may be spoken now (held back while it could still be a call's start)."""
    verdict: Verdict
    """What the reply is so far."""


class ToolCallDetector:
    """Feeds on a reply's text deltas and releases only the text that is speech.

    A reply is a tool call once it starts with ``<tool_call>`` or ``<|python_tag|>``
    (after whitespace) or, with `json_calls`, with a JSON object opening on ``"name"``
    (``"type"``, ``"function"``): Llama's format. Text is held back while it could still
    become one (``<tool_ca``, ``{"na``), so nothing of a call reaches the synthesiser.
    Words followed by ``<tool_call>`` are speech up to the marker, then a call. The
    whole reply, for `parse_tool_calls`, is `text`.
    """

    def __init__(self, *, json_calls: bool = True) -> None:
        self._json_calls = json_calls
        self.text = ""
        """Every delta so far."""
        self._released = 0
        self.verdict = Verdict.UNDECIDED

    def feed(self, delta: str) -> DetectorStep:
        """Add a delta; returns the text that may now be spoken."""
        self.text += delta
        if self.verdict is Verdict.UNDECIDED:
            self.verdict = self._decide()
        if self.verdict is not Verdict.SPEECH:
            return DetectorStep("", self.verdict)
        pending = self.text[self._released:]
        found = [at for at in (pending.find(m) for m in _MARKERS) if at >= 0]
        if found:
            at = min(found)
            self._released += at
            self.verdict = Verdict.TOOL_CALL
            return DetectorStep(pending[:at], self.verdict)
        keep = _partial_marker_suffix(pending)
        speech = pending[:len(pending) - keep]
        self._released += len(speech)
        return DetectorStep(speech, self.verdict)

    def finish(self) -> DetectorStep:
        """The reply ended: release what was held back, unless it is a call."""
        if self.verdict is Verdict.TOOL_CALL:
            return DetectorStep("", self.verdict)
        self.verdict = Verdict.SPEECH
        speech = self.text[self._released:]
        self._released = len(self.text)
        return DetectorStep(speech, self.verdict)

    def _decide(self) -> Verdict:
        head = self.text.lstrip()
        if not head:
            return Verdict.UNDECIDED
        for marker in _MARKERS:
            if head.startswith(marker):
                return Verdict.TOOL_CALL
            if marker.startswith(head):
                return Verdict.UNDECIDED
        if self._json_calls and head[0] in "{[":
            opens = _opens_json_call(head)
            if opens is None:
                return Verdict.UNDECIDED
            return Verdict.TOOL_CALL if opens else Verdict.SPEECH
        return Verdict.SPEECH


def call_json_start(text: str) -> int:
    """Where the JSON of the call that ``text`` opens begins: right after its first call
    marker (``<tool_call>``, ``<|python_tag|>``), else at its first non-space character
    (a Llama-style JSON call)."""
    found = [(at, marker) for marker in _MARKERS if (at := text.find(marker)) >= 0]
    if found:
        at, marker = min(found)
        return at + len(marker)
    return len(text) - len(text.lstrip())


def is_speech(text: str) -> bool:
    """Whether a finished piece of reply ``text`` is only speech (no call in it)."""
    detector = ToolCallDetector()
    detector.feed(text)
    return detector.finish().verdict is Verdict.SPEECH


def _opens_json_call(head: str) -> bool | None:
    """Whether text starting with ``{`` / ``[`` opens a Llama-style call: True, False,
    or None while too short to tell."""
    rest = head
    if rest.startswith("["):
        rest = rest[1:].lstrip()
        if not rest:
            return None
        if not rest.startswith("{"):
            return False
    rest = rest[1:].lstrip()
    if not rest:
        return None
    if any(rest.startswith(key) for key in _JSON_KEYS):
        return True
    if any(key.startswith(rest) for key in _JSON_KEYS):
        return None
    return False


def _partial_marker_suffix(text: str) -> int:
    """Length of the longest end of `text` that is a proper prefix of a call marker."""
    longest = 0
    for marker in _MARKERS:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest


def _parse_hermes(text: str) -> ParsedReply:
    calls: list[ToolCall] = []
    for match in _HERMES_BLOCK.finditer(text):
        body = match.group(1).strip()
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ToolCallParseError(f"the JSON inside <tool_call> does not parse "
                                     f"({exc.msg})", match.group(0)) from None
        calls.append(_call_from(obj, match.group(0)))
    content = _HERMES_BLOCK.sub("", text).strip()
    return ParsedReply(content=content, calls=tuple(calls), format="hermes")


def _parse_json_calls(text: str, *, strict: bool) -> tuple[ToolCall, ...]:
    """Calls from JSON text: one object, a list of objects, or objects separated by
    ``;``. With `strict`, text that does not parse as calls raises; otherwise it gives ()."""
    decoder = json.JSONDecoder()
    objects: list[Any] = []
    at = 0
    try:
        while at < len(text):
            obj, at = decoder.raw_decode(text, at)
            objects.extend(obj if isinstance(obj, list) else [obj])
            while at < len(text) and (text[at].isspace() or text[at] == ";"):
                at += 1
    except json.JSONDecodeError as exc:
        if strict:
            raise ToolCallParseError(f"the call's JSON does not parse ({exc.msg})",
                                     text) from None
        return ()
    if not strict and not all(isinstance(o, dict) and "name" in o for o in objects):
        return ()
    return tuple(_call_from(obj, text) for obj in objects)


def _call_from(obj: Any, text: str) -> ToolCall:
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # {"type": "function", "function": {...}}
    if not isinstance(obj, dict):
        raise ToolCallParseError(f"expected a JSON object, got {type(obj).__name__}", text)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ToolCallParseError("the call has no \"name\"", text)
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise ToolCallParseError(f"the arguments of {name!r} are not JSON",
                                     text) from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolCallParseError(f"the arguments of {name!r} are not a JSON object", text)
    return ToolCall(name=name, arguments=arguments)
