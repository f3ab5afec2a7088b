"""The Ray Serve advice against a load curve whose answer is known in closed form.

The latency model is the partition schedule tests' (tests/slurm/test_partition_schedule.py):
plain decoding ``20 + c`` ms, speculation ``8 + 2c`` ms per session on a replica holding c.
With a target of 50.5 ms a replica meets it up to c* = 30 (plain: 50 ms); speculation is
strictly faster below c = 12. So target_ongoing_requests = 30, max_ongoing_requests =
max(31, ceil(1.25 x 30)) = 38, and an hour with p90 load L wants ``max(1, ceil(L / 30))``
replicas, two per 8-GPU node (4 GPUs a replica), at most 8 nodes.
"""

import math
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.autoscaling.rules import (
    RayAdviceInput,
    advise_ray,
    default_tpot_target,
    ray_advice_as_dict,
    serve_config,
    speculation_bands,
)
from app.breakeven.rules.model import ScheduleBand
from app.domain.errors import InvalidInput
from app.slurm.rules.partition_schedule import HOURS_PER_WEEK
from tests.slurm.test_partition_schedule import linear_tpot, week_curve

TARGET_S = 0.0505
C_STAR = 30
CROSSING = 12
PRICE = 32_772_000  # micros per node-hour (p4d.24xlarge on demand, 32.772 USD)
LAG_S = 600 + 60  # downscale_delay_s + idleTimeoutSeconds


def advice_input(load: Sequence[float], **changes: object) -> RayAdviceInput:
    inp = RayAdviceInput(
        hourly_load=load,
        tpot_target_s=TARGET_S,
        gpus_per_node=8,
        gpus_per_replica=4,
        max_nodes=8,
        node_hour_micros=PRICE,
        currency="USD",
        deployment="llama",
        application="chat",
        import_path="serve_app:app",
        k=4,
        speculation="ngram k=4",
    )
    return replace(inp, **changes)  # type: ignore[arg-type]


def expected_hour(load: float) -> tuple[int, int, int, bool, bool]:
    """(replicas, nodes, busiest, speculate, meets) in closed form."""
    wanted = max(1, math.ceil(load / C_STAR))
    replicas = min(wanted, 16)
    busiest = max(1, math.ceil(load / replicas))
    return replicas, math.ceil(replicas / 2), busiest, busiest < CROSSING, wanted <= 16


def expected_node_seconds(nodes: Sequence[int], lag_s: int) -> int:
    total = 0
    for hour, count in enumerate(nodes):
        before = nodes[hour - 1]  # hour 0 follows hour 167: the week repeats
        total += count * 3600 + max(0, before - count) * min(lag_s, 3600)
    return total


def test_the_advice_is_the_closed_form() -> None:
    load = week_curve()
    advice = advise_ray(advice_input(load), tpot_s=linear_tpot)

    assert advice.replicas_per_node == 2
    assert advice.target_ongoing_requests == C_STAR
    assert advice.max_ongoing_requests == 38
    assert advice.speculation_bands == (ScheduleBand(1, 11, 4), ScheduleBand(12, 38, 0))
    for hour, replicas, value in zip(advice.hours, advice.replicas, load, strict=True):
        count, nodes, busiest, speculate, meets = expected_hour(value)
        assert (replicas, hour.nodes, hour.per_replica_concurrency) == (count, nodes, busiest)
        assert (hour.speculate, hour.meets_target) == (speculate, meets), hour.hour_of_week
        assert hour.tpot_s == pytest.approx(linear_tpot(busiest, speculate))
    # Nights: 7 sessions on one replica; Mon 16:00: 300 sessions, 10 replicas, 5 nodes;
    # Wed 15:00: 500 sessions want 17 replicas, 16 fit on 8 nodes: flagged.
    assert (advice.replicas[0], advice.hours[0].speculate) == (1, True)
    assert (advice.replicas[16], advice.hours[16].nodes) == (10, 5)
    assert advice.unmet_hours == (2 * 24 + 15,)
    assert (advice.min_replicas, advice.max_replicas) == (1, 16)
    assert (advice.floor_nodes, advice.peak_nodes) == (1, 8)

    node_counts = [expected_hour(x)[1] for x in load]
    seconds = expected_node_seconds(node_counts, LAG_S)
    assert advice.node_seconds == seconds
    assert advice.weekly_cost_micros == round(Fraction(seconds * PRICE, 3600))
    assert advice.static_weekly_cost_micros == 8 * 168 * PRICE
    assert advice.monthly_cost_micros == round(Fraction(advice.weekly_cost_micros * 730, 168))
    assert advice.saved_monthly_micros == (
        advice.static_monthly_cost_micros - advice.monthly_cost_micros
    )


