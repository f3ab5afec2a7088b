import itertools
import random
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.gpu_seconds import ReplicaMeter
from app.domain.usage import ReplicaIdleEvent, UsageEvent
from serving.collector.attribution import attribute_span
from serving.collector.spans import CallerContext, Phase, RequestSpan
from serving.collector.timeline import ReplicaInfo, ReplicaTimeline, at

T0 = 1_780_000_000_000_000_000
NOBODY = attribute_span(CallerContext(), trace_id="0" * 32, grant=None, trust_callers=False)[0]


def span(n: int, start: int, ttft: int | None, e2e: int, prompt: int, completion: int):
    first = None if ttft is None else start + min(ttft, e2e)
    return RequestSpan(
        key=f"{n:048x}",
        trace_id=f"{n:032x}",
        replica="r",
        request_id=f"cmpl-{n}",
        arrived_ns=start,
        first_token_ns=first,
        finished_ns=start + e2e,
        prompt_tokens=prompt,
        completion_tokens=completion,
        queue_ns=None,
        prefill_ns=None,
        decode_ns=None,
        model=None,
        caller=CallerContext(),
    )


spans_strategy = st.lists(
    st.builds(
        lambda start, ttft, e2e, prompt, completion: (start, ttft, e2e, prompt, completion),
        st.integers(0, 5_000_000_000),
        st.none() | st.integers(0, 2_000_000_000),
        st.integers(0, 3_000_000_000),
        st.integers(0, 4000),
        st.integers(0, 500),
    ),
    min_size=1,
    max_size=25,
)


