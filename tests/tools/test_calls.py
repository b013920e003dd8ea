"""Tool calls in generated text: both formats parsed, malformed calls refused, and a
streaming reply's calls kept from the speech synthesiser."""

from __future__ import annotations

import pytest

from assistant.tools import (
    DetectorStep,
    ParsedReply,
    ToolCall,
    ToolCallDetector,
    ToolCallParseError,
    Verdict,
    assistant_message,
    parse_tool_calls,
)

WEATHER = ToolCall("get_weather", {"city": "Paris", "unit": "C"})
TIME = ToolCall("get_time", {})


@pytest.mark.parametrize("text, expected", [
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n'
     '</tool_call>', ParsedReply("", (WEATHER,), "hermes")),
    ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
     '"unit": "C"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n'
     '</tool_call>', ParsedReply("Let me check.", (WEATHER, TIME), "hermes")),
    # Stopped at the end-of-turn token right after the JSON, before the closing tag.
    ('<tool_call>\n{"name": "get_time", "arguments": {}}', ParsedReply("", (TIME,), "hermes")),
    # Arguments written as a JSON string, and none at all.
    ('<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\", '
     '\\"unit\\": \\"C\\"}"}</tool_call>', ParsedReply("", (WEATHER,), "hermes")),
    ('<tool_call>{"name": "get_time"}</tool_call>', ParsedReply("", (TIME,), "hermes")),
    # Llama 3.x JSON.
    ('{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}',
     ParsedReply("", (WEATHER,), "llama")),
    ('<|python_tag|>{"name": "get_time", "parameters": {}}', ParsedReply("", (TIME,), "llama")),
    ('  {"type": "function", "name": "get_time", "parameters": {}}\n',
     ParsedReply("", (TIME,), "llama")),
    ('{"type": "function", "function": {"name": "get_time", "arguments": {}}}',
     ParsedReply("", (TIME,), "llama")),
    ('{"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": '
     '{"city": "Paris", "unit": "C"}}', ParsedReply("", (TIME, WEATHER), "llama")),
    ('[{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": '
     '{"city": "Paris", "unit": "C"}}]', ParsedReply("", (TIME, WEATHER), "llama")),
    # Plain replies, including ones that merely look like JSON.
    ("  It is sunny in Paris.  ", ParsedReply("It is sunny in Paris.")),
    ('{"temperature": 21}', ParsedReply('{"temperature": 21}')),
    ("[1, 2, 3]", ParsedReply("[1, 2, 3]")),
    ("{not json at all", ParsedReply("{not json at all")),
    ("", ParsedReply("")),
])
def test_parse(text: str, expected: ParsedReply) -> None:
    assert parse_tool_calls(text) == expected


@pytest.mark.parametrize("text, problem", [
    ('<tool_call>\n{"name": "get_time", "argum', "does not parse"),
    ("<tool_call>\nget_time()\n</tool_call>", "does not parse"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
    ('<tool_call>["get_time"]</tool_call>', "expected a JSON object, got list"),
    ('<tool_call>{"name": "x", "arguments": [1]}</tool_call>', "not a JSON object"),
    ('<tool_call>{"name": "x", "arguments": "{oops"}</tool_call>', "are not JSON"),
    ('{"name": "get_weather", "parameters": {"city": "Par', "does not parse"),
    ("<|python_tag|>get_time()", "does not parse"),
])
def test_malformed_calls_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ToolCallParseError, match=problem):
        parse_tool_calls(text)


def test_a_call_in_its_two_json_shapes() -> None:
    call = ToolCall("get_weather", {"city": "Zürich"})
    assert call.arguments_json == '{"city": "Zürich"}'
    assert assistant_message([call, TIME], "One moment.") == {
        "role": "assistant", "content": "One moment.", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather",
                                              "arguments": {"city": "Zürich"}}},
            {"type": "function", "function": {"name": "get_time", "arguments": {}}}]}


# ---- streaming ------------------------------------------------------------------------------


def stream(text: str, *, json_calls: bool = True, step: int = 1) -> tuple[str, list[Verdict]]:
    """Feed `text` in pieces of `step` characters: (the speech released, the verdicts)."""
    detector = ToolCallDetector(json_calls=json_calls)
    speech, verdicts = "", []
    for at in range(0, len(text), step):
        out = detector.feed(text[at:at + step])
        speech += out.speech
        verdicts.append(out.verdict)
    last = detector.finish()
    assert detector.text == text
    return speech + last.speech, [*verdicts, last.verdict]


