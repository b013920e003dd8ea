"""The metrics text says when its latencies come from the virtual clock."""

from __future__ import annotations

from assistant.loop import event_log as log
from assistant.loop.metrics import compute_metrics
from assistant.replay.report import format_metrics


def test_virtual_clock_latencies_are_labelled_as_such() -> None:
    entries: list[log.Entry] = [
        log.SpeechStoppedEntry(1550, 1000),
        log.ResponseStartedEntry(1560, 1, "hi", 5, 0, 30, "hit"),
        log.AudioStartedEntry(1600, 1, 1000, 1550)]
    m = compute_metrics(entries, sequence_tokens=10, history_tokens=10,
                        history_text_matches=True)
    virtual, real = format_metrics(m, virtual=True), format_metrics(m)
    assert "voice-to-voice latency     p50 600 ms" in virtual
    assert "virtual clock" in virtual and "--realtime" in virtual
    assert "virtual clock" not in real
