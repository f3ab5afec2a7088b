"""A job still running at month end: its GPU-seconds accrue up to the end of each window
read, count in the month they were used, and are trued up to GPUs x ElapsedRaw when it has
ended; a month closed in between gets adjusting entries, as for a restated bill."""

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.deployments.service import add_deployment, add_replica
from app.domain.ledger import AllocationMethod, EntryKind
from app.domain.periods import Month
from app.domain.windows import TimeWindow
from app.ledger.service import close_month
from app.models import LedgerEntry, SlurmJob, UsageRecord
from app.slurm.cluster import link_job, register_cluster
from app.slurm.ingest import ingest_sacct_text
from app.slurm.report import slurm_usage
from app.slurm.rules.cluster_cost import cost_model_from_dict
from app.slurm.rules.sacct import SACCT_FIELDS
from ingest.cluster_bill import write_derived_bill
from ingest.service import IngestOptions, ingest_billing
from tests.factories import at, insert_usage, usage_record
from tests.slurm.test_ingest_sacct import MODEL, line

OCTOBER, NOVEMBER = Month(2026, 10), Month(2026, 11)
HEADER = "|".join(SACCT_FIELDS)
START = datetime(2026, 10, 31, 22, tzinfo=UTC)
TRES = "billing=1,cpu=1,gres/gpu=2,node=1"
RUNNING = line("20", "search", "RUNNING", "2026-10-31T22:00:00", "Unknown", 10_800, TRES)
# Ended at 03:00 after 5 h of wall time, 600 s of it suspended (ElapsedRaw excludes it).
ENDED = line(
    "20", "search", "COMPLETED", "2026-10-31T22:00:00", "2026-11-01T03:00:00", 17_400, TRES
)
ELAPSED = 17_400


def _read(session: Session, sacct_line: str, *, until: datetime) -> dict[str, object]:
    report = ingest_sacct_text(
        session,
        f"{HEADER}\n{sacct_line}\n",
        source="sacct.txt",
        cluster="specledger",
        window=(OCTOBER.start, until),
        now=until,
    )
    return report.to_json()


def _gpu_ns(session: Session) -> int:
    return int(session.scalar(select(func.sum(UsageRecord.gpu_ns))) or 0)


def _slurm_seconds(session: Session, month: Month) -> int:
    usage = slurm_usage(session, TimeWindow(month.start, month.end))
    return sum(x.gpu_seconds for x in usage)


def test_a_running_job_accrues_to_each_read_and_is_trued_up_when_it_ends(
    session: Session,
) -> None:
    first = _read(session, RUNNING, until=datetime(2026, 11, 1, 1, tzinfo=UTC))
    assert (first["running"], first["accrued"], first["usage_records"]) == (1, 1, 0)
    assert first["accrued_gpu_seconds"] == 2 * 3 * 3600
    assert _gpu_ns(session) == 2 * 3 * 3600 * 10**9
    assert _slurm_seconds(session, OCTOBER) == 2 * 2 * 3600  # 22:00 to midnight
    assert _slurm_seconds(session, NOVEMBER) == 2 * 3600
    job = session.scalars(select(SlurmJob).where(SlurmJob.job == "20")).one()
    assert job.accrued_until == datetime(2026, 11, 1, 1, tzinfo=UTC)

    later = _read(session, RUNNING, until=datetime(2026, 11, 1, 2, tzinfo=UTC))
    assert later["accrued_gpu_seconds"] == 2 * 4 * 3600
    assert session.scalar(select(func.count()).select_from(UsageRecord)) == 1  # replaced
    assert _gpu_ns(session) == 2 * 4 * 3600 * 10**9
    assert _slurm_seconds(session, OCTOBER) == 2 * 2 * 3600

    ended = _read(session, ENDED, until=datetime(2026, 11, 1, 4, tzinfo=UTC))
    assert (ended["accrued"], ended["usage_records"], ended["gpu_seconds"]) == (0, 1, 2 * ELAPSED)
    assert _gpu_ns(session) == 2 * ELAPSED * 10**9
    trued_up = session.scalars(select(SlurmJob).where(SlurmJob.job == "20")).one()
    assert (trued_up.metered, trued_up.accrued_until) == (True, None)
    october, november = _slurm_seconds(session, OCTOBER), _slurm_seconds(session, NOVEMBER)
    assert october + november == 2 * ELAPSED  # exactly GPUs x ElapsedRaw
    assert (october, november) == (13_920, 20_880)  # 2/5 and 3/5 of the wall time
    again = _read(session, ENDED, until=datetime(2026, 11, 1, 5, tzinfo=UTC))
    assert (again["usage_records"], again["unchanged"]) == (0, 1)
    assert _gpu_ns(session) == 2 * ELAPSED * 10**9


