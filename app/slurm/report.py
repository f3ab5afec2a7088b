"""GPU-hours and cost of a window by cluster, Slurm account (the team) and partition.

GPU-hours come from the jobs' accounting (allocated GPUs x the part of their run inside the
window); cost from the ledger's entries of the clusters' deployments, which the allocation
split from the node bills. The requests of a metered server job are under its account only
where they name no team of their own, and under the partition ``(metered requests)``;
a node's unused GPUs are ``(idle)``.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.allocation.query import AllocationQuery, CostMetric, query_allocation
from app.domain.ledger import TAG_PREFIX, CostLabel, Dimension
from app.domain.windows import TimeWindow
from app.models import SlurmJob
from app.slurm.rules.usage import DEPLOYMENT_PREFIX, TAG_PARTITION

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
    query = select(
        SlurmJob.cluster,
        SlurmJob.account,
        SlurmJob.partition,
        SlurmJob.gpus,
        SlurmJob.start_at,
        SlurmJob.end_at,
        SlurmJob.elapsed_s,
    ).where(
        SlurmJob.step == "",
        SlurmJob.metered,
        SlurmJob.gpus > 0,
        SlurmJob.start_at < window.end,
        SlurmJob.end_at > window.start,
    )
    if team is not None:
        query = query.where(SlurmJob.account == team)
    sums: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for cluster, account, partition, gpus, start, end, elapsed in session.execute(query):
        key = (cluster, account or CostLabel.no_team.value, partition or CostLabel.none.value)
        sums[key][0] += 1
        if end is not None:  # metered jobs have ended
            sums[key][1] += gpus * _inside(start, end, elapsed, window)
    return [(*key, jobs, seconds) for key, (jobs, seconds) in sums.items()]


def _inside(start: datetime, end: datetime, elapsed_s: int, window: TimeWindow) -> int:
    """The job's elapsed seconds inside the window, pro rata of its wall time (as the
    allocation splits it)."""
    wall = (end - start).total_seconds()
    if wall <= 0:
        return elapsed_s if window.start <= start < window.end else 0
    overlap = (min(end, window.end) - max(start, window.start)).total_seconds()
    return round(elapsed_s * max(overlap, 0) / wall)
