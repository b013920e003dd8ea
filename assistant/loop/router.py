"""Where the loop's events go: two tables, from worker outputs and from turn-manager
actions to the function that handles each, over the parts of one pipeline.

:class:`~assistant.loop.parts.LoopParts` is what a handler may touch. Handlers run on the event loop; actions run synchronously in the frame that caused
them (a barge-in stops the sink before anything else happens).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from assistant.dialogue.types import (
    EndOfTurnScore,
    PromptWarmed,
    ReplyDelta,
    SpeculationDrafted,
    TurnClosed,
    TurnStart,
)
from assistant.llm.host import EngineFailed
from assistant.loop import event_log as log
from assistant.loop import output as out
from assistant.loop.asr_worker import (
    AsrAudioScore,
    AsrFinal,
    AsrOnsetPreview,
    AsrPartial,
    AsrPreview,
)
from assistant.loop.engine_client import TurnWithdrawn
from assistant.loop.parts import LoopParts
from assistant.loop.text_turns import say, tools_done
from assistant.loop.tool_worker import SayText, ToolsDone
from assistant.loop.tts_worker import Presynthesized, SpeechChunk, SpeechDone
from assistant.loop.types import PipelineError
from assistant.loop.workers import WorkerFailed
from assistant.turns.actions import (
    BargeIn,
    CancelResponse,
    CancelSpeculation,
    DiscardUtterance,
    FinalizeUtterance,
    PauseReply,
    RequestAudioScore,
    RequestInterim,
    RequestPartial,
    ResumeReply,
    SetEndOfTurnSilence,
    StartResponse,
    StartSpeculation,
    StateChanged,
    TurnAction,
)
from assistant.turns.events import (
    AudioCompleteness,
    AudioStarted,
    EndOfTurn,
    FinalTranscript,
    InterimTranscript,
    OnsetTranscript,
    PartialTranscript,
    PlaybackDone,
    State,
    TurnCompleteness,
    TurnInput,
)
from assistant.turns.interruption import echoes
from audio.word_timing import heard_position

__all__ = ["handle_output", "run_action", "poll_playback"]

_log = logging.getLogger(__name__)


def handle_output(parts: LoopParts, item: Any) -> None:
    """Route one output of a worker or the engine thread."""
    handler = _OUTPUTS.get(type(item))
    if handler is None:
        raise PipelineError(f"unexpected worker output {item!r}")
    handler(parts, item)


def run_action(parts: LoopParts, action: TurnAction, cause: TurnInput) -> None:
    """Carry out one turn-manager action."""
    _ACTIONS[type(action)](parts, action, cause)


def poll_playback(p: LoopParts) -> None:
    """Close the reply whose audio was all heard, and give the floor back."""
    done = p.playback.poll()
    if done is None:
        return
    p.dialogue.finish_turn(done.turn_id, done.total_ms(p.playback.sink))
    p.turn_input(PlaybackDone(p.now_ms(), done.turn_id))


# ---------------------------------------------------------------------- worker outputs


def _worker_failed(p: LoopParts, item: WorkerFailed) -> None:
    p.fail(item.error)


def _engine_failed(p: LoopParts, item: EngineFailed) -> None:
    p.emit(log.EngineFailedEntry(p.now_ms(), str(item.error)))
    p.fail(item.error)


def _echo_of_reply(p: LoopParts, text: str) -> bool:
    """Whether ``text`` is speech over the reply (the turn manager follows it) that is
    the reply's own voice heard back."""
    if not (p.tm.hears_over_reply and p.hears_speaker()):
        return False
    opts = p.tm.options.interruption
    if not echoes(text, p.playback.words_heard_lately(opts.echo_window_ms), opts):
        return False
    _log.debug("words over the reply are its own, heard back: %r (not an interruption)", text)
    return True


def _asr_partial(p: LoopParts, item: AsrPartial) -> None:
    p.emit(log.TranscriptPartialEntry(p.now_ms(), item.text))
    if not p.utterances.is_current(item.utt_id):
        return
    if p.tm.assistant_has_floor:
        # Speech over the reply: its words tell a real interruption from a backchannel.
        p.turn_input(InterimTranscript(p.now_ms(), item.text, item.word_p,
                                       _echo_of_reply(p, item.text)))
    elif p.tm.state is State.USER_SPEAKING and p.tm.options.speculate:
        # The user's words so far go into the cache while they speak: the speculation
        # at their pause then computes only what came after the last partial.
        p.dialogue.warm(item.text)


