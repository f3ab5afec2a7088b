"""The dynamic partition schedule against load curves whose answer is known in closed form.

The hand-made latency model is linear in the per-replica concurrency c, in milliseconds:
plain decoding ``20 + c``, speculation ``8 + 2c``. Speculation is faster below c = 12 (a tie
at 12 runs plain), and with a target of 50.5 ms the best choice meets it up to c = 30
(plain: 50 ms), speculation only up to c = 21. So an hour with load L on R replicas per
node needs ``n = max(1, ceil(L / (30 R)))`` nodes, and speculates iff its busiest replica,
``max(1, ceil(L / (n R)))``, holds fewer than 12 sessions.
"""

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.breakeven.rules.model import (
    SpeculationModel,
    StepTimeModel,
    baseline_tokens_per_s,
    speculative_tokens_per_s,
)
from app.domain.errors import InvalidInput
from app.domain.sessions import session_totals
from app.slurm.rules.partition_schedule import (
    HOUR_US,
    HOURS_PER_WEEK,
    WEEK_US,
    PartitionPlanInput,
    compress_hostlist,
    hour_of_week,
    load_profile,
    partition_plan_as_dict,
    plan_partition,
    power_saving_conf,
    scontrol_schedule,
    tpot_model,
)

TARGET_S = 0.0505
C_MAX = 30  # largest per-replica concurrency meeting the target
CROSSING = 12  # speculation is strictly faster below this
PRICE = 98_765_432  # micros per node-hour


def linear_tpot(concurrency: float, speculate: bool) -> float:
    return ((8 + 2 * concurrency) if speculate else (20 + concurrency)) / 1000


def nodes_named(count: int) -> list[str]:
    return [f"gpu{i:02d}" for i in range(1, count + 1)]


def expected_hour(load: float, *, nodes: int, replicas: int) -> tuple[int, bool, bool]:
    """(nodes, speculate, meets target) computed in closed form."""
    needed = max(1, math.ceil(load / (C_MAX * replicas)))
    chosen = min(needed, nodes)
    busiest = max(1, math.ceil(load / (chosen * replicas)))
    return chosen, busiest < CROSSING, busiest <= C_MAX


def week_curve() -> list[float]:
    """Quiet nights, busy weekday business hours, an evening shoulder, a peak on Wednesday
    afternoon that even eight nodes cannot serve, and a quiet weekend."""
    load: list[float] = []
    for hour in range(HOURS_PER_WEEK):
        day, clock = divmod(hour, 24)
        if day >= 5:
            value = 30.0 if 10 <= clock < 20 else 3.0  # 15 per replica by day: plain
        elif 9 <= clock < 17:
            value = 230.0 + 10 * (clock - 9)  # 230..300
        elif 17 <= clock < 22:
            value = 100.5
        else:
            value = 7.0
        load.append(value)
    load[2 * 24 + 15] = 500.0  # Wednesday 15:00: over 8 nodes x 2 replicas x 30
    load[6 * 24 + 23] = 0.0  # Sunday 23:00: nobody
    return load


def plan_input(load: Sequence[float], *, nodes: int = 8, replicas: int = 2) -> PartitionPlanInput:
    return PartitionPlanInput(
        hourly_load=load,
        nodes=nodes_named(nodes),
        replicas_per_node=replicas,
        tpot_target_s=TARGET_S,
        node_hour_micros=PRICE,
        currency="USD",
        partition="infer",
        speculation="ngram k=4",
    )


# ------------------------------------------------------------------------ the known answer


def test_every_hour_gets_the_closed_form_nodes_and_speculation() -> None:
    load = week_curve()
    plan = plan_partition(plan_input(load), tpot_s=linear_tpot)

    assert len(plan.hours) == HOURS_PER_WEEK
    for hour, value in zip(plan.hours, load, strict=True):
        nodes, speculate, meets = expected_hour(value, nodes=8, replicas=2)
        assert (hour.nodes, hour.speculate, hour.meets_target) == (nodes, speculate, meets), (
            hour.hour_of_week
        )
        busiest = max(1, math.ceil(value / (nodes * 2)))
        assert hour.per_replica_concurrency == busiest
        assert hour.tpot_s == pytest.approx(linear_tpot(busiest, speculate))
    # Spot checks of the closed form itself.
    monday_9 = plan.hours[9]  # 230 sessions: ceil(230 / 60) = 4 nodes, 29 per replica
    assert (monday_9.nodes, monday_9.per_replica_concurrency, monday_9.speculate) == (4, 29, False)
    night = plan.hours[0]  # 7 sessions: 1 node, 4 per replica: speculation is faster
    assert (night.nodes, night.per_replica_concurrency, night.speculate) == (1, 4, True)
    shoulder = plan.hours[17]  # 100.5 sessions: 2 nodes, ceil(25.125) = 26 per replica
    assert (shoulder.nodes, shoulder.per_replica_concurrency) == (2, 26)
    assert plan.unmet_hours == (2 * 24 + 15,)
    wednesday_15 = plan.hours[2 * 24 + 15]
    assert (wednesday_15.nodes, wednesday_15.per_replica_concurrency) == (8, 32)


