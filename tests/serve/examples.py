"""One or more example instances of every client and server event, for codec tests."""

from __future__ import annotations

from typing import Any

from assistant.serve.protocol import client_events as C
from assistant.serve.protocol import server_events as S

WEATHER: dict[str, Any] = {
    "type": "function", "name": "weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}
"""A Realtime function tool (the flat GA/beta shape)."""


def client_examples() -> list[Any]:
    td = C.TurnDetectionParam(
        threshold=0.4, prefix_padding_ms=200, silence_duration_ms=600,
        create_response=False, interrupt_response=True,
    )
    return [
        C.SessionUpdate(session=C.SessionParam()),
        C.SessionUpdate(
            event_id="evt_1",
            session=C.SessionParam(
                type="realtime",
                instructions="be brief",
                output_modalities=("audio",),
                max_output_tokens=64,
                audio=C.AudioParam(
                    input=C.AudioInputParam(
                        format=C.AudioFormatParam(type="audio/pcm", rate=24000),
                        turn_detection=td,
                    ),
                    output=C.AudioOutputParam(voice="alloy", speed=1.25),
                ),
            ),
        ),
        C.SessionUpdate(session=C.SessionParam(audio=C.AudioParam(input=C.AudioInputParam(
            turn_detection=None)))),
        C.SessionUpdate(
            session=C.SessionParam(
                modalities=("text", "audio"), voice="joe", turn_detection=None,
                input_audio_format="pcm16", output_audio_format="pcm16",
                max_response_output_tokens="inf", temperature=0.7,
            )
        ),
        C.SessionUpdate(session=C.SessionParam(turn_detection=C.TurnDetectionParam(
            type="semantic_vad", eagerness="high"))),
        C.SessionUpdate(session=C.SessionParam(tools=(WEATHER,), tool_choice="required")),
        C.SessionUpdate(session=C.SessionParam(
            tools=(), tool_choice={"type": "function", "name": "weather"})),
        C.InputAudioBufferAppend(audio="AAECAw=="),
        C.InputAudioBufferAppend(event_id="a", audio=""),
        C.InputAudioBufferCommit(),
        C.InputAudioBufferCommit(event_id="c1"),
        C.InputAudioBufferClear(),
        C.ConversationItemCreate(
            item=C.ItemParam(role="user", content=(C.ContentParam(type="input_text", text="hi"),))
        ),
        C.ConversationItemCreate(
            event_id="x", previous_item_id=None,
            item=C.ItemParam(id="item_9", role="system",
                             content=(C.ContentParam(type="input_text", text="note"),)),
        ),
        C.ConversationItemCreate(item=C.ItemParam(
            type="function_call_output", call_id="call_1", output='{"temp": 21}')),
        C.ConversationItemTruncate(item_id="item_1", content_index=0, audio_end_ms=1500),
        C.ConversationItemRetrieve(item_id="item_1"),
        C.ConversationItemDelete(item_id="item_1"),
        C.ResponseCreate(),
        C.ResponseCreate(
            response=C.ResponseParam(
                instructions="shout", output_modalities=("text",), max_output_tokens=12,
                conversation="auto", metadata={"k": "v"},
            )
        ),
        C.ResponseCancel(),
        C.ResponseCancel(response_id="resp_1"),
        C.OutputAudioBufferClear(),
    ]


def _session(turn_detection: S.TurnDetection | None, *, tools: bool = False) -> S.Session:
    weather = S.SessionTool(name="weather", description=WEATHER["description"],
                            parameters=WEATHER["parameters"])
    return S.Session(
        id="sess_1",
        model="smollm2",
        instructions="be brief",
        output_modalities=("audio",),
        max_output_tokens=96,
        audio=S.SessionAudio(
            input=S.SessionAudioInput(
                transcription=S.TranscriptionConfig(model="whisper-tiny.en"),
                turn_detection=turn_detection,
            ),
            output=S.SessionAudioOutput(voice="joe", speed=1.0),
        ),
        tools=(weather,) if tools else (),
        tool_choice=S.ToolChoiceFunction(name="weather") if tools else "auto",
    )


def server_examples() -> list[Any]:
    user = S.Item(id="item_1", role="user",
                  content=(S.ContentPart(type="input_audio", transcript="hello"),))
    bot = S.Item(id="item_2", role="assistant", status="incomplete",
                 content=(S.ContentPart(type="output_audio", transcript="hi there"),))
    text_bot = S.Item(id="item_3", role="assistant",
                      content=(S.ContentPart(type="output_text", text="hi"),))
    usage = S.Usage(
        total_tokens=30, input_tokens=20, output_tokens=10,
        input_token_details=S.InputTokenDetails(cached_tokens=16, text_tokens=20),
        output_token_details=S.OutputTokenDetails(text_tokens=10),
    )
    resp = S.Response(
        id="resp_1", status="cancelled",
        status_details=S.StatusDetails(type="cancelled", reason="turn_detected"),
        output=(bot,), output_modalities=("audio",), conversation_id="conv_1",
        max_output_tokens=96, metadata={"a": "b"}, usage=usage,
    )
    ids: dict[str, Any] = {"event_id": "event_1", "response_id": "resp_1", "item_id": "item_2"}
    call = S.FunctionCallItem(id="item_4", call_id="call_1", name="weather",
                              arguments='{"city": "Oslo"}')
    calling = S.FunctionCallItem(id="item_4", status="in_progress", call_id="call_1",
                                 name="weather")
    output = S.FunctionCallOutputItem(id="item_5", call_id="call_1", output='{"temp": 21}')
    called = S.Response(id="resp_2", status="completed", output=(text_bot, call), usage=usage)
    call_ids: dict[str, Any] = {"event_id": "event_1", "response_id": "resp_2",
                                "item_id": "item_4", "output_index": 1, "call_id": "call_1"}
    return [
        S.Error(event_id="event_0", error=S.ErrorDetail(
            type="invalid_request_error", code="invalid_json", message="bad", param="audio",
            event_id="c1")),
        S.Error(event_id="event_0", error=S.ErrorDetail(type="server_error", message="oops")),
        S.SessionCreated(event_id="event_1", session=_session(S.TurnDetection())),
        S.SessionUpdated(event_id="event_1", session=_session(None)),
        S.SessionUpdated(event_id="event_1", session=_session(None, tools=True)),
        S.SpeechStarted(event_id="event_1", audio_start_ms=120, item_id="item_1"),
        S.SpeechStopped(event_id="event_1", audio_end_ms=1820, item_id="item_1"),
        S.InputAudioBufferCommitted(event_id="event_1", previous_item_id=None, item_id="item_1"),
        S.InputAudioBufferCommitted(event_id="event_1", previous_item_id="item_0", item_id="i"),
        S.InputAudioBufferCleared(event_id="event_1"),
        S.ConversationItemAdded(event_id="event_1", previous_item_id="item_1", item=bot),
        S.ConversationItemAdded(event_id="event_1", item=text_bot),
        S.ConversationItemDone(event_id="event_1", previous_item_id="item_1", item=bot),
        S.ConversationItemRetrieved(event_id="event_1", item=user),
        S.ConversationItemDeleted(event_id="event_1", item_id="item_2"),
        S.ConversationItemTruncated(event_id="event_1", item_id="item_2", audio_end_ms=700),
        S.TranscriptionDelta(event_id="event_1", item_id="item_1", delta="hel"),
        S.TranscriptionCompleted(event_id="event_1", item_id="item_1", transcript="hello",
                                 usage=S.TranscriptionUsage(seconds=1.5)),
        S.ResponseCreated(event_id="event_1", response=S.Response(id="resp_1",
                                                                  status="in_progress")),
        S.ResponseDone(event_id="event_1", response=resp),
        S.OutputItemAdded(event_id="event_1", response_id="resp_1", item=bot),
        S.OutputItemDone(event_id="event_1", response_id="resp_1", item=text_bot),
        S.ContentPartAdded(**ids, part=S.ContentPart(type="audio", transcript="")),
        S.ContentPartDone(**ids, part=S.ContentPart(type="text", text="hi")),
        S.OutputAudioDelta(**ids, delta="AAAA"),
        S.OutputAudioDone(**ids),
        S.OutputAudioTranscriptDelta(**ids, delta=" there"),
        S.OutputAudioTranscriptDone(**ids, transcript="hi there"),
        S.OutputTextDelta(**ids, delta="h"),
        S.OutputTextDone(**ids, text="hi"),
        S.OutputItemAdded(event_id="event_1", response_id="resp_2", output_index=1,
                          item=calling),
        S.ConversationItemAdded(event_id="event_1", previous_item_id="item_3", item=calling),
        S.FunctionCallArgumentsDelta(**call_ids, delta='{"city": '),
        S.FunctionCallArgumentsDone(**call_ids, name="weather", arguments='{"city": "Oslo"}'),
        S.OutputItemDone(event_id="event_1", response_id="resp_2", output_index=1, item=call),
        S.ConversationItemDone(event_id="event_1", previous_item_id="item_3", item=call),
        S.ResponseDone(event_id="event_1", response=called),
        S.ConversationItemAdded(event_id="event_1", previous_item_id="item_4", item=output),
        S.ConversationItemRetrieved(event_id="event_1", item=call),
    ]
