"""Slurm jobs as usage: what a job allocation line of ``sacct`` becomes in the ledger.

A job holds its GPUs for its whole run, so it is metered like one long request: one usage
record per node it ran on, on the replica that is the node of the deployment
``slurm-<cluster>``, with GPU-nanoseconds = the node's allocated GPUs x ElapsedRaw, billed to
its Slurm account as the team. The allocation then splits each node-hour's cost to the jobs
that held the node's GPUs in that hour (pro rata of their wall time) and leaves the unused
GPUs as the node's idle line, exactly as for a cloud instance and its requests.

A job still running when the cluster is read accrues: its records run from its start to the
end of the window read, at its GPUs, and are replaced by each later read and, once it has
ended, by its final records (GPUs x ElapsedRaw): the true-up. A job's GPU-seconds are cut at
month boundaries by largest remainder (:func:`gpu_seconds_by_month`), so its months always
sum to GPUs x ElapsedRaw.
"""

import itertools
from collections.abc import Mapping
from datetime import datetime, timedelta

from app.domain.allocation import split_by_weight
from app.domain.periods import Month
from app.domain.slurm_jobs import job_event_id, job_key
from app.domain.usage import UsageEvent, UsageStatus
from app.domain.windows import TimeWindow
from app.slurm.rules.sacct import SacctRecord, split_per_node

DEPLOYMENT_PREFIX = "slurm-"
ENDPOINT = "slurm"
"""The ``endpoint`` of a job's usage records (a request's is ``completions`` or
``chat.completions``)."""
SPEC_METHOD = "none"
TAG_CLUSTER = "slurm.cluster"
TAG_JOB = "slurm.job"
TAG_PARTITION = "slurm.partition"
TAG_USER = "slurm.user"
TAG_QOS = "slurm.qos"
TAG_STATE = "slurm.state"
_STATUS = {"COMPLETED": UsageStatus.ok, "CANCELLED": UsageStatus.cancelled}


def cluster_deployment(cluster: str) -> str:
    """The deployment whose replicas are the cluster's nodes."""
    return f"{DEPLOYMENT_PREFIX}{cluster}"


def is_metered(record: SacctRecord) -> bool:
    """Whether the line becomes usage: a job's allocation line (not a step) that ran and
    has ended. A running job is read again once it has ended."""
    return record.step is None and record.start is not None and record.finished


def usage_events(record: SacctRecord) -> list[UsageEvent]:
    """The usage records of a finished job allocation (see the module docstring); none for
    a job that held no GPU.

    Raises:
        ValueError: For a line that is not metered (:func:`is_metered`).
    """
    if not is_metered(record) or record.start is None or record.end is None:
        raise ValueError(f"job {record.job_id} is a step, never started or has not ended")
    return _events(record, max(record.end, record.start), record.elapsed_s)


def is_accruing(record: SacctRecord) -> bool:
    """Whether the line is a job allocation still running (started, not ended)."""
    return record.step is None and record.start is not None and not record.finished


def accrued_seconds(record: SacctRecord, until: datetime) -> int:
    """The whole seconds a running job has held its GPUs by ``until`` (0 before it began)."""
    if record.start is None:
        return 0
    return max(int((until - record.start).total_seconds()), 0)


def accrued_events(record: SacctRecord, until: datetime) -> list[UsageEvent]:
    """The usage records of a running job accrued up to ``until`` (the end of the window
    read): its GPUs x the seconds from its start to ``until``. They carry the event ids of
    the job's final records, which replace them when it has ended (the true-up).

    Raises:
        ValueError: For a line that is not a running allocation (:func:`is_accruing`).
    """
    if not is_accruing(record) or record.start is None:
        raise ValueError(f"job {record.job_id} is a step, never started or has ended")
    seconds = accrued_seconds(record, until)
    if seconds == 0:
        return []
    return _events(record, record.start + timedelta(seconds=seconds), seconds)