def test_bands_merge_equal_hours_and_wrap_the_week() -> None:
    plan = plan_partition(plan_input(week_curve()), tpot_s=linear_tpot)

    # Independently: runs of equal (nodes, speculate), the last joined to the first.
    keys = [expected_hour(v, nodes=8, replicas=2)[:2] for v in week_curve()]
    starts = [h for h in range(HOURS_PER_WEEK) if keys[h] != keys[h - 1]]
    assert [band.start for band in plan.bands] == starts
    for band, start in zip(plan.bands, starts, strict=True):
        following = starts[(starts.index(start) + 1) % len(starts)]
        assert band.hours == (following - start) % HOURS_PER_WEEK
        assert (band.nodes, band.speculate) == keys[start]
    assert sum(band.hours for band in plan.bands) == HOURS_PER_WEEK
    # Friday 22:00 to Saturday 10:00 is one band wrapping nothing; Sunday 20:00 to Monday
    # 09:00 wraps the week's end.
    wrap = plan.bands[-1]
    assert (wrap.start, wrap.end, wrap.nodes, wrap.speculate) == (6 * 24 + 20, 9, 1, True)
    assert wrap.hours == 4 + 9
    assert not next(b for b in plan.bands if b.start == 2 * 24 + 15).meets_target


def test_costs_in_exact_micros() -> None:
    load = week_curve()
    plan = plan_partition(plan_input(load), tpot_s=linear_tpot)

    node_hours = sum(expected_hour(v, nodes=8, replicas=2)[0] for v in load)
    assert plan.node_hours == node_hours
    assert plan.weekly_cost_micros == node_hours * PRICE
    assert plan.static_weekly_cost_micros == 8 * 168 * PRICE
    assert plan.peak_static_weekly_cost_micros == 8 * 168 * PRICE  # the unmet hour takes all
    assert plan.saved_weekly_micros == (8 * 168 - node_hours) * PRICE
    # A month is 730 / 168 weeks, rounded half to even to the micro.
    monthly = round(Fraction(node_hours * PRICE * 730, 168))
    assert plan.monthly_cost_micros == monthly
    static_monthly = round(Fraction(8 * 168 * PRICE * 730, 168))
    assert plan.static_monthly_cost_micros == static_monthly == 8 * 730 * PRICE
    assert plan.saved_monthly_micros == static_monthly - monthly
    body = partition_plan_as_dict(plan)
    assert body["saved_weekly"] == f"{(8 * 168 - node_hours) * PRICE / 1e6:.6f}"
    assert len(body["hours"]) == 168  # type: ignore[arg-type]


def test_peak_static_partition_is_sized_for_the_busiest_hour() -> None:
    load = [40.0] * HOURS_PER_WEEK
    load[100] = 150.0  # ceil(150 / 60) = 3 nodes
    plan = plan_partition(plan_input(load), tpot_s=linear_tpot)
    assert (plan.floor_nodes, plan.peak_nodes) == (1, 3)
    assert plan.peak_static_weekly_cost_micros == 3 * 168 * PRICE
    assert plan.weekly_cost_micros == (167 + 3) * PRICE
    assert plan.saved_vs_peak_weekly_micros == (3 * 168 - 170) * PRICE
    assert plan.saved_weekly_micros == (8 * 168 - 170) * PRICE


def test_a_batch_limit_adds_nodes_the_latency_model_would_not() -> None:
    load = [50.0] * HOURS_PER_WEEK  # the model alone: 1 node, 25 per replica
    limited = replace(plan_input(load), max_concurrency_per_replica=16)
    plan = plan_partition(limited, tpot_s=linear_tpot)
    assert {hour.nodes for hour in plan.hours} == {2}  # ceil(50 / 4) = 13 <= 16


def test_speculation_is_never_on_when_it_is_not_faster() -> None:
    plan = plan_partition(plan_input([1.0] * HOURS_PER_WEEK), tpot_s=lambda c, s: 0.01)
    assert not any(hour.speculate for hour in plan.hours)
    assert len(plan.bands) == 1
    assert (plan.bands[0].start, plan.bands[0].hours) == (0, HOURS_PER_WEEK)


