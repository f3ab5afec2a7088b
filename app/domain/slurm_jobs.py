"""How a Slurm job is named where other records point at it: the key a replica names its
job by, and the usage record id of one run of a job on one node."""

import hashlib
from datetime import datetime

_EVENT_ID_MAX = 64
"""``usage_records.event_id`` is VARCHAR(64)."""


def job_key(cluster: str, job: str) -> str:
    """How a replica names the Slurm job it runs in (``replicas.slurm_job``)."""
    return f"{cluster}:{job}"


def job_event_id(cluster: str, job: str, start: datetime, node: str, *, nodes: int) -> str:
    """The usage record id of one run of a job on one node (the node only for a job that ran
    on several); a hash where the readable id would be too long for the column."""
    readable = f"slurm:{cluster}:{job}:{int(start.timestamp())}"
    if nodes > 1:
        readable += f":{node}"
    if len(readable) <= _EVENT_ID_MAX:
        return readable
    return "slurm:" + hashlib.sha256(readable.encode()).hexdigest()[:40]
