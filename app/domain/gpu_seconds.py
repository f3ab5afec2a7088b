"""GPU-seconds per request: a replica's capacity shared by token work, exactly (DESIGN.md).

A :class:`ReplicaMeter` is fed the events of one replica as the proxy sees them (a request
starts, a streamed chunk arrives with the tokens it carries, the request finishes) and
allocates the replica's capacity, ``gpus x wall time``, in integer GPU-nanoseconds.

Semantics:

* **Slices.** Time is cut at every event instant. In each slice the capacity
  ``gpus x (end - start)`` goes to the requests in flight (started at or before the slice
  start, not finished before its end) in proportion to the tokens each was scheduled in the
  slice; if none of them was scheduled a token the slice is split evenly; with no request in
  flight the slice is idle.
* **Which tokens fall in a slice.** The tokens an event reports (prompt tokens at prefill,
  accepted and rejected draft tokens plus the bonus token at decode, whatever the caller
  counts) were computed since that request's previous event, at a constant rate. A slice
  inside that interval holds the pro-rata part of them, so the weight of a request in a slice
  is its token rate ``tokens / interval length`` there. (Attributing a chunk's tokens only to
  the slice that ends at it would hand a whole decode step to whichever request's chunk
  arrived first after it, since the slices between the chunks of one batched step last
  microseconds: of two identical requests, one would get ~99% of the GPU time.)
* **Deferred settlement.** A slice is final once every request in flight during it has
  reported an event at or after its end; until then its weights are unknown. A finished
  request is *settled* (its total can no longer change) once every slice up to its finish is
  final; :meth:`ReplicaMeter.pop_settled` hands settled totals out.
* **Clock jitter.** Time never runs backwards: an event earlier than its request's previous
  event is moved to that instant (its tokens then join the request's next interval), and a
  start earlier than the settled frontier is moved to the frontier. No slice has negative
  length, so no share is negative.
* **Exactness.** Token rates are fixed point (:data:`RATE_SCALE`). Shares are accumulated
  through a cumulative price per unit of weight with :data:`PRICE_BITS` binary places, and
  each request gets its exact share rounded down (to within 2**-40 GPU-ns: an exact integer
  share is not lost to fixed-point error), so it is at most 2**-40 above its exact share and
  less than one GPU-ns below it. The GPU-ns that rounding leaves (under one per request)
  are booked with idle, so ``sum(requests) + idle == gpus x wall`` exactly, for meters that
  see fewer than 2**40 requests. Requests with identical events get identical shares.

Cost: O(log n) per event, with n the requests in flight (no per-member work per slice).
"""

import bisect
import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from app.domain.errors import InvalidInput

__all__ = [
    "PRICE_BITS",
    "RATE_SCALE",
    "EventKind",
    "MeterEvent",
    "MeterReport",
    "ReplicaMeter",
    "meter_events",
]

RATE_SCALE = 2**128
"""Fixed-point scale of token rates: a weight is ``tokens * RATE_SCALE // interval_ns``.

Exact rational rates would need the lcm of every member's interval length in each slice. The
fixed-point rate is off by less than one unit, a relative error below
``interval_ns / 2**128`` (a share error below 2**-41 GPU-ns for an hour-long interval on
8 GPUs); identical requests still get identical weights, and a positive token count always
gives a positive weight.
"""

PRICE_BITS = 192
"""Binary places of the cumulative price (GPU-ns per unit of weight) and of shares."""

_SLACK_FIXED = 1 << (PRICE_BITS - 40)
"""2**-40 GPU-ns: absorbs fixed-point error below an exact integer share when rounding."""


@dataclass(slots=True)
class _Request:
    id: str
    start_ns: int
    last_ns: int
    """Effective instant of the request's latest event."""
    carry_tokens: int = 0
    """Tokens reported at ``last_ns`` that no interval of positive length holds yet."""
    intervals: deque[tuple[int, int]] = field(default_factory=deque)
    """``(end_ns, weight)`` of reported intervals not yet opened; each begins where the
    previous one ends (the first at ``start_ns``)."""
    finish_ns: int | None = None
    closed_to_ns: int = 0
    """End of the last interval whose share is booked (``start_ns`` before the first)."""
    weight: int = 0
    """Weight of the open interval."""
    price_mark: int = 0
    even_mark: int = 0
    share_fixed: int = 0
    """Booked share in GPU-ns, fixed point with ``PRICE_BITS`` binary places."""
    active: bool = False
    settled: bool = False

    @property
    def gpu_ns(self) -> int:
        return (self.share_fixed + _SLACK_FIXED) >> PRICE_BITS


