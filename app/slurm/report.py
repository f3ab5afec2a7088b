"""GPU-hours and cost of a window by cluster, Slurm account (the team) and partition.

GPU-hours come from the jobs' accounting (allocated GPUs x ElapsedRaw, or accrued so far for a
running job, cut at month boundaries by largest remainder so a job's months sum to it); cost from the ledger's entries of the clusters' deployments, which the allocation
split from the node bills. The requests of a metered server job are under its account only
where they name no team of their own, and under the partition ``(metered requests)``;
a node's unused GPUs are ``(idle)``.
"""

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session

from app.allocation.query import AllocationQuery, CostMetric, query_allocation
from app.domain.ledger import TAG_PREFIX, CostLabel, Dimension
from app.domain.windows import TimeWindow
from app.models import SlurmJob
from app.slurm.rules.usage import DEPLOYMENT_PREFIX, TAG_PARTITION, gpu_seconds_in

METERED_REQUESTS = "(metered requests)"
_PARTITION = f"{TAG_PREFIX}{TAG_PARTITION}"


@dataclass(slots=True)
class SlurmUsageLine:
    cluster: str
    account: str
    partition: str
    jobs: int = 0
    gpu_seconds: int = 0
    cost_micros: int = 0
    currency: str | None = None


def slurm_usage(
    session: Session,
    window: TimeWindow,
    *,
    team: str | None = None,
    cost_metric: CostMetric = CostMetric.effective,
    s3_endpoint_url: str | None = None,
) -> list[SlurmUsageLine]:
    """Lines per (cluster, account, partition), largest cost first; ``team``: only its own."""
    lines: dict[tuple[str, str, str], SlurmUsageLine] = {}

    def line(cluster: str, account: str, partition: str) -> SlurmUsageLine:
        key = (cluster, account, partition)
        if key not in lines:
            lines[key] = SlurmUsageLine(cluster, account, partition)
        return lines[key]

    for cluster, account, partition, jobs, gpu_seconds in _gpu_seconds(session, window, team):
        found = line(cluster, account, partition)
        found.jobs, found.gpu_seconds = jobs, gpu_seconds
    result = query_allocation(
        session,
        AllocationQuery(
            window=window,
            aggregate=(Dimension.deployment, Dimension.team, _PARTITION),
            step=None,
            cost_metric=cost_metric,
            team=team,
        ),
        s3_endpoint_url=s3_endpoint_url,
    )
    for cost_line in result.lines:
        deployment = cost_line.properties[Dimension.deployment]
        if not deployment.startswith(DEPLOYMENT_PREFIX):
            continue
        partition = cost_line.properties[_PARTITION]
        if partition == CostLabel.untagged:
            partition = METERED_REQUESTS
        found = line(
            deployment.removeprefix(DEPLOYMENT_PREFIX),
            cost_line.properties[Dimension.team],
            partition,
        )
        found.cost_micros += cost_line.cost_micros
        found.currency = cost_line.currency
    return sorted(lines.values(), key=lambda x: (-x.cost_micros, x.cluster, x.account, x.partition))


def _gpu_seconds(
    session: Session, window: TimeWindow, team: str | None
) -> list[tuple[str, str, str, int, int]]:
    """Jobs and GPU-seconds per (cluster, account, partition) inside the window: an ended
    job's GPUs x ElapsedRaw, a running one's accrued so far, cut at month boundaries by
    largest remainder (:func:`app.slurm.rules.usage.gpu_seconds_in`)."""
    query = select(
        SlurmJob.cluster,
        SlurmJob.account,
        SlurmJob.partition,
        SlurmJob.gpus,
        SlurmJob.start_at,
        SlurmJob.end_at,
        SlurmJob.accrued_until,
        SlurmJob.gpu_seconds,
    ).where(*counted_jobs(window))
    if team is not None:
        query = query.where(SlurmJob.account == team)
    sums: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for cluster, account, partition, gpus, start, end, accrued, total in session.execute(query):
        key = (cluster, account or CostLabel.no_team.value, partition or CostLabel.none.value)
        sums[key][0] += 1
        if end is None and accrued is not None:  # running: accrued to the end of a read
            end, total = accrued, gpus * int((accrued - start).total_seconds())
        if end is not None:
            sums[key][1] += gpu_seconds_in(start, end, total, window)
    return [(*key, jobs, seconds) for key, (jobs, seconds) in sums.items()]


def counted_jobs(window: TimeWindow) -> list[ColumnElement[bool]]:
    """The job allocations a window's GPU-seconds count: GPU jobs that have ended (metered)
    or are running and accrued, overlapping the window."""
    return [
        SlurmJob.step == "",
        SlurmJob.gpus > 0,
        or_(SlurmJob.metered, SlurmJob.accrued_until.is_not(None)),
        SlurmJob.start_at < window.end,
        func.coalesce(SlurmJob.end_at, SlurmJob.accrued_until) > window.start,
    ]
