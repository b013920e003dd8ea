"""Acceptance: the full stack with the real models on scenarios built here.

Virtual clock throughout: a reply starts ``end_of_turn_ms`` (+ one frame) after the
user's speech ends, so a part placed after an utterance lands at a known point of the
reply. Each test builds its own input with the Piper voice and replays it once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from assistant.loop import event_log as log
from assistant.loop.log_codec import entry_to_json
from assistant.loop.setup import LoopModels
from assistant.replay.scenario import Noise, Say
from tests.replay.conftest import Run, make_config, run_scenario, transcribe, wer, words

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France?"
STORY = "Tell me a story about a brave little dragon."


def reply_start_gap(cfg_end_of_turn_ms: int, into_reply_ms: int) -> int:
    """Gap after an utterance that lands ``into_reply_ms`` into the reply's audio."""
    return cfg_end_of_turn_ms + 20 + into_reply_ms


@pytest.fixture(scope="module")
def question_run(loop_models: LoopModels, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(loop_models, [Say(QUESTION)], tmp_path_factory.mktemp("question"))


def test_one_question_one_answer(loop_models: LoopModels, question_run: Run) -> None:
    run = question_run
    finals = [e for e in run.of("transcript_final") if isinstance(e, log.TranscriptFinalEntry)]
    assert finals and "france" in finals[0].text.lower()
    assert run.of("response_started") and run.of("audio_started")
    done = [e for e in run.of("response_done") if isinstance(e, log.ResponseDoneEntry)]
    assert len(done) == 1 and not done[0].interrupted and done[0].text
    assert [t["role"] for t in run.turns] == ["system", "user", "assistant"]
    # heard.wav holds the reply, on the input's timeline.
    started = run.of("audio_started")[0].t_ms
    heard = transcribe(loop_models, run.heard(started, started + done[0].spoken_ms + 300))
    # A short reply: one ASR slip ("France is" -> "Francis") is already 33% WER.
    assert wer(done[0].text, heard) <= 0.4, (done[0].text, heard)
    assert transcribe(loop_models, run.heard(0, started)) == ""  # silent before the reply
    m = run.outcome.result.metrics
    assert m.sequence_matches_history and m.history_text_matches
    # A clean end of turn after a speculation on the complete text: a hit, and the
    # user's prompt was not computed again.
    assert [e.type for e in run.entries].count("speculation_hit") == 1
    started_entry = run.of("response_started")[0]
    assert isinstance(started_entry, log.ResponseStartedEntry)
    assert started_entry.speculation == "hit" and started_entry.prompt_tokens_computed == 0
    assert m.speculation_hit_rate == 1.0
    # The reply follows the end of turn: after the silence the end-of-turn rule waited
    # (semantic: short, the model is sure this question is complete).
    (stopped,) = [e for e in run.of("speech_stopped") if isinstance(e, log.SpeechStoppedEntry)]
    waited = stopped.t_ms - stopped.speech_end_ms
    assert run.cfg.vad.semantic_min_ms <= waited < run.cfg.vad.end_of_turn_ms
    assert m.voice_to_voice_ms and m.voice_to_voice_ms[0] >= waited


def test_replay_is_deterministic(loop_models: LoopModels, question_run: Run,
                                 tmp_path: Path) -> None:
    again = run_scenario(loop_models, [Say(QUESTION)], tmp_path)
    assert (again.scenario.pcm == question_run.scenario.pcm).all()
    first = [entry_to_json(e) for e in question_run.entries]
    assert [entry_to_json(e) for e in again.entries] == first
    assert (again.outcome.heard == question_run.outcome.heard).all()


def test_barge_in_mid_answer(loop_models: LoopModels, tmp_path: Path) -> None:
    # Speculation off here: the next turn's prompt is then computed by the live turn,
    # which shows it computes only the new user tokens.
    cfg = make_config(**{"turns.speculate": False})
    gap = reply_start_gap(cfg.vad.end_of_turn_ms, 2500)
    run = run_scenario(loop_models, [Say(STORY), Say("Stop, please.", gap_ms=gap)], tmp_path,
                       cfg=cfg)
    barge = [e for e in run.of("barge_in") if isinstance(e, log.BargeInEntry)]
    stopped = [e for e in run.of("playback_stopped") if isinstance(e, log.PlaybackStoppedEntry)]
    cut = [e for e in run.of("truncated") if isinstance(e, log.TruncatedEntry)]
    assert len(barge) == len(stopped) == len(cut) == 1
    assert barge[0].turn_id == cut[0].turn_id == 1
    # Detected within the user's words, not before them.
    user2 = run.scenario.said()[1]
    assert user2.start_ms < barge[0].t_ms < user2.end_ms
    assert stopped[0].t_ms - barge[0].t_ms <= run.cfg.audio.output_buffer_ms
    # The history keeps a word-prefix of the generated reply, marked interrupted.
    turn = run.turns[2]
    assert turn["role"] == "assistant" and turn["interrupted"] is True
    kept, generated = cut[0].kept_text, cut[0].generated_text
    assert kept and turn["text"] == kept
    assert generated.startswith(kept) and len(kept) < len(generated.rstrip())
    rest = generated[len(kept):]
    assert not rest[:1].isalnum(), "cut inside a word"
    assert 0 < cut[0].kept_tokens < cut[0].generated_tokens
    # ... which matches what the speaker played (heard.wav), by ASR.
    started = [e for e in run.of("audio_started") if e.turn_id == 1][0].t_ms  # type: ignore[attr-defined]
    heard = transcribe(loop_models, run.heard(started, stopped[0].t_ms))
    assert wer(kept, heard) <= 0.15, (kept, heard)
    assert cut[0].spoken_ms == stopped[0].played_ms
    assert abs(cut[0].spoken_ms - (stopped[0].t_ms - started)) <= 40
    # The engine's sequence equals the rendered history, at the cut and at the end.
    m = run.outcome.result.metrics
    assert m.sequence_matches_history and m.history_text_matches
    # The next turn computes only its new user tokens.
    nxt = [e for e in run.of("response_started") if isinstance(e, log.ResponseStartedEntry)
           and e.turn_id == 2]
    assert nxt and nxt[0].speculation == "none"
    assert nxt[0].prompt_tokens_computed == nxt[0].prompt_tokens
    assert nxt[0].prompt_tokens_reused == cut[0].sequence_tokens


def test_mid_sentence_pause_speculates_and_misses(loop_models: LoopModels,
                                                  tmp_path: Path) -> None:
    run = run_scenario(loop_models, [Say("What is the capital"), Say("of France?", gap_ms=350)],
                       tmp_path)
    started = [e for e in run.of("speculation_started")
               if isinstance(e, log.SpeculationStartedEntry)]
    first = run.scenario.said()[0]
    second = run.scenario.said()[1]
    mid = [e for e in started if first.end_ms < e.t_ms < second.start_ms + 100]
    assert mid, "no speculation at the mid-sentence pause"
    assert "france" not in mid[0].text.lower()
    misses = [e for e in run.of("speculation_miss") if isinstance(e, log.SpeculationMissEntry)]
    assert any(e.spec_id == mid[0].spec_id for e in misses)
    resp = [e for e in run.of("response_started") if isinstance(e, log.ResponseStartedEntry)]
    assert len(resp) == 1 and "france" in resp[0].user_text.lower()
    done = run.of("response_done")[0]
    assert isinstance(done, log.ResponseDoneEntry)
    assert "paris" in done.text.lower(), done.text  # it answered the whole question
    assert run.outcome.result.metrics.speculation_misses >= 1


def test_cough_and_click_during_reply_do_not_interrupt(loop_models: LoopModels,
                                                       tmp_path: Path) -> None:
    cfg = make_config()
    gap = reply_start_gap(cfg.vad.end_of_turn_ms, 1200)
    run = run_scenario(loop_models, [
        Say(STORY), Noise("cough", gap_ms=gap, duration_ms=250),
        Noise("click", gap_ms=600), Noise("cough", gap_ms=700, duration_ms=200)], tmp_path,
        cfg=cfg)
    noises = [p for p in run.scenario.placed if p.kind != "say"]
    audio = run.of("audio_started")[0].t_ms
    done = [e for e in run.of("response_done") if isinstance(e, log.ResponseDoneEntry)]
    assert done and audio < noises[0].start_ms
    assert done[0].spoken_ms > noises[-1].end_ms - audio, "the reply must outlast the noises"
    assert run.of("barge_in") == [] and not done[0].interrupted
    assert [t["role"] for t in run.turns] == ["system", "user", "assistant"]


@pytest.mark.parametrize("echo_mode", ["gate", "off"])
def test_own_voice_echo_interrupts_only_without_echo_handling(
        loop_models: LoopModels, tmp_path: Path, echo_mode: str) -> None:
    # Immediate interruptions: any speech heard over the reply cuts it, so the gate must
    # keep the echo from being heard as speech at all (a tentative pause could resume
    # after echo that ASR only guesses at, and the control would depend on the words).
    cfg = make_config(**{"echo.mode": echo_mode, "turns.interruption": "immediate"})
    run = run_scenario(loop_models, [Say(STORY)], tmp_path, cfg=cfg, echo_loopback_db=-6.0)
    done = [e for e in run.of("response_done") if isinstance(e, log.ResponseDoneEntry)]
    assert done and words(done[0].text)
    if echo_mode == "off":
        # The control: the same echo, unhandled, makes the assistant interrupt itself:
        # heard as the reply begins, it withdraws the reply as if the user went on.
        assert run.of("barge_in") or run.of("response_withdrawn")
        assert not any(d.turn_id == 1 and not d.interrupted for d in done)
        return
    assert not done[0].interrupted and done[0].spoken_ms > 2000
    assert run.of("barge_in") == []
    assert len(run.of("speech_started")) == 1  # only the user's own question
