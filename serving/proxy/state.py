"""The proxy's bookkeeping: replicas, their GPU-time meters, requests in flight, settlement.

Everything here runs on the event loop; the meters are pure
(:class:`~app.domain.gpu_seconds.ReplicaMeter`), and finished records leave through the
thread-safe :class:`~serving.proxy.sink.UsageSink`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

import httpx

from app.budgets.rules.admission import Reservation
from app.domain.gpu_seconds import ReplicaMeter
from app.domain.usage import MODEL_MAX, ReplicaIdleEvent, UsageEvent, UsageStatus
from serving.engines.triton_metrics import TritonMetrics
from serving.proxy.attribution import Attribution
from serving.proxy.budget_guard import BudgetGuard
from serving.proxy.config import ProxyConfig, ReplicaSpec
from serving.proxy.iteration_meter import IterationSpecMeter
from serving.proxy.keyring import KeyRing
from serving.proxy.metrics import ProxyMetrics
from serving.proxy.rate_card import RateCard
from serving.proxy.sink import UsageSink
from serving.proxy.upstream import Upstream
from serving.proxy.vllm_metrics import EngineCounterCheck
from serving.proxy.wire import Endpoint, SpecDecodeStats, TokenUsage

__all__ = ["Clock", "InFlight", "MeterLink", "ProxyState", "ReplicaState"]

DOWN_FOR_NS = 2_000_000_000
"""After a connection failure a replica gets no new request for this long (if another is up)."""


@dataclass(slots=True)
class Clock:
    """One monotonic clock for every meter, shown as UTC by anchoring it at start-up."""

    anchor_ns: int = field(default_factory=time.monotonic_ns)
    anchor_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def now_ns(self) -> int:
        return time.monotonic_ns() - self.anchor_ns

    def at(self, at_ns: int) -> datetime:
        return self.anchor_at + timedelta(microseconds=at_ns // 1000)

    def now_us_ns(self) -> int:
        """Now, rounded up to a microsecond: window bounds are exact in the database."""
        return -(-self.now_ns() // 1000) * 1000


class MeterLink(Protocol):
    """The meters of another process (:class:`serving.proxy.meter_service.MeterClient`):
    a request's start, its tokens as they stream, its end with its record."""

    def begin(self, replica: str, event_id: str, *, at_ns: int) -> None: ...

    def chunk(self, event_id: str, *, at_ns: int, tokens: int) -> None: ...

    def finish(self, event: UsageEvent, *, at_ns: int, tokens: int) -> None: ...


@dataclass(slots=True)
class InFlight:
    """A request in flight: what its usage record will say."""

    event_id: str
    replica: ReplicaState
    attribution: Attribution
    endpoint: Endpoint
    model: str
    streamed: bool
    arrived_ns: int
    concurrency: int
    first_token_ns: int | None = None
    done: bool = False
    reported_ns: int = 0
    """Instant of the request's latest report to the meter (its start, at first)."""
    held_tokens: int = 0
    """Tokens of chunks not yet reported to the meter (see :meth:`ProxyState.chunk`)."""
    held_at_ns: int = 0
    """Instant of the latest of those chunks."""
    reservation: Reservation | None = None
    """Its expected cost, held against hard budget limits until it ends."""
    budget_step: bytes | None = None
    """The ``X-SpecLedger-Budget-Step`` header of a request a brownout step acted on."""


@dataclass(slots=True)
class ReplicaState:
    spec: ReplicaSpec
    meter: ReplicaMeter
    in_flight: int = 0
    down_until_ns: int = -1
    live: dict[str, InFlight | None] = field(default_factory=dict)
    """Requests started on the meter and not finished (None: relayed by another process,
    whose events this one meters: :mod:`serving.proxy.meter_service`)."""
    concurrency: dict[str, int] = field(default_factory=dict)
    """Requests in flight on the meter when each of the live ones started (events from
    other processes)."""
    orphan_gpu_ns: int = 0
    """GPU time of requests whose relaying process went away before their record reached
    the meter: booked with the window's idle time, so the window stays conserved."""
    pending: dict[str, UsageEvent] = field(default_factory=dict)
    """Finished requests waiting for the meter to settle their GPU time."""
    finished: int = 0
    """Requests finished on this replica (tells a quiet counter scrape from a busy one)."""
    counters: EngineCounterCheck = field(default_factory=EngineCounterCheck)
    counters_checked_at: datetime | None = None
    iterations: IterationSpecMeter | None = None
    """For engines whose drafted and accepted tokens come from iteration stats
    (TensorRT-LLM): the requests' shares of the drained iterations."""
    awaiting_stats: dict[str, tuple[UsageEvent, int]] = field(default_factory=dict)
    """Settled records waiting for the iteration stats that cover them, with the instant
    they began to wait."""
    engine_metrics: TritonMetrics | None = None
    """The last scrape of a Triton replica's metrics."""

    @property
    def window_start_ns(self) -> int:
        return self.meter.start_ns


