"""Replicas of one model, and which one serves a conversation.

Each conversation has a routing key (its root sequence's); rendezvous hashing (highest
random weight) picks, among the healthy replicas, the same replica for the same key
every time, so its prefix stays in that replica's cache. When a replica fails it is
marked down and its conversations move to their next choice (one full prefill there);
the others stay where they are. A replica that is down is tried again after
``retry_after_s`` (a request to it is the probe).

Time comes from an injected clock (seconds, monotonic), so the rules are testable.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from assistant.llm.vllm.client import Endpoint
from assistant.llm.vllm.prefix_estimate import PrefixEstimate

__all__ = ["Replica", "ReplicaHealth", "Router", "NoReplica"]


class NoReplica(ConnectionError):
    """Every replica is down."""


@dataclass(frozen=True)
class ReplicaHealth:
    """One replica's state, for ``/metrics`` and logs."""

    url: str
    up: bool
    requests: int
    """Requests sent to it."""
    failures: int
    """Requests that found it unreachable."""
    failovers: int
    """Requests moved from it to another replica."""
    last_error: str


@dataclass
class Replica:
    endpoint: Endpoint
    prefix: PrefixEstimate
    up: bool = True
    down_since: float = 0.0
    requests: int = 0
    failures: int = 0
    failovers: int = 0
    last_error: str = ""
    weight_salt: bytes = field(default=b"")

    @property
    def url(self) -> str:
        return self.endpoint.url

    def health(self) -> ReplicaHealth:
        return ReplicaHealth(self.url, self.up, self.requests, self.failures, self.failovers,
                             self.last_error)


class Router:
    """Thread-safe (requests are opened on the engine thread, failures noticed on stream
    reader threads)."""

    def __init__(self, endpoints: Sequence[Endpoint], *, block_size: int,
                 retry_after_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not endpoints:
            raise ValueError("at least one vLLM replica URL is needed")
        urls = [e.url for e in endpoints]
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate replica URLs: {urls}")
        self.replicas = [Replica(e, PrefixEstimate(block_size), weight_salt=e.url.encode())
                         for e in endpoints]
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._lock = threading.Lock()

    def ranked(self, key: int) -> list[Replica]:
        """Every replica in the order ``key`` prefers them (fixed for a key)."""
        def weight(r: Replica) -> bytes:
            return hashlib.blake2b(r.weight_salt + key.to_bytes(16, "little", signed=True),
                                   digest_size=8).digest()
        return sorted(self.replicas, key=weight, reverse=True)

    def pick(self, key: int, *, avoid: Replica | None = None) -> Replica:
        """The replica for ``key``: its first choice that is up (or due for a retry).
        Raises `NoReplica` when none is."""
        now = self._clock()
        with self._lock:
            for replica in self.ranked(key):
                if replica is avoid:
                    continue
                if replica.up or now - replica.down_since >= self._retry_after_s:
                    replica.requests += 1
                    return replica
        raise NoReplica("no vLLM replica is reachable: " + "; ".join(
            f"{r.url}: {r.last_error or 'down'}" for r in self.replicas))

    def failed(self, replica: Replica, error: BaseException) -> None:
        """``replica`` was unreachable: mark it down (its cache is presumed lost)."""
        with self._lock:
            replica.failures += 1
            replica.last_error = str(error)[:200]
            if replica.up:
                replica.up = False
                replica.prefix.clear()
            replica.down_since = self._clock()

    def moved(self, replica: Replica) -> None:
        with self._lock:
            replica.failovers += 1

    def succeeded(self, replica: Replica) -> None:
        with self._lock:
            replica.up = True

    def health(self) -> tuple[ReplicaHealth, ...]:
        with self._lock:
            return tuple(r.health() for r in self.replicas)
