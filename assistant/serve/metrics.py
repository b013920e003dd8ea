"""Prometheus metrics of one server, on a registry of its own (never the global one).

Counters and histograms are updated by the sessions as things happen; engine-wide
numbers (pages used / free / cached / shared, tokens computed / reused) are read from
the engine at scrape time through a collector, so they can never drift from the truth.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

__all__ = ["ServerMetrics", "CONTENT_TYPE_LATEST", "EngineGauges"]

EngineGauges = Callable[[], Mapping[str, "int | Mapping[str, int]"]]
"""Returns the engine's counters, e.g. ``{"pages_used": 12, "tokens_computed": 900}``.

Keys starting with ``tokens_`` are exported as counters (cumulative), the rest as gauges;
a mapping value is one gauge per session, e.g. ``{"session_sequences": {"sess_1": 2}}``,
or per vLLM replica for keys starting with ``replica_`` (label ``replica``), e.g.
``{"replica_up": {"http://10.0.0.5:8000": 1}}``.
"""

_LATENCY_BUCKETS = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)


class _EngineCollector(Collector):
    def __init__(self, read: EngineGauges) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        try:
            values = dict(self._read())
        except Exception:  # a scrape must not fail because the engine is busy or gone
            return
        for name, value in sorted(values.items()):
            metric_name = f"assistant_engine_{name}"
            if not isinstance(value, int):
                label = "replica" if name.startswith("replica_") else "session"
                family = GaugeMetricFamily(metric_name, f"engine {name.replace('_', ' ')}",
                                           labels=[label])
                for session, count in sorted(value.items()):
                    family.add_metric([session], count)
                yield family
            elif name.startswith("tokens_"):
                yield CounterMetricFamily(metric_name, f"engine {name.replace('_', ' ')}", value)
            else:
                yield GaugeMetricFamily(metric_name, f"engine {name.replace('_', ' ')}", value)


class ServerMetrics:
    """All metrics of one `RealtimeServer`."""

    def __init__(self, engine: EngineGauges | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.sessions_active = Gauge(
            "assistant_sessions_active", "sessions open now", registry=r
        )
        self.sessions = Counter("assistant_sessions", "sessions opened", registry=r)
        self.sessions_rejected = Counter(
            "assistant_sessions_rejected",
            "connections refused before a session started",
            ["reason"],
            registry=r,
        )
        self.session_closes = Counter(
            "assistant_session_closes", "sessions closed, by cause", ["cause"], registry=r
        )
        self.messages = Counter(
            "assistant_client_messages", "client events accepted, by type", ["type"], registry=r
        )
        self.errors = Counter(
            "assistant_errors", "error events sent to clients, by code", ["code"], registry=r
        )
        self.responses = Counter(
            "assistant_responses", "responses finished, by status", ["status"], registry=r
        )
        self.truncations = Counter(
            "assistant_truncations", "assistant items truncated by clients", registry=r
        )
        self.speech_started = Counter(
            "assistant_speech_started", "server VAD speech onsets", registry=r
        )
        self.audio_in_seconds = Counter(
            "assistant_audio_in_seconds", "client audio received", registry=r
        )
        self.audio_out_seconds = Counter(
            "assistant_audio_out_seconds", "assistant audio sent", registry=r
        )
        self.voice_to_voice = Histogram(
            "assistant_voice_to_voice_seconds",
            "end of the user's turn (speech_stopped) to the first audio delta sent",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.first_audio = Histogram(
            "assistant_response_first_audio_seconds",
            "response start to its first audio delta",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.outbox_stalls = Counter(
            "assistant_outbox_stalls", "sessions closed because the client stopped reading",
            registry=r,
        )
        if engine is not None:
            r.register(_EngineCollector(engine))

    def render(self) -> bytes:
        """The text exposition format for ``/metrics``."""
        return generate_latest(self.registry)
