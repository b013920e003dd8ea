"""Function calling: tools the model may call, how they run, and calls in its text.

A tool is a `ToolSpec` (name, description, JSON-schema parameters, `speculative_ok`, and
for a local tool its callable), made from a typed function (`tool_from_function`), a
client's JSON definition (`spec_from_definition`), or a configured reference
(`load_tool`: ``builtin:get_time``, ``module:function``). One conversation's tools are a
`ToolRegistry` (`build_registry`; the built-ins' state, its `TimerService`, belongs to
that conversation). `run_tool` runs a call and always returns a `ToolResult` for the
model (errors and timeouts included); `parse_tool_calls` and `ToolCallDetector` read calls
out of the generated text.

    registry = build_registry(["builtin:get_time", "builtin:set_timer"],
                              timers=TimerService(clock))
    template = ChatTemplate(tokenizer, tools=registry.specs_for_template())
    ...
    reply = parse_tool_calls(generated_text)
    for call in reply.calls:
        result = await run_tool(registry.get(call.name), call.arguments_json, timeout_s=5)
        history.append(result.message())
"""

from assistant.tools.builtin import BUILTIN_PREFIX, BUILTIN_TOOLS, builtin_tools, local_now
from assistant.tools.calculator import CalculatorError, evaluate
from assistant.tools.calls import (
    CallFormat,
    DetectorStep,
    ParsedReply,
    ToolCall,
    ToolCallDetector,
    Verdict,
    assistant_message,
    parse_tool_calls,
)
from assistant.tools.errors import (
    ToolCallParseError,
    ToolError,
    ToolLoadError,
    ToolSchemaError,
    UnknownToolError,
)
from assistant.tools.loading import REFERENCE_PATTERN, build_registry, load_tool
from assistant.tools.options import ToolOptions
from assistant.tools.registry import ToolRegistry
from assistant.tools.runner import MAX_OUTPUT_CHARS, ToolResult, parse_arguments, run_tool
from assistant.tools.signature import parse_docstring, tool_from_function
from assistant.tools.spec import NAME_PATTERN, ToolSpec, spec_from_definition
from assistant.tools.timers import MAX_TIMER_S, Timer, TimerService

__all__ = [
    "BUILTIN_PREFIX",
    "BUILTIN_TOOLS",
    "MAX_OUTPUT_CHARS",
    "MAX_TIMER_S",
    "NAME_PATTERN",
    "REFERENCE_PATTERN",
    "CalculatorError",
    "CallFormat",
    "DetectorStep",
    "ParsedReply",
    "Timer",
    "TimerService",
    "ToolCall",
    "ToolCallDetector",
    "ToolCallParseError",
    "ToolError",
    "ToolLoadError",
    "ToolOptions",
    "ToolRegistry",
    "ToolResult",
    "ToolSchemaError",
    "ToolSpec",
    "UnknownToolError",
    "Verdict",
    "assistant_message",
    "build_registry",
    "builtin_tools",
    "evaluate",
    "load_tool",
    "local_now",
    "parse_arguments",
    "parse_docstring",
    "parse_tool_calls",
    "run_tool",
    "spec_from_definition",
    "tool_from_function",
]
