"""The allocation's inputs read from the database as Arrow tables (plan.INPUT_SCHEMAS).

One query per table, columns straight into Arrow: no Python object per usage record. The
billing rows (thousands, not millions) get their deployment tag's value read here, since
tags are JSON whose functions differ between SQLite and PostgreSQL.
"""

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
from sqlalchemy import DateTime, select, type_coerce
from sqlalchemy.orm import Session

from app.allocation.plan import BASES, MAX_EXACT_MICROS
from app.domain.errors import InvalidInput
from app.domain.money import residual_column
from app.domain.slurm_jobs import job_event_id, job_key
from app.kit.epoch import to_us
from app.models import BillingDelivery, BillingRow, Deployment, Replica, SlurmJob, UsageRecord

# Plain DateTime (not UTCDateTime) skips a Python call per value; to_us reads the naive UTC
# values SQLite returns and the aware ones PostgreSQL returns alike.
_PLAIN = DateTime(timezone=True)
_COST_COLUMNS = {
    "effective": BillingRow.effective_cost_micros,
    "billed": BillingRow.billed_cost_micros,
    "list_cost": BillingRow.list_cost_micros,
    "contracted": BillingRow.contracted_cost_micros,
}
_RESIDUAL_COLUMNS = {
    name: getattr(BillingRow, residual_column(column.key)) for name, column in _COST_COLUMNS.items()
}


def plan_inputs(
    session: Session,
    *,
    start: datetime,
    end: datetime,
    by_billing_period: bool,
    booked_month: str,
    tag_key: str,
) -> dict[str, pa.Table]:
    """The window's billing rows, the registry and the usage overlapping the rows."""
    inputs = plan_inputs_without_usage(
        session,
        start=start,
        end=end,
        by_billing_period=by_billing_period,
        booked_month=booked_month,
        tag_key=tag_key,
    )
    return {**inputs, "usage": usage_between(session, *usage_span(inputs["rows"]))}


def plan_inputs_without_usage(
    session: Session,
    *,
    start: datetime,
    end: datetime,
    by_billing_period: bool,
    booked_month: str,
    tag_key: str,
) -> dict[str, pa.Table]:
    """The window's billing rows and the registry: the plan's small inputs."""
    rows = billing_rows(
        session,
        start=start,
        end=end,
        by_billing_period=by_billing_period,
        booked_month=booked_month,
        tag_key=tag_key,
    )
    deployments, replicas = registry(session)
    return {
        "rows": rows,
        "deployments": deployments,
        "replicas": replicas,
        "job_links": job_links(session),
    }


def usage_span(rows: pa.Table) -> tuple[int, int]:
    """The epoch-microsecond span ``[first, last)`` the billing rows cover (0, 0 for none):
    the usage the plan needs overlaps it."""
    if not rows.num_rows:
        return 0, 0
    return int(np.min(rows["start_us"].to_numpy())), int(np.max(rows["end_us"].to_numpy()))


