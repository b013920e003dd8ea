"""The semantic end of turn on recorded speech (real models, virtual clock): a thinking
pause mid-sentence is not the end of the turn, a complete question is answered after a
short silence. The fixed 550 ms rule is run beside it on the same audio."""

from __future__ import annotations

from pathlib import Path

import pytest

from assistant.loop import event_log as log
from assistant.loop.setup import LoopModels
from assistant.replay.scenario import Say
from tests.replay.conftest import Run, make_config, run_scenario

pytestmark = pytest.mark.slow

HEAD = "I was wondering how much there might be"
TAIL = "prudently in his power to do for them."


def replay(models: LoopModels, parts: list[Say], tmp: Path, mode: str) -> Run:
    (tmp / mode).mkdir()
    return run_scenario(models, parts, tmp / mode, make_config(**{"vad.end_of_turn": mode}))


def endpoint_delays(run: Run) -> list[int]:
    return [e.t_ms - e.speech_end_ms for e in run.entries
            if isinstance(e, log.SpeechStoppedEntry) and not e.discarded]


def test_a_thinking_pause_mid_sentence_is_one_turn(loop_models: LoopModels,
                                                   tmp_path: Path) -> None:
    parts = [Say(HEAD), Say(TAIL, gap_ms=700)]
    semantic = replay(loop_models, parts, tmp_path, "semantic")
    started = [e for e in semantic.entries if isinstance(e, log.ResponseStartedEntry)]
    assert len(started) == 1, [e.type for e in semantic.entries]
    assert "power" in started[0].user_text.lower()
    assert "wondering" in started[0].user_text.lower()
    scores = [e for e in semantic.entries if isinstance(e, log.EndOfTurnScoreEntry)]
    assert scores and scores[0].p_end is not None and scores[0].silence_ms > 700
    assert semantic.outcome.result.metrics.sequence_matches_history
    # The fixed rule cuts the same audio in two: a reply starts inside the pause.
    fixed = replay(loop_models, parts, tmp_path, "fixed")
    assert len(fixed.of("response_started")) == 2


def test_a_complete_question_is_answered_after_a_short_silence(loop_models: LoopModels,
                                                               tmp_path: Path) -> None:
    parts = [Say("What is the capital of France?")]
    semantic = replay(loop_models, parts, tmp_path, "semantic")
    fixed = replay(loop_models, parts, tmp_path, "fixed")
    (fast,), (slow,) = endpoint_delays(semantic), endpoint_delays(fixed)
    assert fast <= 300 < 550 <= slow, (fast, slow)
    m = semantic.outcome.result.metrics
    assert m.speculation_hit_rate == 1.0 and m.sequence_matches_history
    assert m.voice_to_voice_ms[0] < fixed.outcome.result.metrics.voice_to_voice_ms[0] - 200


def test_the_waterfall_of_a_hit_is_complete_and_ordered(loop_models: LoopModels,
                                                        tmp_path: Path) -> None:
    from assistant.loop.waterfall import STAGES, waterfalls

    run = replay(loop_models, [Say("Which planet do we live on?")], tmp_path, "semantic")
    (w,) = waterfalls(run.entries)
    assert w.speculation == "hit"
    times = [getattr(w, name) for name in STAGES]
    assert None not in times, w
    t = dict(zip(STAGES, times, strict=True))
    # The speculation starts at the silence's onset, before the pause counts (#47).
    assert 0 < t["speculation_started"] <= t["end_of_turn_score"]
    assert t["speculation_started"] <= t["pause_detected"]
    assert t["pause_detected"] <= t["audio_end_score"] <= t["endpoint_decided"]
    assert t["end_of_turn_score"] <= t["endpoint_decided"] <= t["final_transcript"]
    assert t["first_clause_drafted"] <= t["first_clause_synthesised"] <= t["first_audio"]
    assert t["final_transcript"] <= t["reply_started"] <= t["first_audio"]


def test_a_pause_inside_a_sentence_spoken_whole_waits_for_the_rest(
        loop_models: LoopModels, tmp_path: Path) -> None:
    """The pause opened between two words of one utterance (its pitch still mid-sentence):
    the words so far could end a sentence, the voice says they do not."""
    from assistant.replay.run import ReplayOptions, replay_sync
    from assistant.replay.scenario import render_scenario
    from assistant.replay.splice import insert_pause, word_gap_ms
    from audio.wav import write_wav

    head = "My sister and I were thinking about"
    whole = render_scenario([Say(f"{head} visiting the museum this weekend.")],
                            loop_models.synthesizer)
    at = word_gap_ms(loop_models.transcriber, whole, head)
    assert at is not None
    cut = insert_pause(whole, at, 700)
    wav = tmp_path / "cut.wav"
    write_wav(wav, cut.pcm, cut.sample_rate)
    runs = {}
    for name, smart in (("audio", True), ("text", False)):
        cfg = make_config(**{"vad.end_of_turn": "semantic", "vad.smart_turn": smart})
        runs[name] = replay_sync(loop_models, cfg, wav, ReplayOptions()).result.entries
    resume_ms = cut.said()[1].start_ms

    def replies(name: str) -> list[log.ResponseStartedEntry]:
        return [e for e in runs[name] if isinstance(e, log.ResponseStartedEntry)]

    started = replies("audio")
    assert len(started) == 1 and started[0].t_ms > resume_ms
    assert "museum" in started[0].user_text.lower()
    heard = [e for e in runs["audio"] if isinstance(e, log.AudioEndScoreEntry)]
    assert heard and heard[0].p_complete is not None and heard[0].p_complete < 0.5
    assert heard[0].silence_ms >= 1000
    # Without the audio model the pause is judged on its words alone. Whether those end
    # the turn depends on how Whisper punctuates the half sentence, which has varied between
    # build machines (it ended the turn on earlier ones; on an AVX2 EPYC the words came
    # without a period, p_end 0.0003, and the turn rightly waited):
    # here only that the text score, not the voice, scored the pause.
    texts = [e for e in runs["text"] if isinstance(e, log.EndOfTurnScoreEntry)]
    assert any(at <= e.t_ms < resume_ms for e in texts), texts
    assert not [e for e in runs["text"] if isinstance(e, log.AudioEndScoreEntry)]
