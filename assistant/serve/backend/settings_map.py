"""Realtime session settings mapped onto the loop's own options.

The protocol's ``session`` (instructions, tools, token limit, temperature, server-VAD
knobs, ``interrupt_response``) becomes the dialogue's, the turn manager's and the VAD's
options on top of the daemon's configured defaults. Pure functions.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from assistant.serve.backend import contract as B
from assistant.turns.interruption import InterruptionOptions

if TYPE_CHECKING:
    from assistant.dialogue.types import DialogueOptions
    from assistant.loop.conversation import ConversationSettings
    from assistant.turns.end_of_turn import EndOfTurnOptions
    from assistant.turns.options import TurnOptions

__all__ = ["conversation_settings", "vad_options", "dialogue_options", "tool_definition",
           "turn_options", "end_of_turn"]


def conversation_settings(base: ConversationSettings,
                          settings: B.SessionSettings) -> ConversationSettings:
    """A session's conversation: the daemon's configured settings with the session's
    overrides (generation, turn-taking, VAD; a speculation's first clause is synthesised
    ahead only when the session speaks)."""
    td = settings.turn_detection or B.TurnDetectionSettings()
    turns = turn_options(base.turns, settings)
    return dataclasses.replace(
        base, dialogue=dialogue_options(base.dialogue, settings), turns=turns,
        vad=vad_options(base.vad, td, base.turns),
        pipeline=dataclasses.replace(base.pipeline,
                                     presynthesize="audio" in settings.output_modalities))


def end_of_turn(base: TurnOptions, td: B.TurnDetectionSettings) -> EndOfTurnOptions:
    """``server_vad``: the fixed silence; ``semantic_vad``: our model's end-of-turn score
    between the eagerness limits (the silence when there is nothing to score)."""
    from assistant.turns.end_of_turn import EAGERNESS

    configured = base.end_of_turn
    if td.type != "semantic_vad" or not base.speculate:
        return dataclasses.replace(configured, mode="fixed", fallback_ms=td.silence_duration_ms)
    low, high = EAGERNESS.get(td.eagerness, EAGERNESS["auto"])
    # The audio model's waits scale with the eagerness (1000 of 1600 ms at medium).
    scale = high / EAGERNESS["auto"][1]
    return dataclasses.replace(configured, mode="semantic", fallback_ms=td.silence_duration_ms,
                               min_silence_ms=low, max_silence_ms=high,
                               audio_wait_ms=round(configured.audio_wait_ms * scale),
                               audio_wait_short_ms=round(configured.audio_wait_short_ms * scale),
                               audio_sure_ms=round(configured.audio_sure_ms * scale))


def vad_options(base: Any, td: B.TurnDetectionSettings, turns: TurnOptions) -> Any:
    """Realtime server-VAD knobs on top of the configured VAD (whose own end-of-turn
    limit is the longest silence the session's rule may wait)."""
    short = min(base.short_pause_ms, max(20, td.silence_duration_ms - 20))
    return dataclasses.replace(
        base,
        aggressiveness=min(3, max(0, round(td.threshold * 4))),
        silero_threshold=min(0.99, max(0.01, td.threshold)),
        prefix_padding_ms=td.prefix_padding_ms,
        end_of_turn_ms=max(end_of_turn(turns, td).longest_ms, short),
        short_pause_ms=short,
    )


def dialogue_options(base: DialogueOptions, settings: B.SessionSettings) -> DialogueOptions:
    """The configured generation options with the session's overrides; the client's
    tools join the configured ones (none unless the daemon runs local tools) as chat
    template definitions."""
    td = settings.turn_detection
    return dataclasses.replace(
        base, system_prompt=settings.instructions,
        max_new_tokens=settings.max_output_tokens or base.max_new_tokens,
        temperature=base.temperature if settings.temperature is None else settings.temperature,
        score_end_of_turn=td is not None and td.type == "semantic_vad",
        tools=base.tools + tuple(tool_definition(t) for t in settings.tools),
        tool_choice=settings.tool_choice)


def tool_definition(tool: B.FunctionTool) -> dict[str, Any]:
    """A client's tool as the chat template's function definition (``{"type":
    "function", "function": {"name", "description", "parameters"}}``)."""
    from assistant.tools.spec import ToolSpec

    return ToolSpec(name=tool.name, description=tool.description,
                    parameters=tool.parameters).template_dict()


def turn_options(base: TurnOptions, settings: B.SessionSettings) -> TurnOptions:
    """The session's end-of-turn rule; ``interrupt_response: false`` means speech never
    interrupts a reply.

    Interruptions follow the configured ``turns.interruption`` (tentative by default), as
    in ``talk``. A Realtime client plays the audio deltas it holds and stops (then
    truncates) on ``input_audio_buffer.speech_started``, so the daemon makes a pause
    possible on its side: it sends a reply's audio only a little ahead of the client's
    playback (:class:`~assistant.serve.backend.network_sink.NetworkSink`'s lead), sends
    no more of it while an interruption is undecided, and tells the client about the
    speech only once it is the user's turn
    (:class:`~assistant.loop.speech_gate.SpeechGate`): a backchannel resumes the
    same response, real words end it as ``cancelled`` / ``turn_detected``."""
    td = settings.turn_detection or B.TurnDetectionSettings()
    options = dataclasses.replace(base, end_of_turn=end_of_turn(base, td))
    if td.interrupt_response:
        return options
    return dataclasses.replace(options, barge_in_min_ms=10**9,
                               interruption=InterruptionOptions(mode="immediate"))