# ------------------------------------------------------------------------ rendering


SMALL_LOAD = [10.0] * HOURS_PER_WEEK
for _hour in range(8, 18):
    SMALL_LOAD[_hour] = 70.0  # Monday 08:00-18:00: ceil(70 / 30) = 3 nodes, 24 per replica


def small_plan() -> PartitionPlanInput:
    return PartitionPlanInput(
        hourly_load=SMALL_LOAD,
        nodes=nodes_named(4),
        replicas_per_node=1,
        tpot_target_s=TARGET_S,
        node_hour_micros=PRICE,
        currency="USD",
        partition="infer",
        speculation="ngram k=4",
    )


def test_scontrol_schedule_of_a_small_case() -> None:
    text = scontrol_schedule(plan_partition(small_plan(), tpot_s=linear_tpot))

    commands = [line for line in text.splitlines() if not line.startswith("#")]
    assert commands == [
        "0 8 * * 1 scontrol update PartitionName=infer Nodes=gpu[01-03]",
        "0 18 * * 1 scontrol update PartitionName=infer Nodes=gpu01",
    ]
    lines = text.splitlines()
    assert lines[lines.index(commands[0]) - 1] == (
        "# Mon 08:00-Mon 18:00 UTC (10 h): 3 of 4 nodes, speculation off, "
        "peak load 70 sessions, TPOT p90 <= 44.0 ms"
    )
    assert lines[lines.index(commands[1]) - 1] == (
        "# Mon 18:00-Mon 08:00 UTC (158 h): 1 of 4 nodes, speculation on (ngram k=4), "
        "peak load 10 sessions, TPOT p90 <= 28.0 ms"
    )
    assert "# Times are UTC." in text
    # 10 x 3 + 158 x 1 = 188 node-hours against 4 x 168 = 672.
    assert "18567.901216 USD scheduled (188 node-hours)" in text
    assert "saves 47802.469088 USD" in text
    assert text.endswith("\n")


def test_cron_fields_follow_the_hour_of_the_week() -> None:
    load = [10.0] * HOURS_PER_WEEK
    load[6 * 24 + 23] = 70.0  # Sunday 23:00 (cron day 0)
    load[4 * 24 + 5] = 70.0  # Friday 05:00 (cron day 5)
    text = scontrol_schedule(plan_partition(small_plan_with(load), tpot_s=linear_tpot))
    commands = [
        line.split(" scontrol")[0]
        for line in text.splitlines()
        if "scontrol update" in line and not line.startswith("#")
    ]
    # Sunday 23:00 ends the week: Monday 00:00 starts a band of its own again.
    assert commands == ["0 0 * * 1", "0 5 * * 5", "0 6 * * 5", "0 23 * * 0"]


def small_plan_with(load: Sequence[float]) -> PartitionPlanInput:
    return replace(small_plan(), hourly_load=load)


def test_unmet_hours_are_said_in_the_schedule() -> None:
    load = list(SMALL_LOAD)
    load[30] = 1000.0
    text = scontrol_schedule(plan_partition(small_plan_with(load), tpot_s=linear_tpot))
    assert "1 hour(s) of the week miss the target even on all nodes." in text
    assert "TARGET NOT MET: TPOT p90 up to 270.0 ms even on all nodes" in text
    assert "0 6 * * 2 scontrol update PartitionName=infer Nodes=gpu[01-04]" in text


def test_power_saving_keeps_the_floor_up() -> None:
    load = [70.0] * HOURS_PER_WEEK  # 3 nodes all week but at 4 hours
    for hour in range(4):
        load[hour] = 100.0  # ceil(100 / 30) = 4
    plan = plan_partition(small_plan_with(load), tpot_s=linear_tpot)
    text = power_saving_conf(
        plan,
        resume_program="/etc/slurm/resume.sh",
        suspend_program="/etc/slurm/suspend.sh",
        suspend_time_s=900,
    )
    settings = [line for line in text.splitlines() if not line.startswith("#")]
    assert settings == [
        "SuspendProgram=/etc/slurm/suspend.sh",
        "ResumeProgram=/etc/slurm/resume.sh",
        "SuspendTime=900",
        "SuspendTimeout=120",
        "ResumeTimeout=1200",
        "SuspendExcNodes=gpu[01-03]",
    ]
    assert "the 3 node(s) that even the" in text
    with pytest.raises(InvalidInput):
        power_saving_conf(plan, resume_program="", suspend_program="/x")


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["gpu01", "gpu02", "gpu03", "gpu05", "gpu07", "gpu08"], "gpu[01-03,05,07-08]"),
        (["gpu03", "gpu01", "gpu02"], "gpu[01-03]"),
        (["node9", "node10", "node11"], "node[9-11]"),
        (["gpu09", "gpu10", "gpu100"], "gpu[09-10,100]"),
        (["gpu01", "gpu1"], "gpu01,gpu1"),
        (["gpu05"], "gpu05"),
        (["login", "gpu01", "gpu02", "login"], "login,gpu[01-02]"),
        (["rack1-n01", "rack1-n02", "rack2-n01"], "rack1-n[01-02],rack2-n01"),
        ([], ""),
    ],
)
def test_compress_hostlist(names: list[str], expected: str) -> None:
    assert compress_hostlist(names) == expected


