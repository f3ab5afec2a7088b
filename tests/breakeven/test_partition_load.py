"""Inputs of the partition schedule from the ledger: load by hour of the week from usage
records, the node-hour price from allocated rollups, the TPOT model from a stored fit."""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from app.breakeven import service
from app.breakeven.rules.model import speculative_tokens_per_s
from app.breakeven.sweep_file import read_sweep_file
from app.domain.ledger import AllocationMethod, EntryKind, RunStatus
from app.domain.periods import Month
from app.models import AllocationRun, LedgerRollup
from app.slurm.partition import (
    NoFittedSweep,
    NoNodeHourPrice,
    fitted_tpot,
    hourly_load,
    load_profile_of,
    node_hour_price,
)
from app.slurm.rules.partition_schedule import (
    PartitionPlanInput,
    plan_partition,
    scontrol_schedule,
    tpot_model,
)
from tests.breakeven.helpers import CPU_STEP, HEADER, NGRAM, sweep_rows, write_rows
from tests.factories import insert_usage, usage_record

NOW = datetime(2026, 10, 19, 10, 37, tzinfo=UTC)  # a Monday; the window is 2026-10-05 10:00
WEEK = timedelta(weeks=1)  # to 2026-10-19 10:00, two whole weeks


def _request(session_id: str, start: datetime, minutes: float, **extra: Any) -> dict[str, Any]:
    return usage_record(session_id=session_id, arrived=start, seconds=minutes * 60, **extra)


def _usage() -> list[dict[str, Any]]:
    tuesday_14 = datetime(2026, 10, 6, 14, tzinfo=UTC)
    wednesday_9 = datetime(2026, 10, 7, 9, tzinfo=UTC)
    return [
        # Tuesday 14:00 (hour 38): week 1 two sessions for 30 min, week 2 one for 60 min.
        _request("s1", tuesday_14, 30),
        _request("s2", tuesday_14, 30),
        _request("s1", tuesday_14 + WEEK, 60),
        # Monday 10:00 (hour 10): arrived before the window, runs 30 min into it.
        _request("s3", datetime(2026, 10, 5, 9, 30, tzinfo=UTC), 60),
        # After the window's end (the current hour): not counted.
        _request("s9", datetime(2026, 10, 19, 10, 5, tzinfo=UTC), 20),
        # Wednesday 09:00 (hour 57): one session, two overlapping requests, 20 min in all.
        _request("s4", wednesday_9, 10),
        _request("s4", wednesday_9 + timedelta(minutes=5), 15),
        # Thursday 08:00 (hour 80): 5 minutes of 120: under the p90.
        _request("s5", datetime(2026, 10, 8, 8, tzinfo=UTC), 5),
        # Another deployment: not counted.
        *(_request(f"o{i}", tuesday_14, 60, deployment="d2") for i in range(5)),
    ]


def test_hourly_load_is_the_p90_of_concurrent_sessions(session: Session) -> None:
    insert_usage(session.connection(), _usage())

    load = hourly_load(session, "d1", weeks=2, now=NOW)

    # Hour 38 over 120 minutes: 0 for 30, 1 for 60, 2 for 30: at or below 1 for 75%, so
    # the p90 is 2. Hour 10: 1 for 30 of 120. Hour 57: 1 for 20 of 120 (> 10%).
    expected = [0.0] * 168
    expected[38], expected[10], expected[57] = 2.0, 1.0, 1.0
    assert load == expected
    profile = load_profile_of(session, "d1", weeks=2, now=NOW)
    assert profile.mean_load[38] == pytest.approx((2 * 30 + 60) / 120)
    assert profile.mean_load[80] == pytest.approx(5 / 120)
    assert profile.mean_load[10] == pytest.approx(30 / 120)  # s9 is after the window
    assert hourly_load(session, "d1", weeks=2, now=NOW, quantile=0.7)[38] == 1.0
    assert hourly_load(session, "nobody", weeks=2, now=NOW) == [0.0] * 168


def _run(session: Session, month: str, status: RunStatus = RunStatus.current) -> int:
    start = Month.parse(month).start
    run = AllocationRun(
        month=month,
        window_start=start,
        window_end=Month.parse(month).end,
        share_idle=False,
        status=status,
        created_at=start,
        summary={},
    )
    session.add(run)
    session.flush()
    return run.id


def _rollup(
    session: Session,
    run_id: int,
    month: str,
    *,
    kind: EntryKind,
    cost: int,
    gpu_hours: float,
    deployment: str = "d1",
    currency: str = "USD",
) -> None:
    start = Month.parse(month).start
    session.add(
        LedgerRollup(
            run_id=run_id,
            booked_month=month,
            charge_period_start=start,
            charge_period_end=start + timedelta(hours=1),
            deployment=deployment,
            kind=kind,
            method=AllocationMethod.gpu_seconds,
            currency=currency,
            entries=1,
            gpu_ns=int(gpu_hours * 3600 * 10**9),
            effective_cost_micros=cost,
            billed_cost_micros=cost,
        )
    )
    session.flush()