def _asr_preview(p: LoopParts, item: AsrPreview) -> None:
    if p.utterances.is_current(item.utt_id):
        p.turn_input(PartialTranscript(p.now_ms(), item.text, item.word_p,
                                       _echo_of_reply(p, item.text)))


def _asr_onset_preview(p: LoopParts, item: AsrOnsetPreview) -> None:
    if p.utterances.is_current(item.utt_id):
        p.turn_input(OnsetTranscript(p.now_ms(), item.text, item.word_p))


def _asr_audio_score(p: LoopParts, item: AsrAudioScore) -> None:
    if not p.utterances.is_current(item.utt_id):
        return
    actions = p.turn_input(AudioCompleteness(p.now_ms(), item.pause, item.p_complete))
    silence = next((a.silence_ms for a in actions if isinstance(a, SetEndOfTurnSilence)), 0)
    shown = None if math.isnan(item.p_complete) else float(f"{item.p_complete:.4g}")
    p.emit(log.AudioEndScoreEntry(p.now_ms(), shown, silence))


def _asr_final(p: LoopParts, item: AsrFinal) -> None:
    now = p.now_ms()
    p.utterances.final_arrived(item.utt_id)
    p.emit(log.TranscriptFinalEntry(now, item.text))
    p.turn_input(FinalTranscript(now, item.text, item.word_p, _echo_of_reply(p, item.text)))


def _turn_start(p: LoopParts, start: TurnStart) -> None:
    now = p.now_ms()
    if start.spec_id is not None:
        if start.speculation == "hit":
            p.emit(log.SpeculationHitEntry(now, start.spec_id, start.turn_id,
                                           start.drafted_tokens, start.prompt_tokens))
        else:
            p.emit(log.SpeculationMissEntry(now, start.spec_id, start.turn_id, start.spec_text,
                                            start.user_text, start.common_prefix_tokens))
    p.emit(log.ResponseStartedEntry(
        now, start.turn_id, start.user_text, start.prompt_tokens,
        start.prompt_tokens_computed, start.prompt_tokens_reused, start.speculation))


def _reply_delta(p: LoopParts, item: ReplyDelta) -> None:
    if item.turn_id == p.playback.playing_turn_id:
        p.tts.feed(item.turn_id, item.text, item.done)
        if item.text:
            p.publish(out.ResponseDelta(p.now_ms(), item.turn_id, item.text))


def _drafted(p: LoopParts, item: SpeculationDrafted) -> None:
    p.emit(log.SpeculationDraftedEntry(p.now_ms(), item.spec_id, item.text))
    if p.options.presynthesize and item.spec_id == p.tm.speculation_id:
        p.tts.presynthesize(item.spec_id, item.text)


def _warmed(p: LoopParts, item: PromptWarmed) -> None:
    p.emit(log.PromptWarmedEntry(p.now_ms(), item.text, item.tokens))


def _end_score(p: LoopParts, item: EndOfTurnScore) -> None:
    actions = p.turn_input(TurnCompleteness(p.now_ms(), item.spec_id, item.p_end))
    silence = next((a.silence_ms for a in actions if isinstance(a, SetEndOfTurnSilence)), 0)
    # Logged to 4 significant digits: a reused prefix can move the last float bits.
    shown = None if math.isnan(item.p_end) else float(f"{item.p_end:.4g}")
    p.emit(log.EndOfTurnScoreEntry(p.now_ms(), item.spec_id, shown, silence))


def _presynthesized(p: LoopParts, item: Presynthesized) -> None:
    p.emit(log.PresynthesizedEntry(p.now_ms(), item.spec_id))


def _speech_chunk(p: LoopParts, item: SpeechChunk) -> None:
    now = p.now_ms()
    if p.playback.write(item.turn_id, item.chunk, now):
        playing = p.playback.current
        assert playing is not None
        p.emit(log.AudioStartedEntry(now, playing.turn_id, playing.speech_end_ms,
                                     playing.endpoint_ms))
        p.turn_input(AudioStarted(now, playing.turn_id))


def _speech_done(p: LoopParts, item: SpeechDone) -> None:
    p.playback.tts_done(item.turn_id)
    poll_playback(p)