def test_the_serve_config_carries_the_advice() -> None:
    advice = advise_ray(advice_input(week_curve()), tpot_s=linear_tpot)
    applications: Any = serve_config(advice)["applications"]
    (application,) = applications
    (deployment,) = application["deployments"]
    assert (application["name"], application["import_path"]) == ("chat", "serve_app:app")
    assert deployment["name"] == "llama"
    assert deployment["max_ongoing_requests"] == 38
    assert deployment["ray_actor_options"] == {"num_gpus": 4}
    assert deployment["autoscaling_config"] == {
        "min_replicas": 1,
        "initial_replicas": 1,
        "max_replicas": 16,
        "target_ongoing_requests": 30,
        "upscale_delay_s": 30,
        "downscale_delay_s": 600,
    }
    as_json = ray_advice_as_dict(advice)
    assert as_json["speculation_bands"] == [[1, 11, 4], [12, 38, 0]]
    assert as_json["worker_group"] == {"minReplicas": 1, "maxReplicas": 8, "max_nodes": 8}


def test_max_ongoing_requests_stays_within_the_engines_batch() -> None:
    advice = advise_ray(
        advice_input(week_curve(), max_concurrency_per_replica=32), tpot_s=linear_tpot
    )
    assert (advice.target_ongoing_requests, advice.max_ongoing_requests) == (30, 32)
    tight = advise_ray(
        advice_input(week_curve(), max_concurrency_per_replica=20), tpot_s=linear_tpot
    )
    assert (tight.target_ongoing_requests, tight.max_ongoing_requests) == (20, 20)


def test_a_deployment_that_does_not_speculate_gets_no_speculation() -> None:
    advice = advise_ray(advice_input(week_curve(), k=0), tpot_s=linear_tpot)
    assert advice.speculation_bands == (ScheduleBand(1, 38, 0),)
    assert not any(hour.speculate for hour in advice.hours)


def test_the_default_target_is_plain_tpot_where_speculation_stops_paying() -> None:
    # Speculation is strictly faster up to c = 11: plain decoding there takes 31 ms.
    assert default_tpot_target(linear_tpot) == pytest.approx(0.031)
    with pytest.raises(InvalidInput, match="give a TPOT p90 target"):
        default_tpot_target(lambda c, s: 0.02 + c / 1000)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hourly_load": [1.0] * 167}, "needs 168 values"),
        ({"hourly_load": [1.0] * 167 + [math.nan]}, "hour 167"),
        ({"tpot_target_s": 0.0}, "tpot_target_s"),
        ({"tpot_target_s": 0.005}, "not met even at one session"),
        ({"gpus_per_replica": 16}, "does not fit on a node of 8 GPUs"),
        ({"max_nodes": 0}, "max_nodes must be >= 1"),
        ({"node_hour_micros": -1}, "node_hour_micros"),
        ({"downscale_delay_s": -1}, "downscale_delay_s"),
        ({"deployment": "my model"}, "deployment must be a non-empty name"),
        ({"route_prefix": "chat"}, "route_prefix"),
    ],
)
def test_bad_input_is_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        advise_ray(advice_input(week_curve(), **changes), tpot_s=linear_tpot)


def test_speculation_bands_are_contiguous() -> None:
    assert speculation_bands(linear_tpot, k=3, max_batch_size=5) == (ScheduleBand(1, 5, 3),)
    with pytest.raises(InvalidInput):
        speculation_bands(linear_tpot, k=3, max_batch_size=0)


# ------------------------------------------------------------------------ properties

_loads = st.lists(
    st.floats(min_value=0, max_value=800, allow_nan=False), min_size=168, max_size=168
)


@given(load=_loads, extra=_loads)
def test_more_load_never_gets_fewer_replicas_or_a_lower_cost(
    load: list[float], extra: list[float]
) -> None:
    more = [a + b for a, b in zip(load, extra, strict=True)]
    low = advise_ray(advice_input(load), tpot_s=linear_tpot)
    high = advise_ray(advice_input(more), tpot_s=linear_tpot)
    assert all(a <= b for a, b in zip(low.replicas, high.replicas, strict=True))
    assert low.weekly_cost_micros <= high.weekly_cost_micros
    assert (low.min_replicas, low.max_replicas) <= (high.min_replicas, high.max_replicas)


@given(
    load=_loads,
    lag=st.integers(min_value=0, max_value=10_000),
    gpus=st.sampled_from([1, 2, 4, 8]),
)
def test_bounds_are_ordered_and_the_advice_never_costs_more_than_a_static_fleet(
    load: list[float], lag: int, gpus: int
) -> None:
    advice = advise_ray(
        advice_input(load, downscale_delay_s=lag, gpus_per_replica=gpus), tpot_s=linear_tpot
    )
    assert 1 <= advice.min_replicas <= advice.max_replicas
    assert advice.max_replicas <= 8 * advice.replicas_per_node
    assert 1 <= advice.floor_nodes <= advice.peak_nodes <= 8
    assert advice.target_ongoing_requests <= advice.max_ongoing_requests
    assert advice.weekly_cost_micros <= advice.peak_static_weekly_cost_micros
    assert advice.peak_static_weekly_cost_micros <= advice.static_weekly_cost_micros
    assert advice.monthly_cost_micros <= advice.peak_static_monthly_cost_micros
    assert len(advice.hours) == HOURS_PER_WEEK