def expand_hostlist(text: str) -> set[str]:
    """Slurm's expansion of a hostlist (prefix[ranges] groups; a range pads to its start)."""
    names: set[str] = set()
    for prefix, body, plain in re.findall(r"([^,\[]*)\[([^\]]*)\]|([^,\[\]]+)", text):
        if plain:
            names.add(plain)
            continue
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            for number in range(int(lo), int(hi or lo) + 1):
                names.add(f"{prefix}{number:0{len(lo)}d}")
    return names


@given(
    st.lists(
        st.builds(
            lambda prefix, number, width: f"{prefix}{number:0{width}d}",
            st.sampled_from(["gpu", "n", "rack1-gpu"]),
            st.integers(0, 120),
            st.integers(1, 3),
        ),
        max_size=30,
    )
)
def test_hostlist_expands_back_to_the_names(names: list[str]) -> None:
    assert expand_hostlist(compress_hostlist(names)) == set(names)


def test_hostlist_rejects_names_slurm_cannot_hold() -> None:
    with pytest.raises(InvalidInput):
        compress_hostlist(["gpu[01]"])


# ------------------------------------------------------------------------ properties


loads = st.lists(st.floats(min_value=0, max_value=600, allow_nan=False), min_size=168, max_size=168)


@given(loads, st.integers(1, 10), st.integers(1, 4))
def test_plan_properties(load: list[float], nodes: int, replicas: int) -> None:
    plan = plan_partition(plan_input(load, nodes=nodes, replicas=replicas), tpot_s=linear_tpot)
    hours = plan.hours
    for a in hours:
        # The closed form holds for any curve.
        assert (a.nodes, a.speculate, a.meets_target) == expected_hour(
            a.load, nodes=nodes, replicas=replicas
        )
        # Whenever fewer than all nodes are used, the target is met, with no fewer nodes
        # meeting it.
        if a.nodes < nodes:
            assert a.meets_target
        if a.nodes > 1:
            fewer = max(1, math.ceil(a.load / ((a.nodes - 1) * replicas)))
            assert min(linear_tpot(fewer, False), linear_tpot(fewer, True)) > TARGET_S
    by_load = sorted(hours, key=lambda h: h.load)
    assert all(x.nodes <= y.nodes for x, y in itertools.pairwise(by_load))
    assert plan.weekly_cost_micros <= plan.peak_static_weekly_cost_micros
    assert plan.peak_static_weekly_cost_micros <= plan.static_weekly_cost_micros
    assert plan.monthly_cost_micros <= plan.static_monthly_cost_micros
    assert sum(band.hours for band in plan.bands) == HOURS_PER_WEEK
    for band in plan.bands:
        covered = [hours[(band.start + i) % HOURS_PER_WEEK] for i in range(band.hours)]
        assert {(h.nodes, h.speculate) for h in covered} == {(band.nodes, band.speculate)}
    if len(plan.bands) > 1:
        for left, right in zip(plan.bands, [*plan.bands[1:], plan.bands[0]], strict=True):
            assert (left.nodes, left.speculate) != (right.nodes, right.speculate)
            assert left.end == right.start


def test_bad_inputs_are_refused() -> None:
    good = plan_input([1.0] * HOURS_PER_WEEK)
    changes: tuple[dict[str, Any], ...] = (
        {"hourly_load": [1.0] * 167},
        {"hourly_load": [math.nan] * 168},
        {"nodes": []},
        {"nodes": ["gpu01", "gpu01"]},
        {"replicas_per_node": 0},
        {"tpot_target_s": 0.0},
        {"node_hour_micros": -1},
        {"partition": "a b"},
    )
    for change in changes:
        with pytest.raises(InvalidInput):
            plan_partition(replace(good, **change), tpot_s=linear_tpot)


