"""A replica's timeline rebuilt from its request spans, metered like the proxy (pure, no I/O).

Spans reach the collector after their requests finish, in export batches, so a request that
started early may arrive after shorter ones that started later. The timeline keeps the
requests' meter steps in a heap and feeds the replica's
:class:`~app.domain.gpu_seconds.ReplicaMeter` in time order only up to a *watermark*: now
minus ``lateness`` (the longest request plus the export delay). A span older than what the
meter has already passed is still metered (its start is moved to the meter's frontier, as the
proxy's meter does with clock jitter) and counted in ``late_spans``; conservation holds either
way: Σ request GPU-ns + idle GPU-ns = GPUs x the metered wall time, exactly.

Windows tile time like the proxy's: a window opens at the first request (on a whole
microsecond, so the database's bounds are exact), closes once the replica has been idle past
``idle_window`` at the watermark, and the next one starts where it ended.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from app.domain.gpu_seconds import ReplicaMeter
from app.domain.usage import MODEL_MAX, ReplicaIdleEvent, UsageEvent
from serving.collector.spans import Phase, RequestSpan
from serving.proxy.attribution import Attribution

__all__ = ["ReplicaInfo", "ReplicaTimeline", "TimelineStats"]

SOURCE_TAG = "specledger.source"


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """What the usage records say about a replica (the span does not)."""

    deployment: str
    replica: str
    gpus: int = 1
    model: str = "unknown"
    spec_method: str = "none"
    spec_k: int | None = None


@dataclass(slots=True)
class TimelineStats:
    spans: int = 0
    duplicates: int = 0
    late_spans: int = 0
    """Spans that started before the meter's frontier (moved to it)."""
    records: int = 0
    request_gpu_ns: int = 0
    idle_gpu_ns: int = 0
    windows: int = 0
    metered_wall_ns: int = 0
    """Sum of the closed windows' lengths."""


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def at(ns: int) -> datetime:
    """A Unix-nanosecond instant as an aware UTC datetime (whole microseconds, truncated)."""
    return _EPOCH + timedelta(microseconds=ns // 1000)


@dataclass(slots=True)
class _Open:
    span: RequestSpan
    attribution: Attribution
    concurrency: int = 1


@dataclass(slots=True)
class ReplicaTimeline:
    """One replica's requests, from spans, through one meter per window."""

    info: ReplicaInfo
    lateness_ns: int
    idle_window_ns: int
    stats: TimelineStats = field(default_factory=TimelineStats)
    _heap: list[tuple[int, int, int, str, int]] = field(default_factory=list)
    """(at_ns, phase, seq, span key, tokens) of steps not yet fed to the meter."""
    _seq: int = 0
    _seen: set[str] = field(default_factory=set)
    _open: dict[str, _Open] = field(default_factory=dict)
    _pending: dict[str, UsageEvent] = field(default_factory=dict)
    _meter: ReplicaMeter | None = None
    _next_start_ns: int | None = None

    def add(self, span: RequestSpan, attribution: Attribution) -> bool:
        """Queue a request span; False (and nothing queued) for a span seen before."""
        if span.key in self._seen:
            self.stats.duplicates += 1
            return False
        self._seen.add(span.key)
        self.stats.spans += 1
        if self._meter is not None and span.arrived_ns < self._meter.frontier_ns:
            self.stats.late_spans += 1
        self._open[span.key] = _Open(span, attribution)
        for step in span.meter_steps():
            self._seq += 1
            heapq.heappush(self._heap, (step.at_ns, step.phase, self._seq, span.key, step.tokens))
        return True

    @property
    def busy(self) -> bool:
        """Requests queued or in flight on the meter, or records not yet settled."""
        return bool(self._heap or self._open or self._pending)

    def advance(self, *, now_ns: int) -> list[UsageEvent | ReplicaIdleEvent]:
        """Meter every step up to the watermark ``now_ns - lateness``; return the records
        whose GPU time is final (and the idle record of a window that closed)."""
        watermark = now_ns - self.lateness_ns
        records = self._feed(until_ns=watermark)
        meter = self._meter
        if meter is None:
            return records
        if watermark > meter.frontier_ns:
            meter.tick(at_ns=watermark)
            records += self._settled()
        if not self.busy and watermark - meter.start_ns >= self.idle_window_ns:
            records += self._close(at_ns=watermark)
        return records

    def close(self) -> list[UsageEvent | ReplicaIdleEvent]:
        """Meter everything queued and close the window (at shutdown)."""
        records = self._feed(until_ns=None)
        if self._meter is not None:
            records += self._close(at_ns=self._meter.frontier_ns)
        return records

    def _feed(self, *, until_ns: int | None) -> list[UsageEvent | ReplicaIdleEvent]:
        records: list[UsageEvent | ReplicaIdleEvent] = []
        while self._heap and (until_ns is None or self._heap[0][0] <= until_ns):
            at_ns, phase, _, key, tokens = heapq.heappop(self._heap)
            meter = self._meter_for(at_ns)
            if phase == Phase.start:
                meter.start(key, at_ns=at_ns)
                self._open[key].concurrency = meter.in_flight
            elif phase == Phase.chunk:
                meter.chunk(key, at_ns=at_ns, tokens=tokens)
            else:
                self._pending[key] = self._record(self._open.pop(key))
                meter.finish(key, at_ns=at_ns, tokens=tokens)
            records += self._settled()
        return records

    def _meter_for(self, at_ns: int) -> ReplicaMeter:
        if self._meter is None:
            start_ns = self._next_start_ns
            if start_ns is None:
                start_ns = at_ns // 1000 * 1000
            self._meter = ReplicaMeter(gpus=self.info.gpus, start_ns=start_ns)
        return self._meter

    def _settled(self) -> list[UsageEvent | ReplicaIdleEvent]:
        assert self._meter is not None
        return [self._emit(key, gpu_ns) for key, gpu_ns in self._meter.pop_settled().items()]

    def _emit(self, key: str, gpu_ns: int) -> UsageEvent:
        self.stats.records += 1
        self.stats.request_gpu_ns += gpu_ns
        return replace(self._pending.pop(key), gpu_ns=gpu_ns)

    def _close(self, *, at_ns: int) -> list[UsageEvent | ReplicaIdleEvent]:
        meter = self._meter
        assert meter is not None
        end_ns = -(-max(at_ns, meter.frontier_ns) // 1000) * 1000
        report = meter.close(at_ns=end_ns)
        records: list[UsageEvent | ReplicaIdleEvent] = [
            self._emit(key, gpu_ns) for key, gpu_ns in report.request_gpu_ns.items()
        ]
        records.append(
            ReplicaIdleEvent(
                deployment=self.info.deployment,
                replica=self.info.replica,
                start_at=at(report.start_ns),
                end_at=at(report.end_ns),
                gpu_ns=report.idle_gpu_ns,
            )
        )
        self.stats.idle_gpu_ns += report.idle_gpu_ns
        self.stats.windows += 1
        self.stats.metered_wall_ns += report.end_ns - report.start_ns
        self._meter = None
        self._next_start_ns = report.end_ns
        return records

    def _record(self, request: _Open) -> UsageEvent:
        span, who = request.span, request.attribution
        return UsageEvent(
            event_id=span.key,
            session_id=who.session_id,
            team=who.team,
            cost_center=who.cost_center,
            tags={**who.tags, SOURCE_TAG: "otlp"},
            deployment=self.info.deployment,
            replica=self.info.replica,
            model=(span.model or self.info.model)[:MODEL_MAX],
            endpoint="llm_request",
            streamed=False,
            spec_method=self.info.spec_method,
            spec_k=self.info.spec_k,
            arrived_at=at(span.arrived_ns),
            first_token_at=None if span.first_token_ns is None else at(span.first_token_ns),
            finished_at=at(span.finished_ns),
            prompt_tokens=span.prompt_tokens,
            completion_tokens=span.completion_tokens,
            concurrency=request.concurrency,
        )