def event_ids(record: SacctRecord) -> list[str]:
    """The usage record ids of a job run (one per node it held GPUs on)."""
    if record.start is None:
        return []
    per_node = split_per_node(record.gpus, record.nodes)
    nodes = len(per_node)
    return [
        job_event_id(record.cluster, record.job, record.start, node, nodes=nodes)
        for node, gpus in per_node.items()
        if gpus
    ]


def _events(record: SacctRecord, end: datetime, elapsed_s: int) -> list[UsageEvent]:
    if record.gpus == 0 or record.start is None:
        return []
    per_node = split_per_node(record.gpus, record.nodes)
    tags = _tags(record)
    if record.finished:
        status = _STATUS.get(record.state, UsageStatus.error)
        error = None if record.state in _STATUS else record.state
    else:  # running: accrued so far
        status, error = UsageStatus.ok, None
    events = []
    for node, gpus in per_node.items():
        if gpus == 0:
            continue
        events.append(
            UsageEvent(
                event_id=job_event_id(
                    record.cluster, record.job, record.start, node, nodes=len(per_node)
                ),
                session_id=job_key(record.cluster, record.job),
                team=record.account,
                cost_center=None,
                tags=tags,
                deployment=cluster_deployment(record.cluster),
                replica=node,
                model=record.name[:256],
                endpoint=ENDPOINT,
                streamed=False,
                spec_method=SPEC_METHOD,
                spec_k=None,
                arrived_at=record.start,
                first_token_at=None,
                finished_at=end,
                gpu_ns=gpus * elapsed_s * 1_000_000_000,
                status=status,
                error=error,
            )
        )
    return events


def gpu_seconds_by_month(start: datetime, end: datetime, gpu_seconds: int) -> dict[Month, int]:
    """A job's GPU-seconds per calendar month (UTC) it ran in, in proportion to its wall
    time in each, by largest remainder: the months always sum to ``gpu_seconds`` exactly
    (GPUs x ElapsedRaw). A job of no wall time counts in the month it started."""
    if end <= start:
        return {Month.of(start): gpu_seconds} if gpu_seconds else {}
    weights: dict[Month, int] = {}
    month = Month.of(start)
    while month.start < end:
        weights[month] = _overlap_us(start, end, month.start, month.end)
        month = month.next()
    return split_by_weight(gpu_seconds, weights) if gpu_seconds else {}


def gpu_seconds_in(start: datetime, end: datetime, gpu_seconds: int, window: TimeWindow) -> int:
    """The part of a job's GPU-seconds inside ``window``: its months' parts
    (:func:`gpu_seconds_by_month`), a month the window cuts split again by largest
    remainder between the part inside and the parts outside, so a month window gets exactly
    its month's part and any windows that tile a month sum to it."""
    total = 0
    for month, part in gpu_seconds_by_month(start, end, gpu_seconds).items():
        if window.start <= month.start and month.end <= window.end:
            total += part
            continue
        if month.end <= window.start or window.end <= month.start or part == 0:
            continue
        lo, hi = max(start, month.start), min(end, month.end)
        if hi <= lo:  # a job of no wall time, at its start
            total += part if window.start <= start < window.end else 0
            continue
        cuts = sorted({lo, hi, *(t for t in (window.start, window.end) if lo < t < hi)})
        pieces = {(a, b): _overlap_us(a, b, a, b) for a, b in itertools.pairwise(cuts)}
        for (a, b), seconds in split_by_weight(part, pieces).items():
            if window.start <= a and b <= window.end:
                total += seconds
    return total


def _overlap_us(start: datetime, end: datetime, lo: datetime, hi: datetime) -> int:
    overlap = min(end, hi) - max(start, lo)
    return max(overlap // timedelta(microseconds=1), 0)


def _tags(record: SacctRecord) -> Mapping[str, str]:
    values = {
        TAG_CLUSTER: record.cluster,
        TAG_JOB: record.job,
        TAG_PARTITION: record.partition,
        TAG_USER: record.user,
        TAG_QOS: record.qos,
        TAG_STATE: record.state,
    }
    return {key: value for key, value in values.items() if value}