# ------------------------------------------------------------------------ the fitted model


def test_tpot_model_uses_the_breakeven_throughputs() -> None:
    step = StepTimeModel(floor_s=0.035, per_token_s=0.0033)
    spec = SpeculationModel(k=4, mean_acceptance_length=2.6, drafter_overhead_s=0.004)
    tpot = tpot_model(step, spec, 4, tail=1.5)
    for c in (1, 4, 16, 64):
        plain = c / float(baseline_tokens_per_s(step, concurrency=c))
        fast = c / float(speculative_tokens_per_s(step, spec, concurrency=c))
        assert tpot(c, False) == pytest.approx(1.5 * plain)
        assert tpot(c, True) == pytest.approx(1.5 * fast)
    assert tpot(1, True) < tpot(1, False)  # below the breakeven
    assert tpot(64, True) > tpot(64, False)  # above it
    no_spec = tpot_model(step, None, 4)
    assert no_spec(4, True) == no_spec(4, False)
    with pytest.raises(InvalidInput):
        tpot(0, False)


# ------------------------------------------------------------------------ the load profile


MONDAY = 1_767_571_200 * 1_000_000  # 2026-01-05 00:00 UTC, a Monday


def test_hour_of_week_starts_on_monday() -> None:
    assert hour_of_week(MONDAY) == 0
    assert hour_of_week(MONDAY + 9 * HOUR_US + 1) == 9
    assert hour_of_week(MONDAY - 1) == 167
    assert hour_of_week(0) == 72  # the epoch was a Thursday


def test_load_profile_quantile_and_mean() -> None:
    minute = 60_000_000
    requests = []
    for week in range(4):
        base = MONDAY + week * WEEK_US + 10 * HOUR_US  # Monday 10:00
        # Session a: two overlapping requests 10:00-10:30 (one session, not two).
        requests += [("a", base, base + 20 * minute), ("a", base + 10 * minute, base + 30 * minute)]
        # Session b: 10:00-10:06, and in week 3 all hour long.
        requests.append(("b", base, base + (60 if week == 3 else 6) * minute))
        # Session c: 10:50-11:10, half in hour 10, half in hour 11.
        requests.append(("c", base + 50 * minute, base + 70 * minute))
    requests.append(("z", MONDAY - HOUR_US, MONDAY + 5 * minute))  # clipped to the window

    profile = load_profile(requests, start_us=MONDAY, weeks=4, quantile=0.9)

    # Hour 10, weeks 0-2: 2 sessions 10:00-10:06, 1 until 10:30, 0 until 10:50, 1 (c) to
    # 11:00. Week 3 (b all hour): 2 until 10:30, 1 until 10:50, 2 (b and c) to 11:00.
    # Over 240 minutes: level 2 for 3 x 6 + 40 = 58, level 1 for 3 x 34 + 20 = 122, level 0
    # for 3 x 20 = 60. Cumulative: 0 -> 60/240, 1 -> 182/240 = 0.758, 2 -> 1: p90 = 2.
    assert profile.quantile_load[10] == 2.0
    assert profile.quantile_load[11] == 1.0  # c: 10 min of 60 each week: 1/6 > 0.1
    assert profile.quantile_load[0] == 0.0  # z: 5 min of 240
    assert all(
        value == 0.0 for h, value in enumerate(profile.quantile_load) if h not in (0, 10, 11)
    )
    p75 = load_profile(requests, start_us=MONDAY, weeks=4, quantile=0.75)
    assert p75.quantile_load[10] == 1.0
    assert load_profile(requests, start_us=MONDAY, weeks=4, quantile=0.8).quantile_load[10] == 2
    assert load_profile(requests, start_us=MONDAY, weeks=4, quantile=0.2).quantile_load[10] == 0
    # The mean is session-seconds over the hour's length: the same union as session_totals.
    window = (MONDAY + 10 * HOUR_US, MONDAY + 11 * HOUR_US)
    seconds = 0
    for week in range(4):
        shifted = (window[0] + week * WEEK_US, window[1] + week * WEEK_US)
        seconds += sum(session_totals(requests, window=shifted).values())
    assert profile.mean_load[10] == pytest.approx(seconds / (4 * HOUR_US))
    assert profile.mean_load[10] == pytest.approx((58 * 2 + 122) / 240)


def test_load_profile_refuses_a_window_off_the_hour() -> None:
    with pytest.raises(InvalidInput):
        load_profile([], start_us=MONDAY + 1, weeks=1)
    with pytest.raises(InvalidInput):
        load_profile([], start_us=MONDAY, weeks=0)
