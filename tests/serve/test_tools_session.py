"""Function calling in the protocol session (the scripted backend): the session's tools,
a reply's call as a ``function_call`` output item, and the client's output answered.
Every event the session sends is checked against the official SDK's typed models, in
both dialects."""

from __future__ import annotations

import json
from typing import Any

import pytest

from assistant.serve.protocol import client_events as C
from assistant.serve.protocol import server_events as S
from assistant.serve.protocol.codec import Codec, Dialect
from tests.serve.examples import WEATHER
from tests.serve.harness import Harness, harness
from tests.serve.support import DEFAULTS, run

OSLO = '{"city": "Oslo"}'
CALL_ITEM_EVENTS = [
    "response.output_item.added",
    "conversation.item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "conversation.item.done",
]


def _tools(*tools: dict[str, Any], choice: Any = C.MISSING) -> C.SessionUpdate:
    return C.SessionUpdate(event_id="u1", session=C.SessionParam(tools=tools, tool_choice=choice))


def _text(text: str) -> C.ConversationItemCreate:
    return C.ConversationItemCreate(item=C.ItemParam(
        role="user", content=(C.ContentParam(type="input_text", text=text),)))


def _output(call_id: str, output: str, **kw: Any) -> C.ConversationItemCreate:
    return C.ConversationItemCreate(item=C.ItemParam(
        type="function_call_output", call_id=call_id, output=output, **kw))


def _check_with_sdk(events: list[Any]) -> None:
    """Each event parses with the SDK's models: GA, and beta under its older names."""
    from openai._models import validate_type
    from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
    from openai.types.realtime import RealtimeServerEvent

    codec = Codec()
    for event in events:
        ga: Any = validate_type(type_=RealtimeServerEvent,  # type: ignore[arg-type]
                                value=json.loads(codec.encode_server(event)))
        assert ga.type == event.type
        if not Codec.sends(event, Dialect.BETA) or event.type == "conversation.item.retrieved":
            continue
        beta_json = json.loads(codec.encode_server(event, Dialect.BETA))
        if "session" in beta_json:
            del beta_json["session"]["model"]  # the beta models list OpenAI's names only
        beta: Any = validate_type(type_=BetaServerEvent, value=beta_json)  # type: ignore[arg-type]
        assert beta.type == beta_json["type"]


async def _ask_weather(h: Harness) -> Any:
    """Offer the weather tool, ask about Oslo, ask for a response: its ``response.done``."""
    await h.client(_tools(WEATHER))
    await h.client(_text("Weather in Oslo?"))
    await h.client(C.ResponseCreate())
    (done,) = await h.wait_for("response.done")
    return done


def _after(h: Harness, event_type: str) -> list[Any]:
    """The events sent after the last one of ``event_type``."""
    last = max(i for i, e in enumerate(h.sent) if e.type == event_type)
    return h.sent[last + 1:]


def test_tools_are_echoed_in_session_updated() -> None:
    async def main() -> None:
        async with harness() as h:
            assert await h.client(_tools(WEATHER, choice="required")) is None
            (updated,) = await h.wait_for("session.updated")
            assert updated.session.tools == (S.SessionTool(
                name="weather", description=WEATHER["description"],
                parameters=WEATHER["parameters"]),)
            assert updated.session.tool_choice == "required"
            named = {"type": "function", "name": "weather"}
            assert await h.client(C.SessionUpdate(session=C.SessionParam(
                tool_choice=named))) is None
            second = (await h.wait_for("session.updated", 2))[1]
            assert second.session.tool_choice == S.ToolChoiceFunction(name="weather")
            assert h.backend.settings.tools[0].name == "weather"
            assert h.backend.settings.tool_choice == "weather"
            _check_with_sdk(h.sent)
            beta = json.loads(Codec().encode_server(second, Dialect.BETA))["session"]
            assert beta["tool_choice"] == "weather"
            assert beta["tools"][0]["name"] == "weather"

    run(main())