def wall_ns(idle: list[ReplicaIdleEvent]) -> int:
    total_us = sum((r.end_at - r.start_at) // timedelta(microseconds=1) for r in idle)
    return total_us * 1000


@settings(max_examples=150, deadline=None)
@given(spans_strategy, st.randoms(use_true_random=False), st.integers(1, 8),
       st.integers(0, 4_000_000_000))  # fmt: skip
def test_gpu_ns_conserved_for_any_overlapping_spans_in_any_arrival_order(
    items, rng: random.Random, gpus, lateness
):
    timeline = ReplicaTimeline(
        info=ReplicaInfo(deployment="d", replica="r", gpus=gpus),
        lateness_ns=lateness,
        idle_window_ns=1_000_000_000,
    )
    spans = [span(n, T0 + s, t, e, p, c) for n, (s, t, e, p, c) in enumerate(items)]
    order = list(spans)
    rng.shuffle(order)
    records = []
    now = T0
    for item in order:  # spans arrive after their requests end, the clock moving on
        now = max(now, item.finished_ns + rng.randint(0, 500_000_000))
        timeline.add(item, NOBODY)
        records += timeline.advance(now_ns=now)
    records += timeline.close()
    usage = [r for r in records if isinstance(r, UsageEvent)]
    idle = [r for r in records if isinstance(r, ReplicaIdleEvent)]
    assert sorted(r.event_id for r in usage) == sorted(s.key for s in spans)
    windows = sorted((r.start_at, r.end_at) for r in idle)
    for (_, end), (start, _) in itertools.pairwise(windows):
        assert end == start  # windows tile the metered time
    assert sum(r.gpu_ns for r in usage) + sum(r.gpu_ns for r in idle) == gpus * wall_ns(idle)
    assert all(r.gpu_ns >= 0 for r in usage)
    stats = timeline.stats
    assert stats.request_gpu_ns == sum(r.gpu_ns for r in usage)
    assert stats.metered_wall_ns * gpus == stats.request_gpu_ns + stats.idle_gpu_ns
    assert not timeline.busy


@settings(max_examples=100, deadline=None)
@given(spans_strategy, st.randoms(use_true_random=False))
def test_split_equals_a_meter_fed_the_same_steps_in_time_order(items, rng: random.Random):
    """With every span in before the watermark passes it, the collector's split is exactly
    the proxy's meter fed the requests' events live."""
    spans = [span(n, T0 + s, t, e, p, c) for n, (s, t, e, p, c) in enumerate(items)]
    timeline = ReplicaTimeline(
        info=ReplicaInfo(deployment="d", replica="r"), lateness_ns=10**12, idle_window_ns=10**12
    )
    order = list(spans)
    rng.shuffle(order)
    for item in order:
        timeline.add(item, NOBODY)
    records = timeline.close()
    got = {r.event_id: r.gpu_ns for r in records if isinstance(r, UsageEvent)}
    assert got == time_ordered_split(spans)


def time_ordered_split(spans: list[RequestSpan]) -> dict[str, int]:
    """The GPU-ns of a meter fed every span's steps in time order, as the proxy's is fed
    the requests' events live."""
    steps = sorted(
        (step.at_ns, step.phase, n, step.tokens)
        for n, item in enumerate(spans)
        for step in item.meter_steps()
    )
    meter = ReplicaMeter(gpus=1, start_ns=min(s.arrived_ns for s in spans) // 1000 * 1000)
    for at_ns, phase, n, tokens in steps:
        key = spans[n].key
        if phase == Phase.start:
            meter.start(key, at_ns=at_ns)
        elif phase == Phase.chunk:
            meter.chunk(key, at_ns=at_ns, tokens=tokens)
        else:
            meter.finish(key, at_ns=at_ns, tokens=tokens)
    return meter.pop_settled()


@settings(max_examples=150, deadline=None)
@given(spans_strategy, st.data())
def test_spans_within_the_allowance_are_never_late_and_split_as_in_time_order(items, data):
    """Whatever the engine's speed and the exporter's delays: when every span reaches the
    collector within ``lateness`` of its request's arrival, with ticks at any instants
    between, no span is late, GPU time is conserved exactly and each request's share is
    exactly the time-ordered meter's."""
    spans = [span(n, T0 + s, t, e, p, c) for n, (s, t, e, p, c) in enumerate(items)]
    longest = max(s.finished_ns - s.arrived_ns for s in spans)
    lateness = longest + data.draw(st.integers(0, 2_000_000_000), label="export delay bound")
    deliveries = sorted(
        (s.arrived_ns + data.draw(st.integers(s.finished_ns - s.arrived_ns, lateness)), n)
        for n, s in enumerate(spans)
    )
    timeline = ReplicaTimeline(
        info=ReplicaInfo(deployment="d", replica="r"), lateness_ns=lateness, idle_window_ns=10**15
    )
    records = []
    now = T0
    for delivered_ns, n in deliveries:
        between = data.draw(st.lists(st.integers(now, delivered_ns), max_size=3), label="ticks")
        for tick_ns in sorted(between):
            records += timeline.advance(now_ns=tick_ns)
        timeline.add(spans[n], NOBODY)
        records += timeline.advance(now_ns=delivered_ns)
        now = delivered_ns
    records += timeline.close()

    assert timeline.stats.late_spans == 0
    usage = {r.event_id: r.gpu_ns for r in records if isinstance(r, UsageEvent)}
    idle = [r for r in records if isinstance(r, ReplicaIdleEvent)]
    assert sum(usage.values()) + sum(r.gpu_ns for r in idle) == wall_ns(idle)
    expected = time_ordered_split(spans)
    assert usage.keys() == expected.keys()
    assert usage == expected


def test_a_span_past_the_allowance_is_late():
    """The bound above is tight: one nanosecond more and the span's start had been passed."""
    item = span(1, T0, None, 1000, 1, 1)
    timeline = ReplicaTimeline(
        info=ReplicaInfo(deployment="d", replica="r"), lateness_ns=5000, idle_window_ns=10**15
    )
    timeline.add(span(2, T0 - 10, None, 10, 1, 1), NOBODY)  # opens the meter
    timeline.advance(now_ns=T0 + 5001)
    timeline.add(item, NOBODY)
    assert timeline.stats.late_spans == 1


def test_duplicate_span_is_metered_once():
    timeline = ReplicaTimeline(
        info=ReplicaInfo(deployment="d", replica="r"), lateness_ns=0, idle_window_ns=10**12
    )
    item = span(1, T0, 10, 100, 5, 5)
    assert timeline.add(item, NOBODY)
    assert not timeline.add(item, NOBODY)
    records = timeline.close()
    assert [r.gpu_ns for r in records if isinstance(r, UsageEvent)] == [100]
    assert timeline.stats.duplicates == 1


def test_two_identical_overlapping_requests_share_evenly_and_idle_is_kept():
    timeline = ReplicaTimeline(
        info=ReplicaInfo(deployment="d", replica="r", gpus=2), lateness_ns=0, idle_window_ns=500
    )
    timeline.add(span(1, T0, 1000, 4000, 8, 8), NOBODY)
    timeline.add(span(2, T0, 1000, 4000, 8, 8), NOBODY)
    records = timeline.advance(now_ns=T0 + 10_000)
    usage = sorted(r.gpu_ns for r in records if isinstance(r, UsageEvent))
    (idle,) = [r for r in records if isinstance(r, ReplicaIdleEvent)]
    assert usage == [4000, 4000]  # 2 GPUs x 4 us, halved
    assert idle.start_at == at(T0)
    assert idle.end_at == at(T0 + 10_000)
    assert idle.gpu_ns == 2 * 10_000 - 8000


def test_a_late_span_is_counted_and_still_conserved():
    timeline = ReplicaTimeline(
        info=ReplicaInfo(deployment="d", replica="r"), lateness_ns=0, idle_window_ns=10**12
    )
    timeline.add(span(1, T0 + 5000, None, 1000, 1, 1), NOBODY)
    records = timeline.advance(now_ns=T0 + 7000)
    timeline.add(span(2, T0, None, 9000, 1, 1), NOBODY)  # began before the frontier
    records += timeline.close()
    assert timeline.stats.late_spans == 1
    usage = [r for r in records if isinstance(r, UsageEvent)]
    idle = [r for r in records if isinstance(r, ReplicaIdleEvent)]
    assert sum(r.gpu_ns for r in usage) + sum(r.gpu_ns for r in idle) == wall_ns(idle)
