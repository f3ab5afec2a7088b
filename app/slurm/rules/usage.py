"""Slurm jobs as usage: what a job allocation line of ``sacct`` becomes in the ledger.

A job holds its GPUs for its whole run, so it is metered like one long request: one usage
record per node it ran on, on the replica that is the node of the deployment
``slurm-<cluster>``, with GPU-nanoseconds = the node's allocated GPUs x ElapsedRaw, billed to
its Slurm account as the team. The allocation then splits each node-hour's cost to the jobs
that held the node's GPUs in that hour (pro rata of their wall time) and leaves the unused
GPUs as the node's idle line, exactly as for a cloud instance and its requests.
"""

from collections.abc import Mapping

from app.domain.slurm_jobs import job_event_id, job_key
from app.domain.usage import UsageEvent, UsageStatus
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
    if record.gpus == 0:
        return []
    per_node = split_per_node(record.gpus, record.nodes)
    tags = _tags(record)
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
                finished_at=max(record.end, record.start),
                gpu_ns=gpus * record.elapsed_s * 1_000_000_000,
                status=_STATUS.get(record.state, UsageStatus.error),
                error=None if record.state in _STATUS else record.state,
            )
        )
    return events


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