@dataclass(slots=True)
class ProxyState:
    """The live proxy: its replicas and meters, the usage sink and the metrics."""

    config: ProxyConfig
    client: httpx.AsyncClient
    replicas: list[ReplicaState]
    sink: UsageSink | None
    """None in a proxy whose meters run elsewhere (``meter_link``): they write the records."""
    metrics: ProxyMetrics
    clock: Clock
    meter_link: MeterLink | None = None
    """Where the events go when the meters run in another process (``--workers``,
    ``--meter-url``); None: the meters are this process's own."""
    batch_ns: int = field(init=False)
    """``config.meter_batch_s`` in nanoseconds."""
    lag_ns: int = 0
    """How far behind now the meters are cut on ticks: a meter service's lateness bound,
    for events still on their way (see :mod:`serving.proxy.meter_service`)."""
    upstream: Upstream | None = None
    """The leg to the replicas for completions (None only before the app starts)."""
    keyring: KeyRing | None = None
    """Live proxy keys; None where the proxy checks none (anonymous use only)."""
    budgets: BudgetGuard | None = None
    """Budgets over their hard limit; None without a database."""
    rates: RateCard | None = None
    """The deployments' prices for the price headers; None without a database."""

    def __post_init__(self) -> None:
        self.batch_ns = self.config.meter_batch_ns

    # -- routing and metering ----------------------------------------------------------------

    def pick(
        self, model: str | None, *, allowed: Callable[[str], bool] | None = None
    ) -> ReplicaState | None:
        """The replica with the fewest requests in flight, preferring ones not marked down;
        with routing by load, among the speculating or the plain replicas as the load says.
        ``allowed`` says which deployments the request may use (None: all)."""
        replicas = [r for r in self.replicas if allowed is None or allowed(r.spec.deployment)]
        candidates = [r for r in replicas if r.spec.model in (None, model)] or (
            replicas if model is None else []
        )
        if not candidates:
            return None
        now = self.clock.now_ns()
        threshold = self.config.speculate_up_to
        if threshold is not None:
            speculate = sum(r.in_flight for r in candidates) + 1 <= threshold
            candidates = [
                r
                for r in candidates
                if (r.spec.spec_method != "none") == speculate and r.down_until_ns <= now
            ] or candidates
        return min(candidates, key=lambda r: (r.down_until_ns > now, r.in_flight))

    def begin(
        self,
        replica: ReplicaState,
        *,
        attribution: Attribution,
        endpoint: Endpoint,
        model: str,
        streamed: bool,
        arrived_ns: int,
        reservation: Reservation | None = None,
    ) -> InFlight:
        """Start metering a request sent to ``replica`` (it arrived at ``arrived_ns``),
        holding ``reservation`` against its budgets until it ends."""
        event_id = uuid.uuid4().hex
        replica.in_flight += 1
        if self.meter_link is not None:
            self.meter_link.begin(replica.spec.replica_name, event_id, at_ns=arrived_ns)
            concurrency = replica.in_flight  # the meter puts the replica's own in the record
        else:
            replica.meter.start(event_id, at_ns=arrived_ns)
            if replica.iterations is not None:
                replica.iterations.begin(event_id, at_ns=arrived_ns)
            concurrency = replica.meter.in_flight
        request = InFlight(
            event_id=event_id,
            replica=replica,
            attribution=attribution,
            endpoint=endpoint,
            model=model[:MODEL_MAX],
            streamed=streamed,
            arrived_ns=arrived_ns,
            concurrency=concurrency,
            reported_ns=arrived_ns,
            reservation=reservation,
        )
        replica.live[event_id] = request
        self.metrics.in_flight(replica.spec, replica.in_flight)
        return request

    def finish(
        self,
        request: InFlight,
        *,
        status: UsageStatus,
        usage: TokenUsage,
        spec: SpecDecodeStats | None,
        meter_tokens: int,
        http_status: int | None,
        error: str | None = None,
        accepted_hist: tuple[int, ...] | None = None,
    ) -> None:
        """Close a request on its meter and queue its record for settlement
        (``accepted_hist``: vLLM's acceptance histogram of the request, when it sent one)."""
        if request.done:
            return
        request.done = True
        replica = request.replica
        finished_ns = self.clock.now_ns()
        if request.reservation is not None and self.budgets is not None:
            price = self.rates.price_of(replica.spec.deployment) if self.rates else None
            cost = price.cost_of(usage.prompt_tokens, usage.completion_tokens) if price else 0
            self.budgets.settle(request.reservation, cost)
        event = UsageEvent(
            event_id=request.event_id,
            session_id=request.attribution.session_id,
            team=request.attribution.team,
            cost_center=request.attribution.cost_center,
            tags=dict(request.attribution.tags),
            deployment=replica.spec.deployment,
            replica=replica.spec.replica_name,
            model=request.model,
            endpoint=request.endpoint.value,
            streamed=request.streamed,
            spec_method=replica.spec.spec_method,
            spec_k=replica.spec.spec_k,
            arrived_at=self.clock.at(request.arrived_ns),
            first_token_at=None
            if request.first_token_ns is None
            else self.clock.at(min(request.first_token_ns, finished_ns)),
            finished_at=self.clock.at(finished_ns),
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=usage.cached_tokens,
            completion_tokens=usage.completion_tokens,
            num_drafts=spec.num_drafts if spec else 0,
            draft_tokens=spec.draft_tokens if spec else 0,
            accepted_tokens=spec.accepted_tokens if spec else 0,
            accepted_hist=accepted_hist if spec else None,
            concurrency=request.concurrency,
            status=status,
            http_status=http_status,
            error=error,
        )
        self._report(request)
        if self.meter_link is not None:
            del replica.live[request.event_id]
            replica.in_flight -= 1
            replica.finished += 1
            self.metrics.in_flight(replica.spec, replica.in_flight)
            self.metrics.finished(event, duration_s=(finished_ns - request.arrived_ns) / 1e9)
            self.meter_link.finish(event, at_ns=finished_ns, tokens=meter_tokens)
            return
        self._close(replica, event, finished_ns, meter_tokens)
        self.metrics.finished(event, duration_s=(finished_ns - request.arrived_ns) / 1e9)

    def _close(
        self, replica: ReplicaState, event: UsageEvent, finished_ns: int, meter_tokens: int
    ) -> None:
        """A finished request leaves its meter; its record waits for settlement."""
        del replica.live[event.event_id]
        replica.in_flight -= 1
        replica.finished += 1
        replica.counters.record(
            num_drafts=event.num_drafts,
            draft_tokens=event.draft_tokens,
            accepted_tokens=event.accepted_tokens,
        )
        self.metrics.in_flight(replica.spec, replica.in_flight)
        replica.pending[event.event_id] = event
        if replica.iterations is not None:
            replica.iterations.end(event.event_id, at_ns=finished_ns)
        replica.meter.finish(event.event_id, at_ns=finished_ns, tokens=meter_tokens)
        self.settle(replica)

    # -- events of requests relayed by other processes (serving.proxy.meter_service) --------

    def apply_begin(self, replica: ReplicaState, event_id: str, *, at_ns: int) -> None:
        """A request another process sent to ``replica`` at ``at_ns``."""
        replica.meter.start(event_id, at_ns=at_ns)
        replica.live[event_id] = None
        replica.concurrency[event_id] = replica.meter.in_flight
        replica.in_flight += 1
        self.metrics.in_flight(replica.spec, replica.in_flight)

    def apply_chunk(self, replica: ReplicaState, event_id: str, *, at_ns: int, tokens: int) -> None:
        """Tokens of a request relayed by another process."""
        if event_id in replica.live:
            replica.meter.chunk(event_id, at_ns=at_ns, tokens=tokens)

    def apply_finish(
        self, replica: ReplicaState, event: UsageEvent, *, at_ns: int, tokens: int
    ) -> None:
        """The end of a request relayed by another process, with its record."""
        if event.event_id not in replica.live:
            return
        concurrency = replica.concurrency.pop(event.event_id, event.concurrency)
        event = replace(event, concurrency=concurrency)
        self._close(replica, event, at_ns, tokens)
        self.metrics.finished(
            event, duration_s=(event.finished_at - event.arrived_at).total_seconds()
        )

    def abandon(self, replica: ReplicaState, event_id: str, *, at_ns: int) -> None:
        """A request whose relaying process went away: it ends now, with no record (its
        GPU time goes with the window's idle time)."""
        if event_id not in replica.live:
            return
        del replica.live[event_id]
        replica.concurrency.pop(event_id, None)
        replica.in_flight -= 1
        replica.meter.finish(event_id, at_ns=at_ns)
        self.settle(replica)

    def chunk(self, request: InFlight, *, tokens: int, at_ns: int) -> None:
        """Meter a streamed chunk carrying ``tokens`` computed since the request's last one.

        Chunks are reported to the meter in batches: a request's chunks within
        ``meter_batch_s`` of its latest report are held and reported together at the
        instant of the last of them (at the latest on the next tick, or at the finish).
        To the meter that is one event whose tokens were computed at a constant rate since
        the previous one, which is how it treats every event: the replica's time is still
        split exactly, at the resolution of the batch.
        """
        if request.done:
            return
        request.held_tokens += tokens
        request.held_at_ns = at_ns
        if at_ns - request.reported_ns >= self.batch_ns:
            self._report(request)

    def _report(self, request: InFlight) -> None:
        """Hand the request's held chunks to its meter."""
        if request.held_tokens:
            if self.meter_link is not None:
                self.meter_link.chunk(
                    request.event_id, at_ns=request.held_at_ns, tokens=request.held_tokens
                )
            else:
                request.replica.meter.chunk(
                    request.event_id, at_ns=request.held_at_ns, tokens=request.held_tokens
                )
            request.reported_ns = request.held_at_ns
            request.held_tokens = 0

    def settle(self, replica: ReplicaState) -> None:
        """Hand every record whose GPU time is final to the sink."""
        for event_id, gpu_ns in replica.meter.pop_settled().items():
            self._emit(replica, event_id, gpu_ns)

    def _emit(self, replica: ReplicaState, event_id: str, gpu_ns: int) -> None:
        pending = replica.pending.pop(event_id, None)
        if pending is None:  # abandoned by its process (see abandon)
            replica.orphan_gpu_ns += gpu_ns
            return
        event = replace(pending, gpu_ns=gpu_ns)
        self.metrics.gpu_ns(replica.spec, "request", gpu_ns)
        if replica.iterations is not None and not replica.iterations.covers(event_id):
            replica.awaiting_stats[event_id] = (event, self.clock.now_ns())
            return
        self._submit(replica, event)

    def _submit(self, replica: ReplicaState, event: UsageEvent) -> None:
        if replica.iterations is not None:
            share = replica.iterations.take(event.event_id)
            event = replace(
                event,
                num_drafts=share.num_drafts,
                draft_tokens=share.draft_tokens,
                accepted_tokens=share.accepted_tokens,
            )
        assert self.sink is not None
        self.sink.submit(event)

    def release_awaiting(self, replica: ReplicaState, *, force: bool = False) -> None:
        """Write the records whose iteration stats have been drained, and those that waited
        longer than ``iteration_wait_s`` (or all, with ``force``)."""
        if not replica.awaiting_stats or replica.iterations is None:
            return
        now_ns = self.clock.now_ns()
        limit_ns = int(self.config.iteration_wait_s * 1e9)
        for event_id, (event, since_ns) in list(replica.awaiting_stats.items()):
            if force or replica.iterations.covers(event_id) or now_ns - since_ns >= limit_ns:
                del replica.awaiting_stats[event_id]
                self._submit(replica, event)

    def tick(self) -> None:
        """Cut every meter at now; close the windows of replicas idle for long enough."""
        for replica in self.replicas:
            for request in replica.live.values():
                if request is not None:
                    self._report(request)
            if self.meter_link is not None:
                continue
            now_ns = self.clock.now_ns() - self.lag_ns
            replica.meter.tick(at_ns=now_ns)
            self.settle(replica)
            self.release_awaiting(replica)
            window_s = (now_ns - replica.window_start_ns) / 1e9
            if not replica.live and not replica.pending and window_s >= self.config.idle_window_s:
                self.close_window(replica, reopen=True)

    def close_request(self, request: InFlight) -> None:
        """Record a request still in flight when the proxy shuts down."""
        self.finish(
            request,
            status=UsageStatus.error,
            usage=TokenUsage(),
            spec=None,
            meter_tokens=0,
            http_status=None,
            error="the proxy shut down while the request was in flight",
        )

    def close_window(self, replica: ReplicaState, *, reopen: bool) -> None:
        """Close the replica's meter: records of anything still open, and its idle time."""
        for request in list(replica.live.values()):  # only at shutdown
            if request is not None:  # (relayed elsewhere: closing the meter finishes it)
                self.close_request(request)
        now_ns = self.clock.now_ns() - self.lag_ns
        end_ns = max(-(-now_ns // 1000) * 1000, replica.window_start_ns)  # whole microseconds
        report = replica.meter.close(at_ns=end_ns)
        for event_id, gpu_ns in report.request_gpu_ns.items():
            self._emit(replica, event_id, gpu_ns)
        if not reopen:
            self.release_awaiting(replica, force=True)
        idle_gpu_ns = report.idle_gpu_ns + replica.orphan_gpu_ns
        replica.orphan_gpu_ns = 0
        replica.live.clear()
        replica.concurrency.clear()
        idle = ReplicaIdleEvent(
            deployment=replica.spec.deployment,
            replica=replica.spec.replica_name,
            start_at=self.clock.at(report.start_ns),
            end_at=self.clock.at(report.end_ns),
            gpu_ns=idle_gpu_ns,
        )
        self.metrics.gpu_ns(replica.spec, "idle", idle_gpu_ns)
        assert self.sink is not None
        self.sink.submit(idle)
        if reopen:
            replica.meter = ReplicaMeter(gpus=replica.spec.gpus, start_ns=report.end_ns)