def billing_rows(
    session: Session,
    *,
    start: datetime,
    end: datetime,
    by_billing_period: bool,
    booked_month: str,
    tag_key: str,
) -> pa.Table:
    """Current billing rows of a month (by BillingPeriodStart, so corrections billed in it are
    included) or of any window (by ChargePeriodStart).

    Raises:
        InvalidInput: If a row's cost is 2**50 micros or more in magnitude.
    """
    query = (
        select(
            BillingRow.id,
            type_coerce(BillingRow.charge_period_start, _PLAIN),
            type_coerce(BillingRow.charge_period_end, _PLAIN),
            type_coerce(BillingRow.billing_period_start, _PLAIN),
            *_COST_COLUMNS.values(),
            *_RESIDUAL_COLUMNS.values(),
            BillingRow.billing_currency,
            BillingRow.tags,
            BillingRow.resource_id,
            BillingRow.service_category,
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
    records: list[Any] = list(session.execute(query).all())
    ids = [r[0] for r in records]
    starts = to_us([r[1] or r[3] for r in records])
    ends = to_us([r[2] or r[1] or r[3] for r in records])
    costs = {name: [r[4 + i] or 0 for r in records] for i, name in enumerate(_COST_COLUMNS)}
    residuals = [[r[8 + i] or 0 for r in records] for i in range(len(_RESIDUAL_COLUMNS))]
    for name, values in costs.items():
        for row_id, value in zip(ids, values, strict=True):
            if abs(value) >= MAX_EXACT_MICROS:
                raise InvalidInput(
                    f"billing row {row_id}: {name} of {value} micros is too large to allocate "
                    f"exactly (the limit is {MAX_EXACT_MICROS - 1} micros per row)"
                )
    return pa.table(
        {
            "row_id": pa.array(ids, pa.int64()),
            "start_us": pa.array(starts),
            "end_us": pa.array(ends),
            **{name: pa.array(costs[name], pa.int64()) for name, _ in BASES},
            **{
                residual_column(name): pa.array(values, pa.int64())
                for name, values in zip(_COST_COLUMNS, residuals, strict=True)
            },
            "currency": pa.array([r[12] or "" for r in records], pa.string()),
            "tag_value": pa.array([_tag(r[13], tag_key) for r in records], pa.string()),
            "resource_id": pa.array([r[14] or None for r in records], pa.string()),
            "category_compute": pa.array([r[15] == "Compute" for r in records], pa.bool_()),
            "corrects_month": pa.array(
                [_corrects(r[16], r[1] or r[3], booked_month) for r in records], pa.string()
            ),
        }
    )


def _tag(tags: dict[str, object] | None, key: str) -> str | None:
    value = (tags or {}).get(key)
    return None if value is None else str(value)


def _corrects(charge_class: str | None, charge_start: datetime, booked_month: str) -> str | None:
    """The month a Correction row corrects, when it is not the month it is booked in."""
    month = f"{charge_start:%Y-%m}"
    return month if charge_class == "Correction" and month != booked_month else None


def registry(session: Session) -> tuple[pa.Table, pa.Table]:
    """The deployments (with their GPUs and shared-cost policy) and their replicas."""
    replicas = session.execute(
        select(Deployment.name, Replica.name, Replica.gpus, Replica.resource_id).join(
            Deployment, Deployment.id == Replica.deployment_id
        )
    ).all()
    gpus: dict[str, int] = {}
    for name, _, replica_gpus, _ in replicas:
        gpus[name] = gpus.get(name, 0) + replica_gpus
    deployments = session.execute(
        select(
            Deployment.name,
            Deployment.tag_value,
            Deployment.shared_cost_policy,
            Deployment.shared_cost_team,
        )
    ).all()
    return (
        pa.table(
            {
                "deployment": pa.array([d[0] for d in deployments], pa.string()),
                "tag_value": pa.array([d[1] for d in deployments], pa.string()),
                "gpus_total": pa.array([gpus.get(d[0], 0) for d in deployments], pa.int64()),
                "shared_policy": pa.array([str(d[2]) for d in deployments], pa.string()),
                "shared_team": pa.array([d[3] for d in deployments], pa.string()),
            }
        ),
        pa.table(
            {
                "deployment": pa.array([r[0] for r in replicas], pa.string()),
                "replica": pa.array([r[1] for r in replicas], pa.string()),
                "gpus": pa.array([r[2] for r in replicas], pa.int64()),
                "resource_id": pa.array([r[3] or None for r in replicas], pa.string()),
            }
        ),
    )


def job_links(session: Session) -> pa.Table:
    """The usage records of Slurm jobs that ran a metered server, each with the server's
    (deployment, replica): replicas that name their job (``replicas.slurm_job``) and the
    runs of that job on one node, ended or still running (a server job usually runs through
    month end: its accrued record is split to its requests as the final one will be). Few
    rows: one per server job."""
    servers = session.execute(
        select(Replica.slurm_job, Deployment.name, Replica.name)
        .join(Deployment, Deployment.id == Replica.deployment_id)
        .where(Replica.slurm_job.is_not(None))
    ).all()
    by_job = {key: (deployment, replica) for key, deployment, replica in servers}
    links: list[tuple[str, str, str]] = []
    if by_job:
        # Only the linked jobs' runs, not every job the clusters ever ran.
        linked = {key.partition(":")[2] for key in by_job if key}
        jobs = session.execute(
            select(SlurmJob.cluster, SlurmJob.job, SlurmJob.start_at, SlurmJob.nodes).where(
                SlurmJob.step == "",
                SlurmJob.metered | SlurmJob.accrued_until.is_not(None),
                SlurmJob.job.in_(sorted(linked)),
            )
        ).all()
        for cluster, job, start, nodes in jobs:
            server = by_job.get(job_key(cluster, job))
            if server is not None and len(nodes) == 1:
                links.append((job_event_id(cluster, job, start, nodes[0], nodes=1), *server))
    return pa.table(
        {
            name: pa.array([link[i] for link in links], pa.string())
            for i, name in enumerate(("event_id", "deployment", "replica"))
        }
    )


def usage_between(session: Session, start_us: int, end_us: int) -> pa.Table:
    """Requests overlapping ``[start_us, end_us)`` (epoch microseconds)."""
    batches = list(usage_batches_between(session, start_us, end_us))
    return pa.concat_tables(batches) if batches else empty_usage()


def empty_usage() -> pa.Table:
    """The plan's usage input with no request."""
    return _usage_batch([[] for _ in range(9)])


def usage_batches_between(session: Session, start_us: int, end_us: int) -> Iterator[pa.Table]:
    """Requests overlapping ``[start_us, end_us)``, in batches of the plan's usage input."""
    start, end = (pa.scalar(v, pa.timestamp("us", tz="UTC")).as_py() for v in (start_us, end_us))
    query = (
        select(
            UsageRecord.id,
            UsageRecord.event_id,
            UsageRecord.session_id,
            UsageRecord.team,
            UsageRecord.deployment,
            UsageRecord.replica,
            type_coerce(UsageRecord.arrived_at, _PLAIN),
            type_coerce(UsageRecord.finished_at, _PLAIN),
            UsageRecord.gpu_ns,
        )
        .where(UsageRecord.finished_at >= start, UsageRecord.arrived_at < end)
        .order_by(UsageRecord.id)
    )
    result = session.execute(query.execution_options(yield_per=_USAGE_BATCH_ROWS))
    for rows in result.partitions():
        yield _usage_batch(list(zip(*rows, strict=True)))


_USAGE_BATCH_ROWS = 200_000
"""Requests read at a time: the driver's row objects for a batch are freed before the next."""


def _usage_batch(columns: list[Sequence[Any]]) -> pa.Table:
    text = pa.string()
    return pa.table(
        {
            "usage_ord": pa.array(columns[0], pa.int64()),
            "event_id": pa.array(columns[1], text),
            "session_id": pa.array(columns[2], text),
            "team": pa.array(columns[3], text),
            "deployment": pa.array(columns[4], text),
            "replica": pa.array(columns[5], text),
            "arrived_us": pa.array(to_us(columns[6])),
            "finished_us": pa.array(to_us(columns[7])),
            "gpu_ns": pa.array(columns[8], pa.int64()),
        }
    )