@dataclass(frozen=True, slots=True)
class MeterReport:
    """What a closed meter allocated. ``sum(requests) + settled + idle == capacity``."""

    start_ns: int
    """Wall start of the replica's metering window (inclusive)."""
    end_ns: int
    """Wall end of the window (exclusive)."""
    gpus: int
    request_gpu_ns: dict[str, int]
    """GPU-nanoseconds per request not already handed out by ``pop_settled``."""
    settled_gpu_ns: int
    """GPU-nanoseconds of the requests handed out earlier by ``pop_settled``."""
    idle_gpu_ns: int
    """GPU-nanoseconds attributed to no request (idle slices plus ``rounding_gpu_ns``)."""
    rounding_gpu_ns: int
    """Part of ``idle_gpu_ns`` left by rounding shares down (under one GPU-ns per request)."""
    open_at_close: tuple[str, ...]
    """Requests still in flight at close; they were finished at ``end_ns`` with no tokens."""

    @property
    def capacity_gpu_ns(self) -> int:
        """``gpus x (end_ns - start_ns)``."""
        return self.gpus * (self.end_ns - self.start_ns)


class ReplicaMeter:
    """Incremental GPU-time allocator for one replica, fed live by the proxy.

    Timestamps are integer nanoseconds on one clock for the replica's events (the proxy's
    monotonic clock, say). Request ids must be unique for the meter's lifetime.
    """

    def __init__(self, *, gpus: int, start_ns: int) -> None:
        """Start metering a replica.

        Args:
            gpus: GPUs of the replica (its capacity is ``gpus`` GPU-ns per ns).
            start_ns: Wall start of the metering window; earlier events are moved to it.

        Raises:
            InvalidInput: If ``gpus`` is not positive.
        """
        if gpus <= 0:
            raise InvalidInput(f"gpus must be positive, got {gpus}")
        self.gpus = gpus
        self.start_ns = start_ns
        self._frontier_ns = start_ns
        self._cuts: list[int] = []  # pending cut instants, all > frontier, sorted
        self._requests: dict[str, _Request] = {}
        self._unfinished: dict[str, _Request] = {}
        self._settled: dict[str, _Request] = {}  # settled, not yet handed out
        self._opening: dict[str, _Request] = {}  # active, next interval not yet opened
        # Heaps of (instant, seq, id): starts the frontier has not reached, ends of open
        # intervals, and each unfinished request's latest event (stale entries are skipped).
        self._waiting: list[tuple[int, int, str]] = []
        self._closing: list[tuple[int, int, str]] = []
        self._reported: list[tuple[int, int, str]] = []
        self._seq = 0
        self._active_count = 0
        self._weight_sum = 0
        self._price = 0  # cumulative GPU-ns per unit of weight, over slices with weight
        self._even = 0  # cumulative GPU-ns per member, over slices without any weight
        self._empty_gpu_ns = 0
        self._handed_out_gpu_ns = 0
        self._closed = False

    @property
    def frontier_ns(self) -> int:
        """Instant up to which every slice is final."""
        return self._frontier_ns

    @property
    def in_flight(self) -> int:
        """Number of requests started and not finished (the concurrency a request sees)."""
        return len(self._unfinished)

    def start(self, request_id: str, *, at_ns: int) -> None:
        """Record that a request was sent to the replica.

        Raises:
            InvalidInput: If the id was used before or the meter is closed.
        """
        self._check_open()
        if request_id in self._requests:
            raise InvalidInput(f"request {request_id!r} started twice")
        at_ns = max(at_ns, self._frontier_ns)
        request = _Request(id=request_id, start_ns=at_ns, last_ns=at_ns, closed_to_ns=at_ns)
        self._requests[request_id] = request
        self._unfinished[request_id] = request
        heapq.heappush(self._waiting, (at_ns, self._next_seq(), request_id))
        heapq.heappush(self._reported, (at_ns, self._next_seq(), request_id))
        self._add_cut(at_ns)
        self._advance()

    def chunk(self, request_id: str, *, at_ns: int, tokens: int) -> None:
        """Record a streamed chunk carrying ``tokens`` computed since the request's last event.

        Raises:
            InvalidInput: If the request is unknown or finished, ``tokens`` is negative, or the
                meter is closed.
        """
        self._report(self._live(request_id), at_ns=at_ns, tokens=tokens)
        self._advance()

    def finish(self, request_id: str, *, at_ns: int, tokens: int = 0) -> None:
        """Record the end of a request (done, failed or cancelled).

        Args:
            request_id: The request.
            at_ns: When it ended.
            tokens: Tokens computed since its last event and not reported by a chunk (for a
                non-streamed request: all of its tokens).

        Raises:
            InvalidInput: If the request is unknown or finished, ``tokens`` is negative, or the
                meter is closed.
        """
        request = self._live(request_id)
        self._report(request, at_ns=at_ns, tokens=tokens)
        request.finish_ns = request.last_ns
        del self._unfinished[request_id]
        if request.closed_to_ns == request.finish_ns:  # nothing left to book
            self._settle(request)
        self._advance()

    def tick(self, *, at_ns: int) -> None:
        """Cut time at ``at_ns`` without an event, so idle time up to it can settle.

        Raises:
            InvalidInput: If the meter is closed.
        """
        self._check_open()
        self._add_cut(at_ns)
        self._advance()

    def pop_settled(self) -> dict[str, int]:
        """Hand out and forget the GPU-nanoseconds of requests whose total is final."""
        done = {rid: request.gpu_ns for rid, request in self._settled.items()}
        for rid in done:
            del self._requests[rid]
        self._settled.clear()
        self._handed_out_gpu_ns += sum(done.values())
        return done

    def close(self, *, at_ns: int) -> MeterReport:
        """End the window at ``at_ns`` (or the latest event, if later) and report.

        Requests still in flight are finished at the end with no further tokens.

        Returns:
            The allocation of the whole window.

        Raises:
            InvalidInput: If the meter is already closed.
        """
        self._check_open()
        end_ns = max(at_ns, self._frontier_ns, *self._cuts[-1:])
        open_ids = tuple(self._unfinished)
        for request_id in open_ids:
            self.finish(request_id, at_ns=end_ns)
        self._add_cut(end_ns)
        self._advance()
        self._closed = True
        shares = {rid: request.gpu_ns for rid, request in self._requests.items()}
        idle_gpu_ns = (
            self.gpus * (end_ns - self.start_ns) - sum(shares.values()) - self._handed_out_gpu_ns
        )
        return MeterReport(
            start_ns=self.start_ns,
            end_ns=end_ns,
            gpus=self.gpus,
            request_gpu_ns=shares,
            settled_gpu_ns=self._handed_out_gpu_ns,
            idle_gpu_ns=idle_gpu_ns,
            rounding_gpu_ns=idle_gpu_ns - self._empty_gpu_ns,
            open_at_close=open_ids,
        )

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInput("the meter is closed")

    def _live(self, request_id: str) -> _Request:
        self._check_open()
        request = self._unfinished.get(request_id)
        if request is None:
            state = "finished" if request_id in self._requests else "unknown"
            raise InvalidInput(f"request {request_id!r} is {state}")
        return request

    def _report(self, request: _Request, *, at_ns: int, tokens: int) -> None:
        if tokens < 0:
            raise InvalidInput(f"tokens must be non-negative, got {tokens}")
        at_ns = max(at_ns, request.last_ns)
        tokens += request.carry_tokens
        if at_ns == request.last_ns:
            request.carry_tokens = tokens
            return
        request.intervals.append((at_ns, tokens * RATE_SCALE // (at_ns - request.last_ns)))
        request.carry_tokens = 0
        request.last_ns = at_ns
        heapq.heappush(self._reported, (at_ns, self._next_seq(), request.id))
        self._add_cut(at_ns)

    def _add_cut(self, at_ns: int) -> None:
        if at_ns <= self._frontier_ns:
            return
        index = bisect.bisect_left(self._cuts, at_ns)
        if index == len(self._cuts) or self._cuts[index] != at_ns:
            self._cuts.insert(index, at_ns)

    def _settle(self, request: _Request) -> None:
        request.settled = True
        self._settled[request.id] = request
        self._opening.pop(request.id, None)
        if request.active:
            request.active = False
            self._active_count -= 1

    def _advance(self) -> None:
        """Finalize every slice whose members have all reported past its end."""
        reported = self._reported
        while reported:  # drop entries of finished requests and superseded events
            at_ns, _, rid = reported[0]
            request = self._unfinished.get(rid)
            if request is not None and request.last_ns == at_ns:
                break
            heapq.heappop(reported)
        horizon_ns = reported[0][0] if reported else (self._cuts[-1] if self._cuts else 0)
        done = 0
        for end_ns in self._cuts:
            if end_ns > horizon_ns:
                break
            self._finalize_slice(self._frontier_ns, end_ns)
            self._frontier_ns = end_ns
            done += 1
        del self._cuts[:done]

    def _finalize_slice(self, begin_ns: int, end_ns: int) -> None:
        while self._waiting and self._waiting[0][0] <= begin_ns:
            request = self._requests.get(heapq.heappop(self._waiting)[2])
            if request is not None and not request.settled:
                request.active = True
                self._active_count += 1
                self._opening[request.id] = request
        for request in self._opening.values():
            # The slice lies within this interval: it ends at a cut, and end_ns is at most
            # the request's latest event (the horizon) or its finish.
            interval_end_ns, request.weight = request.intervals.popleft()
            request.price_mark, request.even_mark = self._price, self._even
            self._weight_sum += request.weight
            heapq.heappush(self._closing, (interval_end_ns, self._next_seq(), request.id))
        self._opening.clear()

        capacity_fixed = (self.gpus * (end_ns - begin_ns)) << PRICE_BITS
        if not self._active_count:
            self._empty_gpu_ns += self.gpus * (end_ns - begin_ns)
        elif self._weight_sum:
            self._price += capacity_fixed // self._weight_sum
        else:
            self._even += capacity_fixed // self._active_count

        while self._closing and self._closing[0][0] <= end_ns:
            request = self._requests[heapq.heappop(self._closing)[2]]
            if request.weight:
                request.share_fixed += request.weight * (self._price - request.price_mark)
            else:
                request.share_fixed += self._even - request.even_mark
            self._weight_sum -= request.weight
            request.closed_to_ns = end_ns
            if request.finish_ns is not None and request.finish_ns <= end_ns:
                self._settle(request)
            else:
                self._opening[request.id] = request


class EventKind(StrEnum):
    """What happened to a request at an instant."""

    start = "start"
    chunk = "chunk"
    finish = "finish"


@dataclass(frozen=True, slots=True)
class MeterEvent:
    """One recorded metering event, for offline recomputation."""

    kind: EventKind
    request_id: str
    at_ns: int
    tokens: int = 0
    """Tokens computed since the request's previous event (ignored for ``start``)."""


def meter_events(
    events: Iterable[MeterEvent], *, gpus: int, start_ns: int, end_ns: int
) -> MeterReport:
    """Recompute a replica's allocation offline from its recorded events.

    Events are applied in the order given, which should be the order they were observed (a
    request's start before its chunks); timestamps need not be sorted across requests.

    Args:
        events: The replica's events.
        gpus: GPUs of the replica.
        start_ns: Wall start of the window.
        end_ns: Wall end of the window (extended to the latest event if that is later).

    Returns:
        The same report a live :class:`ReplicaMeter` fed these events would give at close.

    Raises:
        InvalidInput: On inconsistent events (unknown or repeated request, negative tokens).
    """
    meter = ReplicaMeter(gpus=gpus, start_ns=start_ns)
    for event in events:
        if event.kind is EventKind.start:
            meter.start(event.request_id, at_ns=event.at_ns)
        elif event.kind is EventKind.chunk:
            meter.chunk(event.request_id, at_ns=event.at_ns, tokens=event.tokens)
        else:
            meter.finish(event.request_id, at_ns=event.at_ns, tokens=event.tokens)
    return meter.close(at_ns=end_ns)
