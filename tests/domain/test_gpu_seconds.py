from collections.abc import Collection
from fractions import Fraction
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.errors import InvalidInput
from app.domain.gpu_seconds import (
    RATE_SCALE,
    EventKind,
    MeterEvent,
    MeterReport,
    ReplicaMeter,
    meter_events,
)

START, CHUNK, FINISH = EventKind.start, EventKind.chunk, EventKind.finish
_RANK = {START: 0, CHUNK: 1, FINISH: 2}


def _total(report: MeterReport) -> int:
    return sum(report.request_gpu_ns.values()) + report.settled_gpu_ns + report.idle_gpu_ns


@st.composite
def request_timelines(draw, *, max_requests=6, horizon_ns=1_000):
    """Events of several requests, each in its own order, as (request, kind, at, tokens)."""
    timelines = []
    for index in range(draw(st.integers(1, max_requests))):
        rid = f"r{index}"
        times = sorted(draw(st.lists(st.integers(0, horizon_ns), min_size=1, max_size=6)))
        finished = draw(st.booleans())
        events = [(rid, START, times[0], 0)]
        for position, at in enumerate(times[1:], start=1):
            kind = FINISH if finished and position == len(times) - 1 else CHUNK
            events.append((rid, kind, at, draw(st.integers(0, 50))))
        timelines.append(events)
    return timelines


Event = tuple[str, EventKind, int, int]


def _in_time_order(timelines: list[list[Event]]) -> list[Event]:
    events = [e for timeline in timelines for e in timeline]
    return sorted(events, key=lambda e: (e[2], _RANK[e[1]]))


def _feed(
    meter: ReplicaMeter, events: list[Event], pop_after: Collection[int] = ()
) -> dict[str, int]:
    popped: dict[str, int] = {}
    for position, (rid, kind, at, tokens) in enumerate(events):
        if kind is START:
            meter.start(rid, at_ns=at)
        elif kind is CHUNK:
            meter.chunk(rid, at_ns=at, tokens=tokens)
        else:
            meter.finish(rid, at_ns=at, tokens=tokens)
        if position in pop_after:
            popped.update(meter.pop_settled())
    return popped


