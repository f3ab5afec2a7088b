"""Queries the allocation needs: billing rows, the deployments registry, usage."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
from sqlalchemy import DateTime, select, type_coerce
from sqlalchemy.orm import Session

from app.allocation.compute import DeploymentPolicy, Usage
from app.models import BillingDelivery, BillingRow, Deployment, Replica, UsageRecord


@dataclass(frozen=True, slots=True)
class RowRecord:
    id: int
    charge_period_start: datetime
    charge_period_end: datetime
    effective_cost_micros: int
    billed_cost_micros: int
    currency: str
    tags: dict[str, object] | None
    resource_id: str | None
    service_category: str | None
    charge_class: str | None = None


@dataclass(frozen=True, slots=True)
class Registry:
    policies: dict[str, DeploymentPolicy]
    by_tag_value: dict[str, str]
    by_resource_id: dict[str, tuple[str, str]]
    """ResourceId -> (deployment, replica)."""


@dataclass(frozen=True, slots=True)
class UsageTable:
    usage: Usage
    event_id: list[str]
    session_id: list[str]


def billing_rows(
    session: Session, *, start: datetime, end: datetime, by_billing_period: bool
) -> list[RowRecord]:
    """Current billing rows of a month (by BillingPeriodStart, so corrections billed in it are
    included) or of any window (by ChargePeriodStart)."""
    query = (
        select(
            BillingRow.id,
            BillingRow.charge_period_start,
            BillingRow.charge_period_end,
            BillingRow.effective_cost_micros,
            BillingRow.billed_cost_micros,
            BillingRow.billing_currency,
            BillingRow.tags,
            BillingRow.resource_id,
            BillingRow.service_category,
            BillingRow.billing_period_start,
            BillingRow.charge_class,
        )
        .join(BillingDelivery, BillingDelivery.id == BillingRow.delivery_id)
        .where(BillingDelivery.superseded_at.is_(None))
        .order_by(BillingRow.id)
    )
    if by_billing_period:  # a delivery holds exactly one billing period's rows
        query = query.where(BillingDelivery.billing_period_start == start)
    else:
        query = query.where(
            BillingRow.charge_period_start >= start, BillingRow.charge_period_start < end
        )
    return [
        RowRecord(
            r.id,
            r.charge_period_start or r.billing_period_start,
            r.charge_period_end or r.charge_period_start or r.billing_period_start,
            r.effective_cost_micros or 0,
            r.billed_cost_micros or 0,
            r.billing_currency or "",
            r.tags,
            r.resource_id,
            r.service_category,
            r.charge_class,
        )
        for r in session.execute(query)
    ]


def registry(session: Session) -> Registry:
    deployments = session.scalars(select(Deployment)).all()
    replicas = session.execute(
        select(Replica, Deployment.name).join(Deployment, Deployment.id == Replica.deployment_id)
    ).all()
    replica_gpus: dict[str, dict[str, int]] = {d.name: {} for d in deployments}
    by_resource: dict[str, tuple[str, str]] = {}
    for replica, name in replicas:
        replica_gpus[name][replica.name] = replica.gpus
        if replica.resource_id:
            by_resource[replica.resource_id] = (name, replica.name)
    policies = {
        d.name: DeploymentPolicy(
            d.name,
            sum(replica_gpus[d.name].values()),
            d.shared_cost_policy,
            d.shared_cost_team,
            replica_gpus[d.name],
        )
        for d in deployments
    }
    return Registry(policies, {d.tag_value: d.name for d in deployments}, by_resource)


def usage_between(
    session: Session, deployments: list[str], start: datetime, end: datetime
) -> UsageTable:
    """Requests of these deployments overlapping ``[start, end)``."""
    # Plain DateTime (not UTCDateTime) skips a Python call per value; to_ns reads the naive
    # UTC values SQLite returns and the aware ones PostgreSQL returns alike.
    plain = DateTime(timezone=True)
    query = (
        select(
            UsageRecord.event_id,
            UsageRecord.session_id,
            UsageRecord.team,
            UsageRecord.deployment,
            UsageRecord.replica,
            type_coerce(UsageRecord.arrived_at, plain),
            type_coerce(UsageRecord.finished_at, plain),
            UsageRecord.gpu_ns,
        )
        .where(
            UsageRecord.deployment.in_(deployments),
            UsageRecord.finished_at >= start,
            UsageRecord.arrived_at < end,
        )
        .order_by(UsageRecord.id)
    )
    rows = session.execute(query).all()
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [[] for _ in range(8)]
    return UsageTable(
        Usage(
            deployment=list(columns[3]),
            replica=list(columns[4]),
            team=list(columns[2]),
            arrived_ns=to_ns(columns[5]),
            finished_ns=to_ns(columns[6]),
            gpu_ns=np.asarray(columns[7], np.int64),
        ),
        event_id=list(columns[0]),
        session_id=list(columns[1]),
    )


def to_ns(values: Sequence[datetime]) -> np.ndarray:
    """Datetimes (aware, or naive UTC) as int64 nanoseconds since the epoch."""
    stamps = pa.array(values, pa.timestamp("ns", tz="UTC"))
    return np.asarray(stamps.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