MCP = {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.example"}
NO_SCHEMA = dict(WEATHER, parameters={"type": "string"})
BAD_NAME = dict(WEATHER, name="what's the weather")


@pytest.mark.parametrize(
    ("update", "code", "param"),
    [
        (_tools(MCP), "unsupported_tool_type", "session.tools.0.type"),
        (_tools(WEATHER, MCP), "unsupported_tool_type", "session.tools.1.type"),
        (_tools(NO_SCHEMA), "invalid_tool", "session.tools.0.parameters.type"),
        (_tools(BAD_NAME), "invalid_tool", "session.tools.0.name"),
        (_tools(WEATHER, WEATHER), "duplicate_tool_name", "session.tools.1.name"),
        (_tools(WEATHER, choice="forecast"), "unknown_tool", "session.tool_choice"),
        (_tools(WEATHER, choice={"type": "function", "name": "forecast"}),
         "unknown_tool", "session.tool_choice.name"),
        (_tools(WEATHER, choice={"type": "mcp", "server_label": "deepwiki"}),
         "unsupported_tool_choice", "session.tool_choice.type"),
        (_tools(choice="weather"), "unknown_tool", "session.tool_choice"),
    ],
    ids=["mcp", "mcp-second", "schema", "name", "duplicate", "unknown-choice",
         "unknown-named-choice", "mcp-choice", "choice-without-tools"],
)
def test_bad_tools_are_refused_naming_the_field(update: C.SessionUpdate, code: str,
                                                param: str) -> None:
    async def main() -> None:
        async with harness() as h:
            err = await h.client(update)
            assert err is not None and (err.code, err.param, err.event_id) == (code, param, "u1")
            assert err.message
            (error,) = await h.wait_for("error")
            assert error.error.param == param
            assert "session.updated" not in h.types()
            assert h.session.settings == DEFAULTS

    run(main())


def test_removing_the_chosen_tool_is_refused() -> None:
    async def main() -> None:
        async with harness() as h:
            await h.client(_tools(WEATHER, choice={"type": "function", "name": "weather"}))
            err = await h.client(C.SessionUpdate(session=C.SessionParam(tools=())))
            assert err is not None and (err.code, err.param) == ("unknown_tool", "session.tools")
            assert h.session.settings.tools  # unchanged
            assert await h.client(C.SessionUpdate(session=C.SessionParam(
                tools=(), tool_choice="auto"))) is None

    run(main())


def test_a_call_only_reply_is_one_function_call_item_and_its_output_is_answered() -> None:
    async def main() -> None:
        async with harness(reply="", tool_call=("weather", OSLO)) as h:
            done = await _ask_weather(h)
            response = _after(h, "response.created")
            assert [e.type for e in response] == [*CALL_ITEM_EVENTS, "response.done"]
            added, conv_added, delta, args_done, item_done, conv_done, _ = response
            call = done.response.output[0]
            assert len(done.response.output) == 1 and done.response.status == "completed"
            assert (call.type, call.call_id, call.name, call.arguments, call.status) == (
                "function_call", "call_1", "weather", OSLO, "completed")
            assert added.item.status == "in_progress" and added.item.arguments == ""
            assert added.item.id == call.id and added.output_index == 0
            assert conv_added.item == added.item
            assert (delta.call_id, delta.item_id, delta.delta, delta.response_id) == (
                "call_1", call.id, OSLO, done.response.id)
            assert (args_done.name, args_done.arguments) == ("weather", OSLO)
            assert item_done.item == conv_done.item == call
            assert "response.output_audio.delta" not in h.types()

            err = await h.client(_output("call_9", "{}"))
            assert err is not None and (err.code, err.param) == ("unknown_call_id",
                                                                 "item.call_id")
            assert await h.client(_output("call_1", '{"temp": 21}', id="out_1")) is None
            (out_added,) = [e for e in _after(h, "response.done")
                            if e.type == "conversation.item.added"]
            assert out_added.item == S.FunctionCallOutputItem(
                id="out_1", call_id="call_1", output='{"temp": 21}')
            assert out_added.previous_item_id == call.id
            again = await h.client(_output("call_1", "{}"))
            assert again is not None and again.code == "duplicate_call_output"
            assert h.backend.tool_outputs == [("call_1", '{"temp": 21}')]

            await h.client(C.ResponseCreate())
            answer = (await h.wait_for("response.done", 2))[1]
            assert h.backend.answered == [[("call_1", '{"temp": 21}')]]
            (item,) = answer.response.output
            assert item.type == "message" and item.content[0].transcript == 'result {"temp": 21}'
            assert "response.output_audio.delta" in [e.type for e in _after(h, "conversation.item.added")]
            _check_with_sdk(h.sent)

    run(main())


def test_words_before_a_call_are_a_message_item_then_the_call() -> None:
    async def main() -> None:
        async with harness(reply="let me check", tool_call=("weather", OSLO)) as h:
            done = await _ask_weather(h)
            message, call = done.response.output
            assert message.type == "message" and message.status == "completed"
            assert message.content[0].transcript == "let me check"
            assert call.type == "function_call" and call.arguments == OSLO
            response = [e.type for e in _after(h, "response.created")]
            message_end = response.index("conversation.item.done")
            assert response[message_end + 1:] == [*CALL_ITEM_EVENTS, "response.done"]
            call_added = next(e for e in h.sent if isinstance(e, S.OutputItemAdded)
                              and e.item.type == "function_call")
            assert call_added.output_index == 1
            assert next(e for e in h.sent if isinstance(e, S.FunctionCallArgumentsDone)
                        ).output_index == 1
            _check_with_sdk(h.sent)

    run(main())


def test_function_call_items_are_retrieved_but_not_truncated_nor_created() -> None:
    async def main() -> None:
        async with harness(reply="", tool_call=("weather", OSLO)) as h:
            done = await _ask_weather(h)
            call = done.response.output[0]
            await h.client(C.ConversationItemRetrieve(item_id=call.id))
            (retrieved,) = await h.wait_for("conversation.item.retrieved")
            assert retrieved.item == call
            cut = await h.client(C.ConversationItemTruncate(item_id=call.id, audio_end_ms=0))
            assert cut is not None and (cut.code, cut.param) == ("invalid_item", "item_id")
            made = await h.client(C.ConversationItemCreate(item=C.ItemParam(
                type="function_call", call_id="mine", name="weather", arguments="{}")))
            assert made is not None and (made.code, made.param) == ("unsupported_item",
                                                                    "item.type")
            missing = await h.client(C.ConversationItemCreate(item=C.ItemParam(
                type="function_call_output", output="{}")))
            assert missing is not None and missing.param == "item.call_id"

    run(main())


def test_a_reply_that_says_and_calls_nothing_still_has_its_message_item() -> None:
    """The message item opens with the first words; a reply without any (and without a
    call) still ends with one, empty, as before tools existed."""
    async def main() -> None:
        async with harness(reply="", tool_call=None) as h:
            await h.client(_text("hi"))
            await h.client(C.ResponseCreate())
            (done,) = await h.wait_for("response.done")
            (item,) = done.response.output
            assert item.type == "message" and item.content[0].transcript == ""
            assert [e.type for e in _after(h, "response.created")][:3] == [
                "response.output_item.added", "conversation.item.added",
                "response.content_part.added"]

    run(main())
