"""The Realtime codec: round trips, SDK compatibility, and precise refusals."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assistant.serve.protocol import client_events as C
from assistant.serve.protocol import server_events as S
from assistant.serve.protocol.codec import (
    BETA_EVENT_NAMES,
    GA_ONLY_EVENTS,
    Codec,
    Dialect,
    ProtocolError,
)
from tests.serve.examples import client_examples, server_examples


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec()


def test_examples_cover_every_event_type() -> None:
    assert {type(e) for e in client_examples()} == set(C.CLIENT_EVENT_TYPES)
    assert {type(e) for e in server_examples()} == set(S.SERVER_EVENT_TYPES)


@pytest.mark.parametrize("event", client_examples(), ids=lambda e: e.type)
def test_client_events_round_trip(codec: Codec, event: Any) -> None:
    assert codec.decode_client(codec.encode_client(event)) == event


@pytest.mark.parametrize("dialect", list(Dialect), ids=lambda d: d.value)
@pytest.mark.parametrize("event", server_examples(), ids=lambda e: e.type)
def test_server_events_round_trip(codec: Codec, event: Any, dialect: Dialect) -> None:
    expected = event
    if dialect is Dialect.BETA and isinstance(event, S.FunctionCallArgumentsDone):
        expected = dataclasses.replace(event, name="")  # the beta event has no name
    assert codec.decode_server(codec.encode_server(event, dialect), dialect) == expected


@pytest.mark.parametrize("event", server_examples(), ids=lambda e: e.type)
def test_server_events_validate_against_openai_sdk_models(codec: Codec, event: Any) -> None:
    """Every event we send parses strictly with the official SDK's typed models, in the
    GA shapes and (for a client that asked for them) the beta shapes and names."""
    from openai._models import validate_type
    from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
    from openai.types.realtime import RealtimeServerEvent

    ga_json = json.loads(codec.encode_server(event))
    ga: Any = validate_type(type_=RealtimeServerEvent, value=ga_json)  # type: ignore[arg-type]
    assert ga.type == event.type
    # The SDK's models accept unknown fields silently: a field we send that the protocol
    # does not have (a typo, a dropped rename) must fail here, not in a client. The one
    # allowance: the hosted GA server's session objects carry ``id`` and ``object``
    # (``"realtime.session"``, as in the API reference's session.created example) which
    # the SDK's request-shaped session model does not declare.
    assert [p for p in _extra_fields(ga) if p not in _HOSTED_SESSION_FIELDS] == []
    beta_json = json.loads(codec.encode_server(event, Dialect.BETA))
    assert beta_json["type"] == BETA_EVENT_NAMES.get(event.type, event.type)
    if beta_json["type"] in ("conversation.item.retrieved", *GA_ONLY_EVENTS):
        return  # not in the beta SDK's union (and GA-only events are never sent to beta)
    if "session" in beta_json:
        # The beta models list OpenAI's model names as literals; ours is not one of them
        # (the SDK does not validate what it receives, so clients are unaffected).
        del beta_json["session"]["model"]
    beta: Any = validate_type(type_=BetaServerEvent, value=beta_json)  # type: ignore[arg-type]
    assert beta.type == beta_json["type"]
    assert [p for p in _extra_fields(beta) if p not in _HOSTED_SESSION_FIELDS] == []


_HOSTED_SESSION_FIELDS = frozenset({".session.id", ".session.object"})


def _extra_fields(value: Any, path: str = "") -> list[str]:
    """Paths of fields a parsed SDK model kept as extras (it has no such field)."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        found = [f"{path}.{k}" for k in (value.model_extra or {})]
        for name in type(value).model_fields:
            found += _extra_fields(getattr(value, name), f"{path}.{name}")
        return found
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _extra_fields(v, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _extra_fields(v, f"{path}.{k}")]
    return []


