"""JSON codec for the Realtime protocol subset, in both directions and both dialects.

`Codec.decode_client` turns one text frame into a typed client event or raises a
`ProtocolError` that says what was wrong (``invalid_json``, ``unknown_event``,
``invalid_value`` with the dotted ``param``); `Codec.encode_server` writes a server
event. The reverse directions (`encode_client`, `decode_server`) exist for our own
clients (tests, ``bench/bench_serve.py``) and so that a test can round-trip every event:
hand-written codecs drift (a field declared and never serialised), a round trip catches it.

Dialects: ``ga`` is the current Realtime API; ``beta`` is what clients that send the
``OpenAI-Beta: realtime=v1`` header expect (``response.audio.delta`` instead of
``response.output_audio.delta``, a flat session object, ``audio`` / ``text`` parts,
``conversation.item.created`` for ``conversation.item.added``, ``tool_choice`` a bare
string, no ``name`` on ``response.function_call_arguments.done``); events the beta
protocol does not have (``conversation.item.done``) are not sent to such clients: see
`Codec.sends`.

Validation is pydantic's (``TypeAdapter`` over the frozen dataclasses), so every field
is checked once, in Rust, including the large base64 audio strings.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from pydantic import TypeAdapter, ValidationError

from assistant.serve.protocol.client_events import ClientEvent
from assistant.serve.protocol.server_events import ServerEvent

__all__ = ["Codec", "Dialect", "ProtocolError", "BETA_EVENT_NAMES", "GA_ONLY_EVENTS"]


class Dialect(enum.Enum):
    GA = "ga"
    BETA = "beta"


BETA_EVENT_NAMES: dict[str, str] = {
    "conversation.item.added": "conversation.item.created",
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
}
"""GA server event name -> the older (beta) name for the same event."""

GA_ONLY_EVENTS: frozenset[str] = frozenset({"conversation.item.done"})
"""Server events the beta protocol has no counterpart for (never sent to beta clients)."""

_GA_EVENT_NAMES = {beta: ga for ga, beta in BETA_EVENT_NAMES.items()}
_BETA_PART_TYPES = {"output_audio": "audio", "output_text": "text"}
_GA_PART_TYPES = {beta: ga for ga, beta in _BETA_PART_TYPES.items()}
_BETA_FORMAT = "pcm16"


class ProtocolError(Exception):
    """A client message we cannot accept; becomes an ``error`` event, the session stays."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        event_id: str | None = None,
        error_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.event_id = event_id
        self.error_type = error_type


class Codec:
    """Encoder/decoder; build one per server (building the validators takes a few ms)."""

    def __init__(self) -> None:
        self._client: TypeAdapter[Any] = TypeAdapter(ClientEvent)
        self._server: TypeAdapter[Any] = TypeAdapter(ServerEvent)

    # ------------------------------------------------------------------ client events

    def decode_client(self, data: str | bytes) -> Any:
        """Parse one client frame into a client event dataclass."""
        try:
            return self._client.validate_json(data)
        except ValidationError as exc:
            raise _describe(exc, data) from None

    def encode_client(self, event: Any) -> str:
        """Serialise a client event (fields left `MISSING` are omitted)."""
        return self._client.dump_json(event).decode("utf-8")

    # ------------------------------------------------------------------ server events

    @staticmethod
    def sends(event: Any, dialect: Dialect) -> bool:
        """Whether a client speaking ``dialect`` gets ``event`` at all."""
        return dialect is Dialect.GA or event.type not in GA_ONLY_EVENTS

    def encode_server(self, event: Any, dialect: Dialect = Dialect.GA) -> str:
        """Serialise a server event in ``dialect``."""
        if dialect is Dialect.GA:
            return self._server.dump_json(event).decode("utf-8")
        data = self._server.dump_python(event, mode="json")
        return json.dumps(_to_beta(data), separators=(",", ":"))

    def decode_server(self, data: str | bytes, dialect: Dialect = Dialect.GA) -> Any:
        """Parse a server frame (as our clients and tests need)."""
        if dialect is Dialect.GA:
            return self._server.validate_json(data)
        return self._server.validate_python(_from_beta(json.loads(data)))


# ---------------------------------------------------------------------- error mapping


def _event_id_of(data: str | bytes) -> str | None:
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if isinstance(raw, dict):
        value = raw.get("event_id")
        return value if isinstance(value, str) else None
    return None


