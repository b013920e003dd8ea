"""The per-turn waterfall read from an event log (pure)."""

from __future__ import annotations

from assistant.loop import event_log as log
from assistant.loop.waterfall import STAGES, waterfalls


def test_the_audio_score_counts_for_the_last_pause_only() -> None:
    entries: list[log.Entry] = [
        log.PauseEntry(1200, 1000),
        log.AudioEndScoreEntry(1250, 0.02, 1000),  # a pause the user went on from
        log.PauseEntry(3200, 3000),
        log.AudioEndScoreEntry(3260, 0.97, 550),
        log.SpeechStoppedEntry(3550, 3000),
        log.AudioEndScoreEntry(3560, 0.9, 0),  # after the end of turn: not this pause's
        log.TranscriptFinalEntry(3560, "my sister and I were thinking about a trip"),
        log.ResponseStartedEntry(3580, 1, "my sister and I were thinking about a trip",
                                 30, 30, 0, "none"),
        log.AudioStartedEntry(3700, 1, 3000, 3550),
    ]
    (w,) = waterfalls(entries)
    assert (w.pause_detected, w.audio_end_score, w.endpoint_decided, w.first_audio) == (
        200, 260, 550, 700)
    assert w.end_of_turn_score is None and w.speculation == "none"
    assert STAGES.index("audio_end_score") < STAGES.index("endpoint_decided")


def test_no_audio_model_leaves_its_stage_empty() -> None:
    entries: list[log.Entry] = [
        log.PauseEntry(1200, 1000),
        log.SpeechStoppedEntry(1550, 1000),
        log.ResponseStartedEntry(1580, 1, "hi", 5, 5, 0, "none"),
        log.AudioStartedEntry(1700, 1, 1000, 1550),
    ]
    (w,) = waterfalls(entries)
    assert w.audio_end_score is None and w.reply_started == 580
