"""Accounting from the real single-node Slurm (scripts/ensure_slurm.sh): GPU jobs of two
accounts, a job array, a cancelled job and a job still running at ingest time, read with
``sacct`` into the ledger. GPU-seconds are checked against the GPUs and ElapsedRaw that
Slurm itself reports, a second read changes nothing, the running job accrues up to each read
and is trued up once it has ended, and the month reconciles to the cluster's derived bill to the micro."""

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.domain.periods import Month
from app.models import BillingRow, LedgerEntry, SlurmJob, UsageRecord
from app.slurm.cluster import register_cluster
from app.slurm.ingest import SacctCommand, ingest_slurm
from app.slurm.rules.cluster_cost import cost_model_from_dict
from ingest.cluster_bill import write_derived_bill
from ingest.service import IngestOptions, ingest_billing
from tests.slurm.cluster import SlurmCluster, parse_tres
from tests.slurm.test_ingest_sacct import MODEL

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]
CLUSTER = "specledger"


@pytest.fixture(scope="module")
def finished(slurm: SlurmCluster) -> dict[str, str]:
    """Jobs that have ended: search with both GPUs, an ads array of three 1-GPU tasks, and an
    ads job cancelled while it ran (job ids by role; the array's are its tasks')."""
    whole = slurm.sbatch(account="search", gpus=2, wrap="sleep 3", name="train")
    slurm.wait_for(whole, {"COMPLETED"}, timeout_s=120)
    array = slurm.sbatch(account="ads", gpus=1, wrap="sleep 2", array="0-2", name="sweep")
    slurm.wait_for(array, {"COMPLETED"}, timeout_s=180)
    cancelled = slurm.sbatch(account="ads", gpus=1, wrap="sleep 300", name="oops")
    slurm.wait_for(cancelled, {"RUNNING"}, timeout_s=120)
    time.sleep(2)
    slurm.scancel(cancelled)
    slurm.wait_for(cancelled, {"CANCELLED"}, timeout_s=120)
    return {
        "whole": whole,
        **{f"array_{i}": f"{array}_{i}" for i in range(3)},
        "cancelled": cancelled,
    }


def _slurm_says(slurm: SlurmCluster, job: str) -> tuple[str, int, int]:
    """(account, GPUs, ElapsedRaw) of a job's allocation, from sacct itself."""
    (row,) = slurm.sacct_rows(job, ["Account", "AllocTRES", "ElapsedRaw"])
    return row["Account"], int(parse_tres(row["AllocTRES"])["gres/gpu"]), int(row["ElapsedRaw"])


def _job_usage(session: Session, job: str) -> list[tuple[str | None, int]]:
    rows = session.execute(
        select(UsageRecord.team, UsageRecord.gpu_ns).where(
            UsageRecord.session_id == f"{CLUSTER}:{job}"
        )
    ).all()
    return [(team, gpu_ns) for team, gpu_ns in rows]


def test_real_jobs_reach_the_ledger_and_the_month_reconciles(
    session: Session, slurm: SlurmCluster, finished: dict[str, str], tmp_path: Path
) -> None:
    month = Month.of(datetime.now(UTC))
    model = cost_model_from_dict({**MODEL, "cluster": CLUSTER}, source="cluster.toml")
    register_cluster(session, model)
    bill = tmp_path / "derived.csv"
    write_derived_bill(model, month.start, month.end, bill)
    ingest_billing(session.connection(), str(bill), IngestOptions(source="cluster-bill"))
    running = slurm.sbatch(account="search", gpus=1, wrap="sleep 20", name="still-running")
    slurm.wait_for(running, {"RUNNING"}, timeout_s=120)
    sacct = SacctCommand(("env", f"SLURM_CONF={slurm.conf}", "sacct"))

    def read(since: datetime | None) -> dict[str, Any]:
        report = ingest_slurm(
            session, cluster=CLUSTER, command=sacct, since=since, until=None, now=datetime.now(UTC)
        )
        return report.to_json()

    first = read(month.start)
    assert first["running"] >= 1
    row = session.scalars(
        select(SlurmJob).where(SlurmJob.job == running, SlurmJob.step == "")
    ).one()
    assert (row.state, row.end_at, row.metered) == ("RUNNING", None, False)
    # Accrued from its start to the end of the window read, at its one GPU.
    assert row.accrued_until is not None
    accrued_s = int((row.accrued_until - row.start_at).total_seconds())
    assert _job_usage(session, running) == [("search", accrued_s * 10**9)]
    for role, job in finished.items():
        account, gpus, elapsed = _slurm_says(slurm, job)
        assert _job_usage(session, job) == [(account, gpus * elapsed * 10**9)], role
    assert _slurm_says(slurm, finished["whole"])[:2] == ("search", 2)
    assert _slurm_says(slurm, finished["array_1"])[:2] == ("ads", 1)
    cancelled = session.scalars(
        select(SlurmJob).where(SlurmJob.job == finished["cancelled"], SlurmJob.step == "")
    ).one()
    assert cancelled.state == "CANCELLED"

    # Read again: nothing new of these jobs (other jobs may run on the shared cluster).
    ours = [*finished.values(), running]
    stored = session.scalar(select(func.count()).where(SlurmJob.job.in_(ours)))
    records = session.scalar(select(func.count()).select_from(UsageRecord))
    again = read(month.start)
    assert again["usage_records"] == 0
    assert session.scalar(select(func.count()).select_from(UsageRecord)) == records
    assert session.scalar(select(func.count()).where(SlurmJob.job.in_(ours))) == stored

    slurm.wait_for(running, {"COMPLETED"}, timeout_s=120)
    resumed = read(None)  # from where the last read ended, or the running job's start
    assert resumed["usage_records"] == 1
    _, gpus, elapsed = _slurm_says(slurm, running)
    assert _job_usage(session, running) == [("search", gpus * elapsed * 10**9)]

    run_allocation(session, Window.of_month(month), share_idle=False,
                   tag_key="specledger-deployment")  # fmt: skip
    billed = session.scalar(select(func.sum(BillingRow.effective_cost_micros)))
    allocated = session.scalar(select(func.sum(LedgerEntry.effective_cost_micros)))
    assert allocated == billed
    whole_ns = session.scalar(
        select(func.sum(LedgerEntry.gpu_ns)).where(
            LedgerEntry.session_id == f"{CLUSTER}:{finished['whole']}"
        )
    )
    _, gpus, elapsed = _slurm_says(slurm, finished["whole"])
    assert whole_ns == gpus * elapsed * 10**9