def _describe(exc: ValidationError, data: str | bytes) -> ProtocolError:
    err = exc.errors(include_url=False)[0]
    kind = err["type"]
    loc = [str(p) for p in err["loc"]]
    if kind == "json_invalid":
        return ProtocolError("invalid_json", f"message is not valid JSON: {err['msg']}")
    event_id = _event_id_of(data)
    if kind == "union_tag_not_found":
        return ProtocolError(
            "missing_event_type", "message has no 'type' field", param="type", event_id=event_id
        )
    if kind == "union_tag_invalid":
        tag = (err.get("ctx") or {}).get("tag", "?")
        return ProtocolError(
            "unknown_event", f"unknown event type {tag!r}", param="type", event_id=event_id
        )
    if not loc:
        return ProtocolError(
            "invalid_event", f"message must be a JSON object: {err['msg']}", event_id=event_id
        )
    param = ".".join(loc[1:]) or None
    what = f"{loc[0]}: field '{param}'" if param else loc[0]
    return ProtocolError(
        "invalid_value", f"{what}: {err['msg']}", param=param, event_id=event_id
    )


# ---------------------------------------------------------------------- beta dialect


def _rename(part: Any, names: dict[str, str]) -> Any:
    if isinstance(part, dict) and isinstance(part.get("type"), str):
        part = dict(part, type=names.get(part["type"], part["type"]))
    return part


def _item(item: Any, names: dict[str, str]) -> Any:
    if isinstance(item, dict) and isinstance(item.get("content"), list):
        item = dict(item, content=[_rename(p, names) for p in item["content"]])
    return item


def _response_to_beta(resp: dict[str, Any]) -> dict[str, Any]:
    out = dict(resp)
    out["modalities"] = out.pop("output_modalities", ["audio"])
    out["output"] = [_item(i, _BETA_PART_TYPES) for i in out.get("output", [])]
    return out


def _response_from_beta(resp: dict[str, Any]) -> dict[str, Any]:
    out = dict(resp)
    out["output_modalities"] = out.pop("modalities", ["audio"])
    out["output"] = [_item(i, _GA_PART_TYPES) for i in out.get("output", [])]
    return out


def _beta_turn_detection(td: Any) -> Any:
    """The beta shape has no ``idle_timeout_ms`` (a GA field)."""
    if not isinstance(td, dict):
        return td
    return {k: v for k, v in td.items() if k != "idle_timeout_ms"}


def _session_to_beta(session: dict[str, Any]) -> dict[str, Any]:
    audio_in = session["audio"]["input"]
    audio_out = session["audio"]["output"]
    return {
        "object": session["object"],
        "id": session["id"],
        "model": session["model"],
        "modalities": session["output_modalities"],
        "instructions": session["instructions"],
        "max_response_output_tokens": session["max_output_tokens"],
        "voice": audio_out["voice"],
        "speed": audio_out["speed"],
        "input_audio_format": _BETA_FORMAT,
        "output_audio_format": _BETA_FORMAT,
        "input_audio_transcription": audio_in["transcription"],
        "turn_detection": _beta_turn_detection(audio_in["turn_detection"]),
        "input_audio_noise_reduction": audio_in["noise_reduction"],
        "tools": session["tools"],
        "tool_choice": _beta_tool_choice(session["tool_choice"]),
    }


def _beta_tool_choice(choice: Any) -> Any:
    """The beta session's ``tool_choice`` is a string: a named function is its name."""
    return choice["name"] if isinstance(choice, dict) else choice


def _ga_tool_choice(choice: Any) -> Any:
    if isinstance(choice, str) and choice not in ("auto", "none", "required"):
        return {"type": "function", "name": choice}
    return choice


def _session_from_beta(session: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "realtime",
        "object": session["object"],
        "id": session["id"],
        "model": session["model"],
        "output_modalities": session["modalities"],
        "instructions": session["instructions"],
        "max_output_tokens": session["max_response_output_tokens"],
        "audio": {
            "input": {
                "transcription": session["input_audio_transcription"],
                "turn_detection": session["turn_detection"],
                "noise_reduction": session["input_audio_noise_reduction"],
            },
            "output": {"voice": session["voice"], "speed": session["speed"]},
        },
        "tools": session.get("tools", []),
        "tool_choice": _ga_tool_choice(session.get("tool_choice", "auto")),
    }


def _to_beta(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data, type=BETA_EVENT_NAMES.get(data["type"], data["type"]))
    if out["type"] == "response.function_call_arguments.done":
        out.pop("name", None)  # not in the beta event
    if "session" in out:
        out["session"] = _session_to_beta(out["session"])
    if "response" in out:
        out["response"] = _response_to_beta(out["response"])
    if "item" in out:
        out["item"] = _item(out["item"], _BETA_PART_TYPES)
    return out


def _from_beta(data: Any) -> Any:
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        return data
    out = dict(data, type=_GA_EVENT_NAMES.get(data["type"], data["type"]))
    if out["type"] == "response.function_call_arguments.done":
        out.setdefault("name", "")  # a beta server does not say
    if isinstance(out.get("session"), dict):
        out["session"] = _session_from_beta(out["session"])
    if isinstance(out.get("response"), dict):
        out["response"] = _response_from_beta(out["response"])
    if "item" in out:
        out["item"] = _item(out["item"], _GA_PART_TYPES)
    return out