HERMES_CALL = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
LLAMA_CALL = '{"name": "get_time", "parameters": {}}'


@pytest.mark.parametrize("step", [1, 3, 1000])
@pytest.mark.parametrize("text", [HERMES_CALL, "\n " + HERMES_CALL, LLAMA_CALL,
                                  "[" + LLAMA_CALL + "]", "<|python_tag|>" + LLAMA_CALL])
def test_a_call_is_never_released_as_speech(text: str, step: int) -> None:
    speech, verdicts = stream(text, step=step)
    assert speech == ""
    assert verdicts[-1] is Verdict.TOOL_CALL
    assert Verdict.SPEECH not in verdicts
    assert parse_tool_calls(text).calls == (TIME,)


def test_a_call_is_known_from_its_opening() -> None:
    detector = ToolCallDetector()
    assert detector.feed("<tool_") == DetectorStep("", Verdict.UNDECIDED)
    assert detector.feed("call>") == DetectorStep("", Verdict.TOOL_CALL)
    detector = ToolCallDetector()
    assert detector.feed(' { "na') == DetectorStep("", Verdict.UNDECIDED)
    assert detector.feed('me"') == DetectorStep("", Verdict.TOOL_CALL)


@pytest.mark.parametrize("step", [1, 2, 1000])
@pytest.mark.parametrize("text", [
    "It is 3 pm.", "  Sure: 2 < 3, and <b> is fine.", '{"temperature": 21} it says.',
    "<tool", "Use a <tool_ca", "{", "[1, 2]",
])
def test_speech_is_released_whole(text: str, step: int) -> None:
    speech, verdicts = stream(text, step=step)
    assert speech == text
    assert verdicts[-1] is Verdict.SPEECH
    assert Verdict.TOOL_CALL not in verdicts


def test_speech_is_released_as_it_comes_holding_back_only_a_possible_marker() -> None:
    detector = ToolCallDetector()
    assert detector.feed("Sure") == DetectorStep("Sure", Verdict.SPEECH)
    assert detector.feed(", one <") == DetectorStep(", one ", Verdict.SPEECH)
    assert detector.feed("b>") == DetectorStep("<b>", Verdict.SPEECH)
    assert detector.feed(" moment.<tool_c") == DetectorStep(" moment.", Verdict.SPEECH)
    assert detector.feed('all>{"name"') == DetectorStep("", Verdict.TOOL_CALL)
    assert detector.feed(": 1}") == DetectorStep("", Verdict.TOOL_CALL)
    assert detector.finish() == DetectorStep("", Verdict.TOOL_CALL)


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_words_then_a_call_speak_the_words_only(step: int) -> None:
    text = "Let me check.\n" + HERMES_CALL
    speech, verdicts = stream(text, step=step)
    assert speech == "Let me check.\n"
    assert verdicts[-1] is Verdict.TOOL_CALL
    assert parse_tool_calls(text) == ParsedReply("Let me check.", (TIME,), "hermes")


def test_json_calls_can_be_off_for_hermes_models() -> None:
    speech, verdicts = stream(LLAMA_CALL, json_calls=False)
    assert speech == LLAMA_CALL and verdicts[-1] is Verdict.SPEECH


def test_a_reply_of_only_whitespace_stays_undecided_until_it_ends() -> None:
    detector = ToolCallDetector()
    assert detector.feed("\n  ") == DetectorStep("", Verdict.UNDECIDED)
    assert detector.finish() == DetectorStep("\n  ", Verdict.SPEECH)


@pytest.mark.parametrize(("text", "start"), [
    ("<tool_call>", 11),
    ("Let me check. <tool_call>\n{", 25),
    ('<|python_tag|>{"name"', 14),
    ("<tool_call><|python_tag|>", 11),  # the first marker counts
    ('  {"name": "get_time"', 2),
])
def test_call_json_start_is_after_the_first_marker_or_at_the_json(text: str,
                                                                  start: int) -> None:
    from assistant.tools.calls import call_json_start

    assert call_json_start(text) == start
