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
  inside that interval holds the pro-rata part of them, so the weight of request i in a slice
  is its token rate ``tokens / interval length`` there. Attributing a chunk's tokens only to
  the slice that ends at it would hand a whole decode step to whichever request's chunk
  arrived first after it (the slices between the other requests' chunks of the same step
  last microseconds): with two identical requests, one would get ~99% of the GPU time.
* **Deferred settlement.** A slice is final once every request in flight during it has
  reported an event at or after its end; until then its weights are unknown. A finished
  request is *settled* (its total can no longer change) when all slices up to its finish are
  final; :meth:`ReplicaMeter.pop_settled` hands settled totals out.
* **Clock jitter.** Time never runs backwards: an event earlier than its request's previous
  event is moved to that instant (its tokens then join the request's next interval), and a
  start earlier than the settled frontier is moved to the frontier. No slice has negative
  length, so no share is negative.
* **Rounding.** Each slice is split by largest remainder in GPU-ns, except that requests
  tied on the remainder at the cut-off get the same rounding: if the spare nanoseconds cannot
  go to all of them they go to none, and the spare (fewer than the tied requests) is booked as
  idle. So requests with identical events get exactly equal shares, every request is within
  1 GPU-ns of its exact share per slice, and ``sum(requests) + idle == gpus x wall`` exactly.

Cost per event: O(requests in flight), plus O(members) per slice settled.
"""

import bisect
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from app.domain.errors import InvalidInput

__all__ = [
    "EventKind",
    "MeterEvent",
    "MeterReport",
    "ReplicaMeter",
    "meter_events",
    "split_ties_alike",
]


@dataclass(slots=True)
class _Request:
    start_ns: int
    last_ns: int
    """Effective instant of the request's latest event."""
    carry_tokens: int = 0
    """Tokens reported at ``last_ns`` that no interval of positive length holds yet."""
    intervals: deque[tuple[int, int, int]] = field(default_factory=deque)
    """``(begin_ns, end_ns, tokens)`` reported but not yet fully settled, in time order."""
    finish_ns: int | None = None
    gpu_ns: int = 0


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
    """Part of ``idle_gpu_ns`` left by tied rounding in busy slices (< 1 ns per tied request)."""
    open_at_close: tuple[str, ...]
    """Requests still in flight at close; they were finished at ``end_ns`` with no tokens."""

    @property
    def capacity_gpu_ns(self) -> int:
        """``gpus x (end_ns - start_ns)``."""
        return self.gpus * (self.end_ns - self.start_ns)


class ReplicaMeter:
    """Incremental GPU-time allocator for one replica, fed live by the proxy.

    Timestamps are integer nanoseconds on any monotonic-ish clock shared by the events of the
    replica. Request ids must be unique for the meter's lifetime.
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
        self._waiting: list[tuple[int, int, str]] = []  # (start_ns, seq, id), start > frontier
        self._seq = 0
        self._active: dict[str, _Request] = {}  # started at or before the frontier
        self._idle_gpu_ns = 0
        self._rounding_gpu_ns = 0
        self._settled_gpu_ns = 0
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
        request = _Request(start_ns=at_ns, last_ns=at_ns)
        self._requests[request_id] = request
        self._unfinished[request_id] = request
        self._seq += 1
        bisect.insort(self._waiting, (at_ns, self._seq, request_id))
        self._add_cut(at_ns)
        self._settle()

    def chunk(self, request_id: str, *, at_ns: int, tokens: int) -> None:
        """Record a streamed chunk carrying ``tokens`` computed since the request's last event.

        Raises:
            InvalidInput: If the request is unknown or finished, ``tokens`` is negative, or the
                meter is closed.
        """
        self._report(self._live(request_id), at_ns=at_ns, tokens=tokens)
        self._settle()

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
        self._settle()

    def tick(self, *, at_ns: int) -> None:
        """Cut time at ``at_ns`` without an event, so idle time up to it can settle."""
        self._check_open()
        self._add_cut(at_ns)
        self._settle()

    def pop_settled(self) -> dict[str, int]:
        """Hand out and forget the GPU-nanoseconds of finished requests whose total is final."""
        done = {
            rid: r
            for rid, r in self._requests.items()
            if r.finish_ns is not None and r.finish_ns <= self._frontier_ns
        }
        for rid, request in done.items():
            del self._requests[rid]
            self._active.pop(rid, None)
            self._settled_gpu_ns += request.gpu_ns
        return {rid: r.gpu_ns for rid, r in done.items()}

    def close(self, *, at_ns: int) -> MeterReport:
        """End the window at ``at_ns`` (or the latest event, if later) and report.

        Requests still in flight are finished at the end with no further tokens.

        Returns:
            The allocation of the whole window.

        Raises:
            InvalidInput: If the meter is already closed.
        """
        self._check_open()
        end_ns = max(
            [
                at_ns,
                self._frontier_ns,
                *self._cuts[-1:],
                *(r.last_ns for r in self._requests.values()),
            ]
        )
        open_ids = tuple(self._unfinished)
        for request_id in open_ids:
            self.finish(request_id, at_ns=end_ns)
        self._add_cut(end_ns)
        self._settle()
        self._closed = True
        return MeterReport(
            start_ns=self.start_ns,
            end_ns=end_ns,
            gpus=self.gpus,
            request_gpu_ns={rid: r.gpu_ns for rid, r in self._requests.items()},
            settled_gpu_ns=self._settled_gpu_ns,
            idle_gpu_ns=self._idle_gpu_ns,
            rounding_gpu_ns=self._rounding_gpu_ns,
            open_at_close=open_ids,
        )

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
        request.intervals.append((request.last_ns, at_ns, tokens))
        request.carry_tokens = 0
        request.last_ns = at_ns
        self._add_cut(at_ns)

    def _add_cut(self, at_ns: int) -> None:
        if at_ns <= self._frontier_ns:
            return
        index = bisect.bisect_left(self._cuts, at_ns)
        if index == len(self._cuts) or self._cuts[index] != at_ns:
            self._cuts.insert(index, at_ns)

    def _settle(self) -> None:
        """Finalize every slice whose members have all reported past its end."""
        if not self._cuts:
            return
        horizon = min((r.last_ns for r in self._unfinished.values()), default=self._cuts[-1])
        done = 0
        for end_ns in self._cuts:
            if end_ns > horizon:
                break
            self._finalize_slice(self._frontier_ns, end_ns)
            self._frontier_ns = end_ns
            done += 1
        del self._cuts[:done]

    def _finalize_slice(self, begin_ns: int, end_ns: int) -> None:
        while self._waiting and self._waiting[0][0] <= begin_ns:
            _, _, rid = self._waiting.pop(0)
            request = self._requests.get(rid)
            if request is not None:  # None: a zero-length request already handed out
                self._active[rid] = request
        for rid in [rid for rid, r in self._active.items() if _ended_by(r, begin_ns)]:
            del self._active[rid]
        capacity_gpu_ns = self.gpus * (end_ns - begin_ns)
        if not self._active:
            self._idle_gpu_ns += capacity_gpu_ns
            return
        members = list(self._active.values())
        rates = [_rate_over(r, begin_ns, end_ns) for r in members]
        if not any(tokens for tokens, _ in rates):
            weights = [1] * len(members)
        else:
            scale = math.lcm(*(length for tokens, length in rates if tokens))
            weights = [tokens * (scale // length) for tokens, length in rates]
        shares, dust = split_ties_alike(capacity_gpu_ns, weights)
        for request, share in zip(members, shares, strict=True):
            request.gpu_ns += share
        self._idle_gpu_ns += dust
        self._rounding_gpu_ns += dust


def _ended_by(request: _Request, at_ns: int) -> bool:
    return request.finish_ns is not None and request.finish_ns <= at_ns


def _rate_over(request: _Request, begin_ns: int, end_ns: int) -> tuple[int, int]:
    """``(tokens, length_ns)`` of the request's interval that contains ``(begin, end]``."""
    intervals = request.intervals
    while intervals[0][1] <= begin_ns:
        intervals.popleft()
    # Intervals tile [start, last_ns] and end at cut instants, so this one holds the slice.
    interval_begin, interval_end, tokens = intervals[0]
    return tokens, interval_end - interval_begin


def split_ties_alike(total: int, weights: list[int]) -> tuple[list[int], int]:
    """Largest-remainder split of a non-negative integer that treats ties alike.

    Args:
        total: Non-negative amount to split.
        weights: Non-negative integer weights, at least one positive.

    Returns:
        The parts, in the order of ``weights``, and the undistributed rest: when the spare
        units left after flooring would go to only some of the parts tied on the remainder at
        the cut-off, none of those tied parts gets one and they stay in the rest (fewer than
        the number of tied parts). ``sum(parts) + rest == total``.
    """
    denominator = sum(weights)
    parts: list[int] = []
    remainders: list[int] = []
    for weight in weights:
        part, remainder = divmod(total * weight, denominator)
        parts.append(part)
        remainders.append(remainder)
    leftover = total - sum(parts)
    if leftover == 0:
        return parts, 0
    ranked = sorted(remainders, reverse=True)
    cutoff = ranked[leftover - 1]
    if leftover < len(ranked) and ranked[leftover] == cutoff:
        chosen = [remainder > cutoff for remainder in remainders]
    else:
        chosen = [remainder >= cutoff for remainder in remainders]
    given = 0
    for index, bump in enumerate(chosen):
        if bump:
            parts[index] += 1
            given += 1
    return parts, leftover - given


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
