"""Slurm accounting into the ledger, from sacct output written as sacct prints it (the real
cluster's tests are in test_ingest_real.py): idempotent, a running job read again when it
has ended, a requeued job counted once per run, bad lines rejected whole, and a month of a
derived node bill reconciling to the micro with each job's share."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.domain.periods import Month
from app.domain.windows import TimeWindow
from app.models import BillingRow, LedgerEntry, SlurmJob, UsageRecord
from app.slurm.cluster import register_cluster
from app.slurm.ingest import InvalidSacct, ingest_sacct_text
from app.slurm.report import slurm_usage
from app.slurm.rules.cluster_cost import cost_model_from_dict
from app.slurm.rules.sacct import SACCT_FIELDS
from ingest.cluster_bill import write_derived_bill
from ingest.service import IngestOptions, ingest_billing
from tests.ingest.helpers import focus_row, write_focus_csv

OCTOBER = Month(2026, 10)
NOW = datetime(2026, 10, 2, 12, tzinfo=UTC)
WINDOW = (OCTOBER.start, NOW)
HEADER = "|".join(SACCT_FIELDS)


def line(
    job: str,
    account: str,
    state: str,
    start: str,
    end: str,
    elapsed: int,
    tres: str,
    *,
    partition: str = "debug",
    name: str = "wrap",
    nodes: str = "localhost",
) -> str:
    raw = job.split(".")[0].replace("_", "").replace("+", "")
    return "|".join(
        [
            "specledger",
            job,
            raw,
            name,
            account,
            "root",
            partition,
            "normal",
            state,
            start,
            start,
            end,
            str(elapsed),
            tres,
            "",
            nodes,
        ]
    )


JOBS = [
    # 2 GPUs for an hour, search; with its batch step (never charged)
    line(
        "2",
        "search",
        "COMPLETED",
        "2026-10-01T00:00:00",
        "2026-10-01T01:00:00",
        3600,
        "billing=1,cpu=1,gres/gpu=2,node=1",
    ),
    line(
        "2.batch",
        "",
        "COMPLETED",
        "2026-10-01T00:00:00",
        "2026-10-01T01:00:00",
        3600,
        "cpu=1,gres/gpu=2,mem=0,node=1",
        name="batch",
    ),
    # an array of 3 tasks, ads, 1 GPU for 30 minutes each, back to back
    *(
        line(
            f"3_{i}",
            "ads",
            "COMPLETED",
            f"2026-10-01T0{1 + i}:00:00",
            f"2026-10-01T0{1 + i}:30:00",
            1800,
            "billing=1,cpu=1,gres/gpu=1,node=1",
        )
        for i in range(3)
    ),
    # cancelled after 10 minutes, 1 GPU
    line(
        "6",
        "ads",
        "CANCELLED by 0",
        "2026-10-01T05:00:00",
        "2026-10-01T05:10:00",
        600,
        "billing=1,cpu=1,gres/gpu=1,node=1",
    ),
    # no GPU: recorded, nothing to charge
    line(
        "7",
        "search",
        "COMPLETED",
        "2026-10-01T06:00:00",
        "2026-10-01T06:05:00",
        300,
        "billing=1,cpu=1,node=1",
    ),
]
RUNNING = line(
    "8",
    "search",
    "RUNNING",
    "2026-10-02T11:00:00",
    "Unknown",
    1800,
    "billing=1,cpu=1,gres/gpu=2,node=1",
)
ENDED = line(
    "8",
    "search",
    "COMPLETED",
    "2026-10-02T11:00:00",
    "2026-10-02T12:00:00",
    3600,
    "billing=1,cpu=1,gres/gpu=2,node=1",
)


def _ingest(session: Session, *lines: str, now: datetime = NOW) -> dict[str, object]:
    text = "\n".join([HEADER, *lines]) + "\n"
    report = ingest_sacct_text(
        session, text, source="sacct.txt", cluster="specledger", window=WINDOW, now=now
    )
    return report.to_json()


def _gpu_ns(session: Session) -> dict[str, int]:
    rows = session.execute(select(UsageRecord.session_id, UsageRecord.gpu_ns)).all()
    return dict(rows)


def test_jobs_become_usage_once_and_a_running_job_when_it_ends(session: Session) -> None:
    first = _ingest(session, *JOBS, RUNNING)
    assert (first["jobs_new"], first["running"], first["usage_records"]) == (8, 1, 5)
    assert first["gpu_seconds"] == 2 * 3600 + 3 * 1800 + 600
    # The running job accrues from its start (11:00) to the end of the window read (12:00).
    assert (first["accrued"], first["accrued_gpu_seconds"]) == (1, 2 * 3600)
    assert _gpu_ns(session) == {
        "specledger:2": 2 * 3600 * 10**9,
        "specledger:3_0": 1800 * 10**9,
        "specledger:3_1": 1800 * 10**9,
        "specledger:3_2": 1800 * 10**9,
        "specledger:6": 600 * 10**9,
        "specledger:8": 2 * 3600 * 10**9,
    }
    again = _ingest(session, *JOBS, RUNNING)
    assert (again["jobs_new"], again["jobs_updated"], again["usage_records"]) == (0, 0, 0)
    ended = _ingest(session, *JOBS, ENDED, now=NOW + timedelta(hours=1))
    assert (ended["jobs_new"], ended["jobs_updated"], ended["usage_records"]) == (0, 1, 1)
    assert _gpu_ns(session)["specledger:8"] == 2 * 3600 * 10**9
    record = session.scalars(
        select(UsageRecord).where(UsageRecord.session_id == "specledger:6")
    ).one()
    assert (record.team, record.status, record.deployment, record.replica) == (
        "ads",
        "cancelled",
        "slurm-specledger",
        "localhost",
    )
    assert record.tags["slurm.partition"] == "debug"
    steps = session.scalar(select(func.count()).select_from(SlurmJob).where(SlurmJob.step != ""))
    assert steps == 1


def test_a_requeued_job_counts_once_per_run(session: Session) -> None:
    runs = [
        line(
            "9",
            "search",
            "REQUEUED",
            "2026-10-01T08:00:00",
            "2026-10-01T08:20:00",
            1200,
            "billing=1,cpu=1,gres/gpu=1,node=1",
        ),
        line(
            "9",
            "search",
            "COMPLETED",
            "2026-10-01T09:00:00",
            "2026-10-01T09:30:00",
            1800,
            "billing=1,cpu=1,gres/gpu=1,node=1",
        ),
    ]
    assert _ingest(session, *runs)["usage_records"] == 2
    assert _ingest(session, *runs)["usage_records"] == 0
    total = session.scalar(select(func.sum(UsageRecord.gpu_ns)))
    assert total == (1200 + 1800) * 10**9


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            line(
                "10",
                "ads",
                "COMPLETED",
                "2026-10-01T00:00:00",
                "2026-10-01T01:00:00",
                3600,
                "cpu=1,gres/gpu=two",
            ),
            "sacct.txt, line 3, field AllocTRES",
        ),
        (
            line(
                "11",
                "ads",
                "COMPLETED",
                "2026-10-01T00:00:00",
                "yesterday",
                3600,
                "cpu=1,gres/gpu=1",
            ),
            "sacct.txt, line 3, field End",
        ),
    ],
)
def test_a_bad_line_rejects_the_output_and_changes_nothing(
    session: Session, bad: str, message: str
) -> None:
    with pytest.raises(InvalidSacct, match=message):
        _ingest(session, JOBS[0], bad)
    assert session.scalar(select(func.count()).select_from(SlurmJob)) == 0
    assert session.scalar(select(func.count()).select_from(UsageRecord)) == 0


MODEL = {
    "cluster": "specledger",
    "currency": "USD",
    "classes": {
        "fake": {
            "gpus": 2,
            "purchase_price": "24000.00",
            "amortization_years": 2,
            "in_service": "2026-01-01",
            "power_kw": "1.5",
            "pue": "1.2",
            "price_per_kwh": "0.10",
            "colocation_per_month": "300.00",
            "fabric_per_month": "50.00",
            "support_per_year": "1200.00",
            "staff_per_month": "100.00",
        }
    },
    "nodes": {"localhost": {"class": "fake"}},
}


def test_a_month_of_jobs_reconciles_to_the_derived_bill_to_the_micro(
    session: Session, tmp_path: Path
) -> None:
    model = cost_model_from_dict(MODEL, source="cluster.toml")
    register_cluster(session, model)
    bill = tmp_path / "derived.csv"
    write_derived_bill(model, OCTOBER.start, OCTOBER.end, bill)
    ingest_billing(session.connection(), str(bill), IngestOptions(source="cluster-bill"))
    _ingest(session, *JOBS, ENDED)
    run_allocation(
        session, Window.of_month(OCTOBER), share_idle=False, tag_key="specledger-deployment"
    )
    billed = session.scalar(select(func.sum(BillingRow.effective_cost_micros)))
    entries = session.execute(
        select(
            LedgerEntry.team, LedgerEntry.kind, func.sum(LedgerEntry.effective_cost_micros)
        ).group_by(LedgerEntry.team, LedgerEntry.kind)
    ).all()
    assert sum(amount for _, _, amount in entries) == billed
    # Hour 0: job 2 holds both GPUs for the whole hour: the node-hour is all search's.
    hour0 = session.scalar(
        select(func.sum(BillingRow.effective_cost_micros)).where(
            BillingRow.charge_period_start == OCTOBER.start
        )
    )
    job2 = session.scalar(
        select(func.sum(LedgerEntry.effective_cost_micros)).where(
            LedgerEntry.event_id == "slurm:specledger:2:" + str(int(OCTOBER.start.timestamp()))
        )
    )
    assert job2 == hour0
    by_team = {(team, str(kind)): amount for team, kind, amount in entries}
    assert by_team[("search", "request")] > 0
    assert by_team[("ads", "request")] > 0
    usage = slurm_usage(session, TimeWindow(OCTOBER.start, OCTOBER.end))
    assert sum(line.cost_micros for line in usage) == billed
    hours = {(x.account, x.partition): (x.jobs, x.gpu_seconds) for x in usage}
    assert hours[("search", "debug")] == (2, 2 * 3600 + 2 * 3600)
    assert hours[("ads", "debug")] == (4, 3 * 1800 + 600)
    assert hours[("(idle)", "(idle)")] == (0, 0)
    ads = slurm_usage(session, TimeWindow(OCTOBER.start, OCTOBER.end), team="ads")
    assert {x.account for x in ads} == {"ads"}
    assert sum(x.cost_micros for x in ads) == by_team[("ads", "request")]


def test_a_cloud_cluster_joins_its_ec2_rows_by_resource_id(
    session: Session, tmp_path: Path
) -> None:
    """ParallelCluster: the node names its EC2 instance; the cloud bill's rows for that
    instance join the node, and its jobs share them as on-prem jobs share a derived bill."""
    cloud = {
        "cluster": "specledger",
        "currency": "USD",
        "nodes": {"localhost": {"resource_id": "i-0abc1234def567890", "gpus": 2}},
    }
    model = cost_model_from_dict(cloud, source="cluster.toml")
    register_cluster(session, model)
    rows = [
        focus_row(hour=h, cost="9.00", ResourceId="i-0abc1234def567890", Tags="{}")
        for h in range(2)
    ]
    path = write_focus_csv(tmp_path / "aws.csv", rows)
    ingest_billing(session.connection(), str(path), IngestOptions(source="aws"))
    _ingest(session, *JOBS[:2])  # job 2: both GPUs for hour 0 (and its batch step)
    run_allocation(
        session, Window.of_month(OCTOBER), share_idle=False, tag_key="specledger-deployment"
    )
    shares = dict(
        session.execute(
            select(LedgerEntry.team, func.sum(LedgerEntry.effective_cost_micros)).group_by(
                LedgerEntry.team
            )
        ).all()
    )
    assert shares == {"search": 9_000_000, None: 9_000_000}  # hour 1 is the node's idle
