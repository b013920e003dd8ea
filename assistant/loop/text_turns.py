"""Turns given whole, as text, while nobody holds the floor: a user's text (a client's
item), the results of a reply's tool calls, and the assistant's own words (a filler, a
timer). Each is a `TextTurn` to the turn manager, with what the turn really is kept on
the loop's parts for the reply's start (`assistant.loop.router`)."""

from __future__ import annotations

from assistant.loop.parts import LoopParts
from assistant.loop.tool_worker import SayText, ToolsDone
from assistant.turns.actions import StartResponse
from assistant.turns.events import TextTurn

__all__ = ["results_label", "say", "start_text_turn", "tools_done"]


def results_label(results: tuple[tuple[str, str], ...]) -> str:
    """How a turn of tool results ``(name, output)`` is labelled (its "user text" in the
    log: the model sees the results themselves)."""
    return "[tool results: " + ", ".join(name for name, _ in results) + "]"


def start_text_turn(p: LoopParts, text: str, *, tool_results: tuple[tuple[str, str], ...] = (),
                    said: str = "", max_new_tokens: int | None = None) -> StartResponse | None:
    """A whole turn given as ``text`` (user words; or tool results it labels; or, with
    ``said``, the assistant's own words), started now if nobody holds the floor."""
    turn_id = p.tm.next_turn_id
    p.forget(turn_id)
    if max_new_tokens is not None:
        p.response_tokens[turn_id] = max_new_tokens
    if tool_results:
        p.tool_results[turn_id] = tool_results
    if said:
        p.said[turn_id] = said
    actions = p.turn_input(TextTurn(p.now_ms(), text))
    start = next((a for a in actions if isinstance(a, StartResponse)), None)
    if start is None:
        p.forget(turn_id)
    return start


def tools_done(p: LoopParts, item: ToolsDone) -> None:
    """Answer on the results; while our filler plays, once it ends; if the user holds
    the floor now, record them without a reply."""
    if item.respond:
        if start_text_turn(p, results_label(item.results), tool_results=item.results) is not None:
            return
        if p.tools.filler_turn is not None:
            p.tools.defer(item)
            return
    p.dialogue.add_tool_results(None, item.results)


def say(p: LoopParts, item: SayText) -> None:
    start = start_text_turn(p, item.text, said=item.text)
    if start is not None and item.filler:
        p.tools.said(start.turn_id)
