"""Prometheus metrics of the proxy, in a registry per app (so tests can run several apps)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.domain.usage import UsageEvent

if TYPE_CHECKING:
    from serving.proxy.config import ReplicaSpec
    from serving.proxy.sink import UsageSink

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class ProxyMetrics:
    """Counters of requests, tokens and GPU time; gauges of requests in flight and of the
    usage sink. Labels stay low-cardinality (no session, team or tags: those are in the
    usage records)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "specledger_proxy_requests",
            "Requests metered, by outcome.",
            ["deployment", "endpoint", "status"],
            registry=self.registry,
        )
        self._rejected = Counter(
            "specledger_proxy_rejected_requests",
            "Requests refused before reaching a replica.",
            ["code"],
            registry=self.registry,
        )
        self._tokens = Counter(
            "specledger_proxy_tokens",
            "Tokens of metered requests.",
            ["deployment", "kind"],
            registry=self.registry,
        )
        self._gpu_seconds = Counter(
            "specledger_proxy_gpu_seconds",
            "GPU-seconds allocated to requests or left idle.",
            ["deployment", "replica", "kind"],
            registry=self.registry,
        )
        self._in_flight = Gauge(
            "specledger_proxy_in_flight",
            "Requests in flight per replica.",
            ["deployment", "replica"],
            registry=self.registry,
        )
        self._duration = Histogram(
            "specledger_proxy_request_duration_seconds",
            "Arrival to last byte.",
            ["deployment", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._counter_drift = Gauge(
            "specledger_proxy_engine_counter_drift",
            "vLLM's spec-decode counter growth minus the proxy's metered sums, at the last "
            "quiet check (0: the meter agrees with the engine).",
            ["deployment", "replica", "counter"],
            registry=self.registry,
        )
        self._counter_checks = Counter(
            "specledger_proxy_engine_counter_checks",
            "Checks of the metered sums against vLLM's counters, by result.",
            ["deployment", "replica", "result"],
            registry=self.registry,
        )
        self._sink = Gauge(
            "specledger_usage_sink_records", "Usage sink record counts.", ["state"],
            registry=self.registry)  # fmt: skip
        self._backlog_age = Gauge(
            "specledger_usage_sink_oldest_backlog_age_seconds",
            "Age of the oldest record waiting for the database (spooled or in memory).",
            registry=self.registry,
        )

    def in_flight(self, spec: ReplicaSpec, count: int) -> None:
        self._in_flight.labels(spec.deployment, spec.replica_name).set(count)

    def finished(self, event: UsageEvent, *, duration_s: float) -> None:
        self._requests.labels(event.deployment, event.endpoint, str(event.status)).inc()
        self._duration.labels(event.deployment, event.endpoint).observe(duration_s)
        for kind, value in (
            ("prompt", event.prompt_tokens),
            ("cached", event.cached_tokens),
            ("completion", event.completion_tokens),
            ("draft", event.draft_tokens),
            ("accepted", event.accepted_tokens),
        ):
            if value:
                self._tokens.labels(event.deployment, kind).inc(value)

    def gpu_ns(self, spec: ReplicaSpec, kind: str, gpu_ns: int) -> None:
        self._gpu_seconds.labels(spec.deployment, spec.replica_name, kind).inc(gpu_ns / 1e9)

    def counter_check(
        self, spec: ReplicaSpec, result: str, drift: dict[str, int] | None = None
    ) -> None:
        """A check's result (``match``, ``drift``, ``busy``, ``baseline``, ``unreachable``)."""
        self._counter_checks.labels(spec.deployment, spec.replica_name, result).inc()
        for counter, value in (drift or {}).items():
            self._counter_drift.labels(spec.deployment, spec.replica_name, counter).set(value)

    def rejected(self, code: str) -> None:
        self._rejected.labels(code).inc()

    def watch_sink(self, sink: UsageSink) -> None:
        """Report the sink's counts at each scrape."""
        stats = sink.stats
        for state, read in (
            ("submitted", lambda: stats.submitted),
            ("inserted", lambda: stats.inserted),
            ("duplicates", lambda: stats.duplicates),
            ("spilled", lambda: stats.spilled),
            ("spooled", lambda: sink.backlog.depth),
            ("replayed", lambda: stats.replayed),
            ("pending", lambda: stats.submitted - stats.processed),
            ("db_failures", lambda: stats.db_failures),
        ):
            self._sink.labels(state).set_function(read)
        self._backlog_age.set_function(lambda: sink.backlog.oldest_age_s())