def _turn_closed(p: LoopParts, closed: TurnClosed) -> None:
    p.open_turns.discard(closed.turn_id)
    now, turn = p.now_ms(), closed.turn
    if turn.interrupted:
        p.emit(log.TruncatedEntry(now, closed.turn_id, closed.generated_text, turn.text,
                                  closed.kept_tokens, closed.generated_tokens, turn.spoken_ms,
                                  closed.sequence_tokens))
    for call in closed.tool_calls:
        p.emit(log.ToolCallEntry(now, closed.turn_id, call.call_id, call.name, call.arguments))
    if closed.tool_error is not None:
        p.emit(log.ToolCallEntry(now, closed.turn_id, f"call_{closed.turn_id}_invalid", "", "",
                                 closed.tool_error))
    p.emit(log.ResponseDoneEntry(now, closed.turn_id, turn.text, closed.generated_tokens,
                                 turn.interrupted, turn.spoken_ms))
    p.tools.turn_closed(closed.turn_id, closed.tool_calls, closed.tool_error, turn.interrupted)


def _turn_withdrawn(p: LoopParts, item: TurnWithdrawn) -> None:
    p.open_turns.discard(item.turn_id)
    p.emit(log.ResponseWithdrawnEntry(p.now_ms(), item.turn_id))


_OUTPUTS: dict[type, Callable[[LoopParts, Any], None]] = {
    WorkerFailed: _worker_failed,
    EngineFailed: _engine_failed,
    AsrPartial: _asr_partial,
    AsrPreview: _asr_preview,
    AsrOnsetPreview: _asr_onset_preview,
    AsrAudioScore: _asr_audio_score,
    AsrFinal: _asr_final,
    TurnStart: _turn_start,
    ReplyDelta: _reply_delta,
    ToolsDone: tools_done,
    SayText: say,
    SpeculationDrafted: _drafted,
    EndOfTurnScore: _end_score,
    PromptWarmed: _warmed,
    Presynthesized: _presynthesized,
    SpeechChunk: _speech_chunk,
    SpeechDone: _speech_done,
    TurnClosed: _turn_closed,
    TurnWithdrawn: _turn_withdrawn,
}


# ---------------------------------------------------------------------- turn actions


def _state(p: LoopParts, action: StateChanged, cause: TurnInput) -> None:
    p.emit(log.StateEntry(action.t_ms, action.new.value))


def _request_partial(p: LoopParts, action: RequestPartial, cause: TurnInput) -> None:
    # Speech over the reply: its words decide the cut, and a guess must not.
    p.utterances.request_preview(with_p=p.tm.hears_over_reply)


def _request_interim(p: LoopParts, action: RequestInterim, cause: TurnInput) -> None:
    p.utterances.request_interim()


def _request_audio_score(p: LoopParts, action: RequestAudioScore, cause: TurnInput) -> None:
    p.utterances.request_audio_score(action.pause)


def _set_pause_limit(p: LoopParts, action: SetEndOfTurnSilence, cause: TurnInput) -> None:
    p.set_pause_limit(action.silence_ms)


def _finalize(p: LoopParts, action: FinalizeUtterance, cause: TurnInput) -> None:
    assert isinstance(cause, EndOfTurn)
    p.emit(log.SpeechStoppedEntry(cause.t_ms, cause.speech_end_ms))
    p.utterances.finalize(p.asr_tail_ms(), with_p=p.tm.paused_turn_id is not None)


def _discard(p: LoopParts, action: DiscardUtterance, cause: TurnInput) -> None:
    if isinstance(cause, EndOfTurn):
        p.emit(log.SpeechStoppedEntry(cause.t_ms, cause.speech_end_ms, discarded=True))
    p.utterances.discard()


def _start_speculation(p: LoopParts, action: StartSpeculation, cause: TurnInput) -> None:
    p.spec_texts[action.spec_id] = action.user_text
    p.emit(log.SpeculationStartedEntry(p.now_ms(), action.spec_id, action.user_text))
    p.dialogue.speculate(action.spec_id, action.user_text)


def _cancel_speculation(p: LoopParts, action: CancelSpeculation, cause: TurnInput) -> None:
    now = p.now_ms()
    old = p.spec_texts.pop(action.spec_id, "")
    if action.missed and isinstance(cause, PartialTranscript | OnsetTranscript):
        # The transcript grew past what was speculated at a pause: a miss. (Replaced
        # before its silence counted as a pause: the user went on, a cancel.)
        p.emit(log.SpeculationMissEntry(now, action.spec_id, None, old, cause.text, 0,
                                        reason="superseded"))
    else:
        p.emit(log.SpeculationCancelledEntry(now, action.spec_id))
    p.dialogue.cancel_speculation(action.spec_id)


