"""Usage no bill can price: requests of deployments nobody registered (loaded with
``ingest usage --allow-unknown-deployments``). The allocation gives them no share of any bill,
so they would lower their team's unit cost in silence; reconciliation lists them instead."""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.kit.loose_scan import distinct_values
from app.models import Deployment, UsageRecord


def deployments_with_usage(session: Session) -> list[str]:
    """Every deployment named by a usage record, in name order (one index seek each)."""
    return distinct_values(session, "usage_records", "deployment")


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