def test_node_hour_price_is_compute_cost_over_gpu_hours(session: Session) -> None:
    september = _run(session, "2026-09")
    _rollup(session, september, "2026-09", kind=EntryKind.request, cost=30_000_000, gpu_hours=6)
    _rollup(session, september, "2026-09", kind=EntryKind.idle, cost=10_000_000, gpu_hours=2)
    # Not compute, another currency, another deployment: left out.
    _rollup(session, september, "2026-09", kind=EntryKind.shared, cost=5_000_000, gpu_hours=0)
    _rollup(
        session, september, "2026-09", kind=EntryKind.request, cost=9, gpu_hours=1, currency="EUR"
    )
    _rollup(
        session, september, "2026-09", kind=EntryKind.idle, cost=7, gpu_hours=1, deployment="d2"
    )
    # A replaced run of September is not the ledger of record.
    replaced = _run(session, "2026-09", RunStatus.replaced)
    _rollup(session, replaced, "2026-09", kind=EntryKind.request, cost=10**12, gpu_hours=1)
    august = _run(session, "2026-08")
    _rollup(session, august, "2026-08", kind=EntryKind.request, cost=10_000_000, gpu_hours=3)

    # 40 USD over 8 GPU-hours = 5 USD per GPU-hour; an 8-GPU node: 40 USD.
    assert node_hour_price(session, "d1", gpus_per_node=8, currency="USD") == 40_000_000
    # August: 10 USD / 3 GPU-hours = 3.333333(3) USD, rounded to the micro.
    august_month = Month.parse("2026-08")
    assert node_hour_price(session, "d1", gpus_per_node=1, currency="USD", month=august_month) == (
        3_333_333
    )
    with pytest.raises(NoNodeHourPrice, match="'d1' in 2026-07"):
        node_hour_price(
            session, "d1", gpus_per_node=8, currency="USD", month=Month.parse("2026-07")
        )
    with pytest.raises(NoNodeHourPrice, match="specledger allocate"):
        node_hour_price(session, "d3", gpus_per_node=8, currency="USD")


def _store_sweep(session: Session, tmp_path: Path, deployment: str) -> int:
    rows = sweep_rows()
    for row in rows:
        row["tpot_p90_s"] = 1.5 * float(row["tpot_p50_s"])  # type: ignore[arg-type]
    path = write_rows(tmp_path / f"{deployment}.csv", rows, [*HEADER, "tpot_p90_s"])
    sweep_id, outcome, why = service.store_measured_sweep(
        session,
        name=path.name,
        rows=read_sweep_file(path).rows,
        settings={},
        deployment=deployment,
        bootstrap_samples=0,
    )
    assert outcome is not None, why
    return sweep_id


def test_fitted_tpot_comes_from_the_deployments_newest_fit(
    session: Session, tmp_path: Path
) -> None:
    with pytest.raises(NoFittedSweep, match="breakeven sweep --deployment d1"):
        fitted_tpot(session, "d1")
    sweep_id = _store_sweep(session, tmp_path, "d1")

    tpot = fitted_tpot(session, "d1")

    assert (tpot.sweep_id, tpot.speculation) == (sweep_id, "ngram k=4")
    assert tpot.tail == pytest.approx(1.5)
    truth = tpot_model(CPU_STEP, NGRAM, 4, tail=1.5)
    for c in (1, 4, 16, 32):
        assert tpot(c, False) == pytest.approx(truth(c, False), rel=1e-3)
        assert tpot(c, True) == pytest.approx(truth(c, True), rel=1e-3)
        assert tpot(c, True) == pytest.approx(
            1.5 * c / float(speculative_tokens_per_s(CPU_STEP, NGRAM, concurrency=c)), rel=1e-3
        )
    with pytest.raises(NoFittedSweep):
        fitted_tpot(session, "d2")


def test_the_three_inputs_plan_a_partition(session: Session, tmp_path: Path) -> None:
    insert_usage(session.connection(), _usage())
    run = _run(session, "2026-09")
    _rollup(session, run, "2026-09", kind=EntryKind.request, cost=40_000_000, gpu_hours=8)
    _store_sweep(session, tmp_path, "d1")
    tpot = fitted_tpot(session, "d1")

    plan = plan_partition(
        PartitionPlanInput(
            hourly_load=[x * 40 for x in hourly_load(session, "d1", weeks=2, now=NOW)],
            nodes=["gpu01", "gpu02", "gpu03"],
            replicas_per_node=2,
            # Plain decoding at 40 sessions per replica (p90), with room to spare.
            tpot_target_s=tpot(40, False) * 1.01,
            node_hour_micros=node_hour_price(session, "d1", gpus_per_node=8, currency="USD"),
            currency="USD",
            partition="infer",
            speculation=tpot.speculation,
        ),
        tpot_s=tpot,
    )

    # Hour 38 has 80 sessions: one node (2 x 40). Quiet hours speculate (one session per
    # replica is below the breakeven); 40 per replica is above it.
    assert plan.hours[38].nodes == 1
    assert plan.hours[38].per_replica_concurrency == 40
    assert not plan.hours[38].speculate
    assert plan.hours[0].speculate
    assert plan.weekly_cost_micros == 168 * 40_000_000
    assert plan.saved_weekly_micros == 2 * 168 * 40_000_000
    assert "speculation on (ngram k=4)" in scontrol_schedule(plan)