def _start_response(p: LoopParts, action: StartResponse, cause: TurnInput) -> None:
    p.open_turns.add(action.turn_id)
    now = p.now_ms()
    endpoint = p.last_end.t_ms if p.last_end is not None else now
    p.playback.start(action.turn_id, speech_end_ms=action.speech_end_ms, endpoint_ms=endpoint)
    p.tts.begin(action.turn_id, action.spec_id)
    said = p.said.pop(action.turn_id, "")
    if action.turn_id not in p.tool_results and not said:
        p.tools.user_turn()
    p.dialogue.start_turn(action.turn_id, action.user_text, action.spec_id,
                          max_new_tokens=p.response_tokens.pop(action.turn_id, None),
                          tool_results=p.tool_results.pop(action.turn_id, ()), say=said)


def _pause_reply(p: LoopParts, action: PauseReply, cause: TurnInput) -> None:
    report = p.playback.pause(action.turn_id, detected_ms=action.t_ms, now_ms=p.now_ms())
    if report is not None:
        p.emit(log.InterruptionPausedEntry(action.t_ms, action.turn_id,
                                           report.played_at_detection_ms, report.leaked_ms))


def _resume_reply(p: LoopParts, action: ResumeReply, cause: TurnInput) -> None:
    paused = p.playback.current
    at = p.playback.resume(action.turn_id)
    if at is None or paused is None:
        return
    stopped_at = paused.paused_at_ms
    p.emit(log.InterruptionResumedEntry(p.now_ms(), action.turn_id, p.now_ms() - stopped_at,
                                        at * 1000 // paused.tts_rate, action.text))
    poll_playback(p)  # a pause right at its end: nothing left to play


def _barge_in(p: LoopParts, action: BargeIn, cause: TurnInput) -> None:
    now = p.now_ms()
    stopped = p.playback.stop(action.turn_id, detected_ms=action.t_ms, now_ms=now)
    if stopped is None:
        return
    report = stopped.report
    if action.paused:
        p.emit(log.InterruptionCommittedEntry(now, action.turn_id, now - action.t_ms))
    p.tts.cancel(action.turn_id)
    p.emit(log.BargeInEntry(action.t_ms, action.turn_id, report.played_at_detection_ms,
                            reason=action.reason))
    p.emit(log.PlaybackStoppedEntry(report.stopped_at_ms, action.turn_id, report.heard_ms,
                                    report.leaked_ms))
    heard = heard_position(stopped.playback.chunks, report.heard_samples)
    p.dialogue.cut_turn(action.turn_id, heard.char_offset, report.heard_ms)


def _cancel_response(p: LoopParts, action: CancelResponse, cause: TurnInput) -> None:
    stopped = p.playback.stop(action.turn_id, detected_ms=action.t_ms, now_ms=p.now_ms())
    p.tts.cancel(action.turn_id)
    if stopped is not None and stopped.playback.start_pos is not None:
        # The user went on as the reply began: what they heard of it is withdrawn too.
        report = stopped.report
        _log.debug("the user went on as reply %d began (%d ms heard): withdrawn, their "
                   "turn reopened", action.turn_id, report.heard_ms)
        p.emit(log.PlaybackStoppedEntry(report.stopped_at_ms, action.turn_id,
                                        report.heard_ms, report.leaked_ms))
    p.dialogue.withdraw_turn(action.turn_id)


_ACTIONS: dict[type, Callable[[LoopParts, Any, Any], None]] = {
    StateChanged: _state,
    RequestPartial: _request_partial,
    RequestInterim: _request_interim,
    RequestAudioScore: _request_audio_score,
    SetEndOfTurnSilence: _set_pause_limit,
    FinalizeUtterance: _finalize,
    DiscardUtterance: _discard,
    StartSpeculation: _start_speculation,
    CancelSpeculation: _cancel_speculation,
    StartResponse: _start_response,
    BargeIn: _barge_in,
    PauseReply: _pause_reply,
    ResumeReply: _resume_reply,
    CancelResponse: _cancel_response,
}
