"""Plain-text rendering of a conversation and its metrics (replay, demo, bench)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from assistant.loop.metrics import Metrics, percentile

__all__ = ["format_conversation", "format_metrics", "format_table"]


def format_conversation(turns: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for t in turns:
        if t["role"] == "system":
            continue
        who = "you" if t["role"] == "user" else "assistant"
        tail = ""
        if t["role"] == "assistant":
            tail = f"   [{t['spoken_ms'] / 1000:.1f} s spoken"
            tail += ", interrupted]" if t["interrupted"] else "]"
        lines.append(f"{who:>9}: {str(t['text']).strip()}{tail}")
    return "\n".join(lines)


def _ms(values: Sequence[int]) -> str:
    if not values:
        return "-"
    return f"p50 {percentile(values, 50):.0f} ms, p95 {percentile(values, 95):.0f} ms (n={len(values)})"


def format_metrics(m: Metrics, *, virtual: bool = False) -> str:
    """``virtual``: the replay ran on the virtual clock, where compute takes no time, so
    the latencies are the turn-taking rules' own, not this machine's (said beside them)."""
    rate = "-" if m.speculation_hit_rate is None else f"{100 * m.speculation_hit_rate:.0f}%"
    lines = [
        f"voice-to-voice latency     {_ms(m.voice_to_voice_ms)}",
        f"endpoint-to-first-audio    {_ms(m.endpoint_to_audio_ms)}",
        f"barge-in stop latency      {_ms(m.barge_in_stop_ms)}",
        f"audio leaked after barge-in {_ms(m.leaked_audio_ms)}",
        f"speculation                {m.speculation_hits} hits, {m.speculation_misses} misses"
        f" (hit rate {rate})",
        f"engine sequence vs history {m.sequence_tokens} vs {m.history_tokens} tokens"
        f" ({'match' if m.sequence_matches_history else 'MISMATCH'})",
        "prompt tokens per turn     "
        + (", ".join(f"#{t.turn_id}: {t.prompt_tokens_computed} computed / "
                     f"{t.prompt_tokens_reused} reused ({t.speculation})" for t in m.turns)
           or "-"),
    ]
    if virtual:
        lines[2:2] = ["  (virtual clock: model compute takes no time here, so these are the "
                      "turn-taking rules' latencies, not this machine's; --realtime measures "
                      "them on this CPU)"]
    return "\n".join(lines)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for k, row in enumerate(cells):
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