def test_sdk_typed_client_events_decode(codec: Codec) -> None:
    from openai.types.realtime import (
        ConversationItemTruncateEvent,
        InputAudioBufferAppendEvent,
        RealtimeAudioConfig,
        RealtimeAudioConfigInput,
        RealtimeSessionCreateRequest,
        SessionUpdateEvent,
    )
    from openai.types.realtime.realtime_audio_input_turn_detection import ServerVad

    update = SessionUpdateEvent(
        type="session.update",
        session=RealtimeSessionCreateRequest(
            type="realtime",
            instructions="x",
            audio=RealtimeAudioConfig(
                input=RealtimeAudioConfigInput(
                    turn_detection=ServerVad(type="server_vad", silence_duration_ms=700)
                )
            ),
        ),
    )
    got: Any = codec.decode_client(update.to_json(use_api_names=True, exclude_unset=True))
    assert got.type == "session.update"
    assert got.session.instructions == "x"
    assert got.session.audio.input.turn_detection.silence_duration_ms == 700
    assert got.session.audio.input.turn_detection.threshold is C.MISSING
    append = InputAudioBufferAppendEvent(type="input_audio_buffer.append", audio="AAAA")
    assert codec.decode_client(append.to_json()) == C.InputAudioBufferAppend(audio="AAAA")
    trunc = ConversationItemTruncateEvent(
        type="conversation.item.truncate", item_id="it", content_index=0, audio_end_ms=10
    )
    assert codec.decode_client(trunc.to_json()).audio_end_ms == 10


def test_missing_and_null_are_different(codec: Codec) -> None:
    absent = codec.decode_client('{"type":"session.update","session":{}}')
    null = codec.decode_client('{"type":"session.update","session":{"turn_detection":null}}')
    assert absent.session.turn_detection is C.MISSING
    assert null.session.turn_detection is None
    assert '"turn_detection":null' in codec.encode_client(null)
    assert "turn_detection" not in codec.encode_client(absent)


def test_unknown_fields_are_ignored(codec: Codec) -> None:
    event = codec.decode_client(
        '{"type":"session.update","session":{"type":"realtime","tools":[{"type":"function"}],'
        '"tracing":"auto","instructions":"hi"},"extra":1}'
    )
    assert event.session.instructions == "hi"


@pytest.mark.parametrize(
    ("message", "code", "param"),
    [
        ("{", "invalid_json", None),
        ("", "invalid_json", None),
        ("[1, 2]", "invalid_event", None),
        ('"text"', "invalid_event", None),
        ("{}", "missing_event_type", "type"),
        ('{"type": "session.delete"}', "unknown_event", "type"),
        ('{"type": 7}', "unknown_event", "type"),
        ('{"type": "input_audio_buffer.append"}', "invalid_value", "audio"),
        ('{"type": "input_audio_buffer.append", "audio": 5}', "invalid_value", "audio"),
        (
            '{"type":"conversation.item.truncate","item_id":"i","content_index":0,"audio_end_ms":-1}',
            "invalid_value",
            "audio_end_ms",
        ),
        (
            '{"type":"session.update","session":{"audio":{"input":{"turn_detection":'
            '{"type":"server_vad","threshold":1.5}}}}}',
            "invalid_value",
            "session.audio.input.turn_detection.threshold",
        ),
        ("[" * 100_000, "invalid_json", None),
    ],
)
def test_refusals_name_the_problem(
    codec: Codec, message: str, code: str, param: str | None
) -> None:
    with pytest.raises(ProtocolError) as info:
        codec.decode_client(message)
    assert info.value.code == code
    assert info.value.param == param
    assert info.value.message


def test_refusal_carries_the_client_event_id(codec: Codec) -> None:
    with pytest.raises(ProtocolError) as info:
        codec.decode_client('{"type":"input_audio_buffer.append","event_id":"mine"}')
    assert info.value.event_id == "mine"


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(max_size=40),
    ms=st.integers(min_value=0, max_value=10**9),
    dialect=st.sampled_from(list(Dialect)),
)
def test_text_and_numbers_round_trip(codec: Codec, text: str, ms: int, dialect: Dialect) -> None:
    events: list[Any] = [
        S.OutputAudioTranscriptDelta(event_id=text, response_id="r", item_id="i", delta=text),
        S.ConversationItemTruncated(event_id="e", item_id=text, audio_end_ms=ms),
        S.TranscriptionCompleted(event_id="e", item_id="i", transcript=text,
                                 usage=S.TranscriptionUsage(seconds=ms / 1000)),
    ]
    for event in events:
        assert codec.decode_server(codec.encode_server(event, dialect), dialect) == event
    client = C.ConversationItemCreate(
        item=C.ItemParam(role="user", content=(C.ContentParam(type="input_text", text=text),))
    )
    assert codec.decode_client(codec.encode_client(client)) == client