def test_a_closed_month_gets_an_adjustment_when_its_running_job_is_trued_up(
    session: Session, tmp_path: Path
) -> None:
    model = cost_model_from_dict(MODEL, source="cluster.toml")
    register_cluster(session, model)
    for month in (OCTOBER, NOVEMBER):
        bill = tmp_path / f"derived-{month}.csv"
        write_derived_bill(model, month.start, month.end, bill)
        ingest_billing(session.connection(), str(bill), IngestOptions(source=f"cluster-{month}"))
    _read(session, RUNNING, until=datetime(2026, 11, 1, 1, tzinfo=UTC))
    window = Window.of_month(OCTOBER)
    run_allocation(session, window, share_idle=False, tag_key="specledger-deployment")
    search = select(func.sum(LedgerEntry.effective_cost_micros)).where(
        LedgerEntry.team == "search", LedgerEntry.booked_month == "2026-10"
    )
    accrued_share = session.scalar(search)  # October's last two hours: the running job's
    assert accrued_share is not None
    assert accrued_share > 0
    close_month(session, OCTOBER, now=datetime(2026, 11, 1, 1, 30, tzinfo=UTC))

    _read(session, ENDED, until=datetime(2026, 11, 1, 4, tzinfo=UTC))
    summary = run_allocation(
        session,
        Window.of_month(NOVEMBER),
        share_idle=False,
        tag_key="specledger-deployment",
        now=datetime(2026, 11, 1, 5, tzinfo=UTC),
    )
    assert summary.adjusted_months == [Month(2026, 10)]
    adjustments = session.execute(
        select(LedgerEntry.team, func.sum(LedgerEntry.effective_cost_micros))
        .where(LedgerEntry.kind == EntryKind.adjustment, LedgerEntry.corrects_month == "2026-10")
        .group_by(LedgerEntry.team)
    ).all()
    by_team = dict(adjustments)
    # The job used less of October than accrued (600 s suspended): search pays back a part
    # of its share and idle takes it, and the adjustments of October net to zero.
    assert by_team["search"] < 0
    assert sum(by_team.values()) == 0
    assert session.scalar(search) == accrued_share  # the closed month itself is unchanged
    assert _slurm_seconds(session, OCTOBER) + _slurm_seconds(session, NOVEMBER) == 2 * ELAPSED


def test_a_running_server_job_is_split_to_its_requests_before_it_ends(
    session: Session, tmp_path: Path
) -> None:
    """A vLLM server job usually runs through month end: its accrued share of the node is
    split to the requests it served, as its final record will be, not left to its account."""
    model = cost_model_from_dict(MODEL, source="cluster.toml")
    register_cluster(session, model)
    bill = tmp_path / "derived.csv"
    write_derived_bill(model, OCTOBER.start, OCTOBER.end, bill)
    ingest_billing(session.connection(), str(bill), IngestOptions(source="cluster-bill"))
    add_deployment(session, name="served")
    add_replica(session, deployment="served", name="r1", gpus=2)
    requests = [
        usage_record(
            deployment="served", team="ads", arrived=at(22, minute, day=31), gpu_ns=60 * 10**9
        )
        for minute in (10, 40)
    ]
    insert_usage(session.connection(), requests)
    _read(session, RUNNING, until=datetime(2026, 11, 1, 1, tzinfo=UTC))
    link_job(session, deployment="served", replica="r1", cluster="specledger", job="20")

    run_allocation(
        session, Window.of_month(OCTOBER), share_idle=False, tag_key="specledger-deployment"
    )
    split = dict(
        session.execute(
            select(LedgerEntry.event_id, LedgerEntry.team).where(
                LedgerEntry.method == AllocationMethod.gpu_seconds_slurm_job
            )
        ).all()
    )
    assert split == {row["event_id"]: "ads" for row in requests}
    rest = session.scalar(
        select(func.count())
        .select_from(LedgerEntry)
        .where(LedgerEntry.method == AllocationMethod.gpu_seconds_slurm_unmetered)
    )
    assert rest  # what the requests did not use stays the job's account's