def _reference(events: list[Event], *, gpus: int, end_ns: int) -> Any:
    """Exact shares, slice by slice, from complete knowledge of time-ordered events (start 0).

    Weights are the meter's fixed-point token rates; everything else is exact arithmetic.
    """
    marks: dict[str, list[tuple[int, int]]] = {}
    starts: dict[str, int] = {}
    finishes: dict[str, int] = {}
    for rid, kind, at, tokens in events:
        if kind is START:
            starts[rid], marks[rid] = at, []
        else:
            marks[rid].append((at, tokens))
            if kind is FINISH:
                finishes[rid] = at
    intervals: dict[str, list[tuple[int, int, int]]] = {}
    for rid, start in starts.items():
        if rid not in finishes:
            marks[rid].append((end_ns, 0))
            finishes[rid] = end_ns
        intervals[rid], carry, previous = [], 0, start
        for at, tokens in marks[rid]:
            carry += tokens
            if at > previous:
                intervals[rid].append((previous, at, carry * RATE_SCALE // (at - previous)))
                carry, previous = 0, at
    cuts = sorted(
        {0, end_ns} | {at for rid in marks for at, _ in marks[rid]} | set(starts.values())
    )
    exact = dict.fromkeys(starts, Fraction(0))
    empty = 0
    for begin, end in pairwise(cuts):
        capacity = gpus * (end - begin)
        members = [r for r in starts if starts[r] <= begin and finishes[r] >= end]
        if not members:
            empty += capacity
            continue
        weights = {
            r: next(w for b, e, w in intervals[r] if b <= begin and end <= e) for r in members
        }
        if not any(weights.values()):
            weights = dict.fromkeys(members, 1)
        for r in members:
            exact[r] += Fraction(capacity * weights[r], sum(weights.values()))
    return exact, empty


class TestReplicaMeter:
    @settings(max_examples=200, deadline=None)
    @given(
        timelines=request_timelines(),
        gpus=st.integers(1, 8),
        tail_ns=st.integers(0, 100),
        pops=st.sets(st.integers(0, 40)),
    )
    def test_meter_gives_each_request_its_exact_share_rounded_down(
        self, timelines, gpus, tail_ns, pops
    ):
        events = _in_time_order(timelines)
        end_ns = max(at for _, _, at, _ in events) + tail_ns
        meter = ReplicaMeter(gpus=gpus, start_ns=0)
        popped = _feed(meter, events, pop_after=pops)
        report = meter.close(at_ns=end_ns)
        exact, empty = _reference(events, gpus=gpus, end_ns=end_ns)
        shares = {**popped, **report.request_gpu_ns}

        assert shares.keys() == exact.keys()
        for rid, share in shares.items():  # the exact share, rounded down
            assert exact[rid] - 1 < share <= exact[rid] + Fraction(1, 2**40)
        assert report.settled_gpu_ns == sum(popped.values())
        assert _total(report) == gpus * end_ns == report.capacity_gpu_ns
        assert report.idle_gpu_ns - report.rounding_gpu_ns == empty
        assert 0 <= report.rounding_gpu_ns < max(len(shares), 1)

    @settings(max_examples=100, deadline=None)
    @given(
        timelines=request_timelines(max_requests=8),
        gpus=st.integers(1, 8),
        data=st.data(),
        start_ns=st.integers(-50, 500),
        close_ns=st.integers(0, 1_200),
    )
    def test_meter_conserves_capacity_under_any_interleaving(
        self, timelines, gpus, data, start_ns, close_ns
    ):
        # Arbitrary interleaving across requests and jittered clocks (times need not increase).
        jitter = st.integers(-200, 200)
        remaining = [
            [(rid, kind, at + data.draw(jitter), tok) for rid, kind, at, tok in t]
            for t in timelines
        ]
        events = []
        while any(remaining):
            queue = data.draw(st.sampled_from([q for q in remaining if q]))
            events.append(queue.pop(0))
        meter = ReplicaMeter(gpus=gpus, start_ns=start_ns)
        pops = data.draw(st.sets(st.integers(0, len(events))))
        popped = _feed(meter, events, pop_after=pops)
        report = meter.close(at_ns=close_ns)

        assert report.start_ns == start_ns
        assert report.end_ns >= max(start_ns, close_ns)
        assert _total(report) == report.capacity_gpu_ns
        assert {**popped, **report.request_gpu_ns}.keys() == {t[0][0] for t in timelines}
        assert all(v >= 0 for v in [*popped.values(), *report.request_gpu_ns.values()])
        assert 0 <= report.rounding_gpu_ns <= report.idle_gpu_ns

    @settings(max_examples=200, deadline=None)
    @given(
        timelines=request_timelines(max_requests=4),
        twin=request_timelines(max_requests=1),
        gpus=st.integers(1, 8),
    )
    def test_identical_requests_get_exactly_equal_shares(self, timelines, twin, gpus):
        copies = [[(f"twin{c}", k, at, tok) for _, k, at, tok in twin[0]] for c in (1, 2)]
        events = _in_time_order([*timelines, *copies])
        meter = ReplicaMeter(gpus=gpus, start_ns=0)
        _feed(meter, events)
        report = meter.close(at_ns=1_100)
        assert report.request_gpu_ns["twin1"] == report.request_gpu_ns["twin2"]

    def test_meter_shares_a_decode_batch_fairly(self):
        """Chunks of a batched step arrive microseconds apart; the step is still shared."""
        meter = ReplicaMeter(gpus=1, start_ns=0)
        meter.start("a", at_ns=0)
        meter.start("b", at_ns=0)
        step_ns = 20_000_000
        for step in range(1, 101):
            meter.chunk("a", at_ns=step * step_ns + 100_000, tokens=1)
            meter.chunk("b", at_ns=step * step_ns + 200_000, tokens=1)
        meter.finish("a", at_ns=101 * step_ns, tokens=1)
        meter.finish("b", at_ns=101 * step_ns, tokens=1)
        shares = meter.pop_settled()
        assert 101 * step_ns - 2 < sum(shares.values()) <= 101 * step_ns  # rounded down
        assert abs(shares["a"] - shares["b"]) < 0.001 * 101 * step_ns

    def test_meter_weights_by_rates_and_splits_evenly_without_tokens(self):
        meter = ReplicaMeter(gpus=2, start_ns=0)
        meter.start("a", at_ns=0)
        meter.start("b", at_ns=0)
        meter.chunk("a", at_ns=100, tokens=3)  # (0, 100]: a 3 tokens, b 1 token
        meter.chunk("b", at_ns=100, tokens=1)
        meter.finish("a", at_ns=200)  # (100, 200]: no tokens, even split
        meter.finish("b", at_ns=200)
        meter.tick(at_ns=300)  # (200, 300]: idle
        assert meter.pop_settled() == {"a": 150 + 100, "b": 50 + 100}
        report = meter.close(at_ns=300)
        assert report.idle_gpu_ns == 200
        assert report.request_gpu_ns == {}
        assert report.settled_gpu_ns == 400

    def test_meter_spreads_tokens_over_the_interval_they_cover(self):
        meter = ReplicaMeter(gpus=1, start_ns=0)
        meter.start("long", at_ns=0)
        meter.start("short", at_ns=50)
        meter.chunk("short", at_ns=100, tokens=10)  # rate 10/50 over (50, 100]
        meter.finish("long", at_ns=100, tokens=10)  # rate 10/100 over (0, 100]
        meter.finish("short", at_ns=100)
        # (0, 50]: long alone, 50. (50, 100]: rates 1/10 vs 2/10 -> 50/3 and 100/3.
        assert meter.pop_settled() == {"long": 50 + 16, "short": 33}
        assert meter.close(at_ns=100).rounding_gpu_ns == 1

    def test_meter_defers_settlement_until_all_members_report(self):
        meter = ReplicaMeter(gpus=1, start_ns=0)
        meter.start("a", at_ns=0)
        meter.start("b", at_ns=0)
        meter.finish("a", at_ns=10, tokens=5)
        assert meter.pop_settled() == {}  # b has not said what it did in (0, 10]
        meter.chunk("b", at_ns=20, tokens=10)  # rate 10/20 = 1/2 vs a's 5/10 = 1/2
        assert meter.pop_settled() == {"a": 5}
        assert meter.in_flight == 1

    def test_meter_clamps_backwards_timestamps(self):
        meter = ReplicaMeter(gpus=1, start_ns=100)
        meter.start("a", at_ns=50)  # before the window: moved to 100
        meter.chunk("a", at_ns=200, tokens=1)
        meter.chunk("a", at_ns=150, tokens=4)  # before a's last event: joins the next interval
        meter.finish("a", at_ns=300, tokens=0)
        report = meter.close(at_ns=250)  # the window ends at the latest event
        assert report.end_ns == 300
        assert report.request_gpu_ns == {"a": 200}
        assert report.idle_gpu_ns == 0

    def test_meter_close_finishes_open_requests(self):
        meter = ReplicaMeter(gpus=4, start_ns=0)
        meter.start("a", at_ns=10)
        report = meter.close(at_ns=110)
        assert report.open_at_close == ("a",)
        assert report.request_gpu_ns == {"a": 400}
        assert report.idle_gpu_ns == 40

    def test_meter_rejects_inconsistent_events(self):
        meter = ReplicaMeter(gpus=1, start_ns=0)
        meter.start("a", at_ns=0)
        with pytest.raises(InvalidInput):
            meter.start("a", at_ns=1)
        with pytest.raises(InvalidInput):
            meter.chunk("nope", at_ns=1, tokens=1)
        with pytest.raises(InvalidInput):
            meter.chunk("a", at_ns=1, tokens=-1)
        meter.finish("a", at_ns=2)
        with pytest.raises(InvalidInput):
            meter.finish("a", at_ns=3)
        meter.close(at_ns=5)
        with pytest.raises(InvalidInput):
            meter.tick(at_ns=6)
        with pytest.raises(InvalidInput):
            ReplicaMeter(gpus=0, start_ns=0)


def test_meter_events_recomputes_offline():
    events = [
        MeterEvent(START, "a", 0),
        MeterEvent(START, "b", 0),
        MeterEvent(CHUNK, "a", 100, tokens=3),
        MeterEvent(CHUNK, "b", 100, tokens=1),
        MeterEvent(FINISH, "a", 200),
        MeterEvent(FINISH, "b", 200),
    ]
    report = meter_events(events, gpus=2, start_ns=0, end_ns=300)
    assert report.request_gpu_ns == {"a": 250, "b": 150}
    assert report.idle_gpu_ns == 200
    assert _total(report) == report.capacity_gpu_ns == 600


def test_meter_cost_does_not_grow_with_concurrency():
    """64 requests in flight, one chunk each per 20 ms step: O(log n) work per event."""
    meter = ReplicaMeter(gpus=8, start_ns=0)
    in_flight = [f"r{i}" for i in range(64)]
    for offset, rid in enumerate(in_flight):
        meter.start(rid, at_ns=offset)
    at_ns, next_id, handed_out = 1_000, 64, 0
    for _ in range(200):
        at_ns += 20_000_000
        for rid in in_flight:
            at_ns += 7_000
            meter.chunk(rid, at_ns=at_ns, tokens=1 + at_ns % 5)
        meter.finish(in_flight.pop(0), at_ns=at_ns + 1)
        in_flight.append(f"r{next_id}")
        meter.start(in_flight[-1], at_ns=at_ns + 2)
        next_id += 1
        handed_out += sum(meter.pop_settled().values())
    report = meter.close(at_ns=at_ns + 10)
    assert handed_out == report.settled_gpu_ns
    assert _total(report) == report.capacity_gpu_ns
    assert report.rounding_gpu_ns < next_id
