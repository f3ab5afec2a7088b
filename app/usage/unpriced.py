"""Usage no bill can price: requests of deployments nobody registered (loaded with
``ingest usage --allow-unknown-deployments``). The allocation gives them no share of any bill,
so they would lower their team's unit cost in silence; reconciliation lists them instead."""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from app.models import Deployment, UsageRecord

# A loose index scan: one seek per distinct deployment on usage_records(deployment, ...), so
# the cost grows with the number of deployments, not of requests.
_DEPLOYMENTS_WITH_USAGE = text(
    """
    WITH RECURSIVE seen(deployment) AS (
        SELECT MIN(deployment) FROM usage_records
        UNION ALL
        SELECT (SELECT MIN(u.deployment) FROM usage_records u WHERE u.deployment > seen.deployment)
        FROM seen WHERE seen.deployment IS NOT NULL
    )
    SELECT deployment FROM seen WHERE deployment IS NOT NULL
    """
)


def deployments_with_usage(session: Session) -> list[str]:
    """Every deployment named by a usage record, in name order."""
    return list(session.scalars(_DEPLOYMENTS_WITH_USAGE))


@dataclass(frozen=True, slots=True)
class UnpricedUsage:
    """One unregistered deployment's requests that finished in a window."""

    deployment: str
    requests: int
    gpu_ns: int

    def to_json(self) -> dict[str, object]:
        return {
            "deployment": self.deployment,
            "requests": self.requests,
            "gpu_seconds": self.gpu_ns / 1e9,
        }


def unpriced_usage(session: Session, start: datetime, end: datetime) -> list[UnpricedUsage]:
    """The requests finished in ``[start, end)`` of deployments that are not registered, per
    deployment (read on the (deployment, finished_at) index)."""
    registered = set(session.scalars(select(Deployment.name)))
    found = []
    for deployment in deployments_with_usage(session):
        if deployment in registered:
            continue
        requests, gpu_ns = session.execute(
            select(func.count(), func.coalesce(func.sum(UsageRecord.gpu_ns), 0)).where(
                UsageRecord.deployment == deployment,
                UsageRecord.finished_at >= start,
                UsageRecord.finished_at < end,
            )
        ).one()
        if requests:
            found.append(UnpricedUsage(deployment, int(requests), int(gpu_ns)))
    return found
