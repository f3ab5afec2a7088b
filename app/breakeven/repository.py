"""Queries for load sweeps, their points and fits (tables ``sweeps`` and ``sweep_points``)."""

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.breakeven.rules.sweep import SweepPoint
from app.breakeven.sweep_file import SweepRow
from app.models import Sweep, SweepPointRecord


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def add_sweep(
    session: Session,
    *,
    name: str,
    rows: Sequence[SweepRow],
    settings: dict[str, Any],
    deployment: str | None = None,
    fit: dict[str, Any] | None = None,
) -> Sweep:
    """Insert a sweep and its points; returns it flushed (with its id)."""
    sweep = Sweep(
        name=name[:256],
        deployment=deployment,
        created_at=datetime.now(UTC),
        settings=settings,
        fit=fit,
    )
    session.add(sweep)
    session.flush()
    for row in rows:
        p = row.point
        metrics: dict[str, Any] = {
            key: value for key, value in row.metrics.items() if value is not None
        }
        metrics["acceptance_rate"] = _finite(p.acceptance_rate)
        metrics["mean_acceptance_length"] = _finite(p.mean_acceptance_length)
        if row.schedule:
            metrics["schedule"] = row.schedule
        session.add(
            SweepPointRecord(
                sweep_id=sweep.id,
                config=p.config[:128],
                method=p.method[:32],
                k=p.k,
                concurrency=p.concurrency,
                output_tokens_per_s=p.output_tokens_per_s,
                requests_per_s=row.requests_per_s,
                tpot_p50_s=_finite(p.tpot_p50_s),
                metrics=metrics,
            )
        )
    session.flush()
    return sweep


def get_sweep(session: Session, sweep_id: int) -> Sweep | None:
    """The sweep with this id, or None."""
    return session.get(Sweep, sweep_id)


def list_sweeps(session: Session, *, deployment: str | None = None) -> list[tuple[Sweep, int]]:
    """Sweeps, newest first, each with its number of points."""
    counts = (
        select(SweepPointRecord.sweep_id, func.count().label("n"))
        .group_by(SweepPointRecord.sweep_id)
        .subquery()
    )
    query = (
        select(Sweep, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.sweep_id == Sweep.id)
        .order_by(Sweep.created_at.desc(), Sweep.id.desc())
    )
    if deployment is not None:
        query = query.where(Sweep.deployment == deployment)
    return [(sweep, int(n)) for sweep, n in session.execute(query)]


def sweep_points(session: Session, sweep_id: int) -> list[SweepPointRecord]:
    """The stored points of a sweep, in insertion order."""
    return list(
        session.scalars(
            select(SweepPointRecord)
            .where(SweepPointRecord.sweep_id == sweep_id)
            .order_by(SweepPointRecord.id)
        )
    )


def find_sweep_by_digest(session: Session, digest: str) -> Sweep | None:
    """The newest sweep read from a file with this SHA-256 (``settings['sha256']``)."""
    for sweep in session.scalars(select(Sweep).order_by(Sweep.id.desc())):
        if (sweep.settings or {}).get("sha256") == digest:
            return sweep
    return None


def latest_fitted_sweep(session: Session, deployment: str | None = None) -> Sweep | None:
    """The newest sweep that has a stored fit: the deployment's own when it has one, else
    the newest that belongs to no deployment (never another deployment's)."""
    fitted = select(Sweep).where(Sweep.fit.is_not(None)).order_by(Sweep.id.desc()).limit(1)
    if deployment is not None:
        own = session.scalars(fitted.where(Sweep.deployment == deployment)).first()
        if own is not None:
            return own
    return session.scalars(fitted.where(Sweep.deployment.is_(None))).first()


def set_fit(session: Session, sweep: Sweep, fit: dict[str, Any] | None) -> None:
    """Store (or clear) a sweep's fit."""
    sweep.fit = fit
    session.flush()


def sweep_rows(session: Session, sweep_id: int) -> list[SweepRow]:
    """The stored points of a sweep, in insertion order, as sweep rows."""
    rows = []
    for record in sweep_points(session, sweep_id):
        metrics = dict(record.metrics or {})
        rate = metrics.pop("acceptance_rate", None)
        length = metrics.pop("mean_acceptance_length", None)
        schedule = metrics.pop("schedule", None)
        point = SweepPoint(
            config=record.config,
            method=record.method,
            k=record.k,
            concurrency=record.concurrency,
            output_tokens_per_s=record.output_tokens_per_s,
            tpot_p50_s=math.nan if record.tpot_p50_s is None else record.tpot_p50_s,
            acceptance_rate=math.nan if rate is None else float(rate),
            mean_acceptance_length=math.nan if length is None else float(length),
        )
        rows.append(
            SweepRow(
                point=point,
                requests_per_s=record.requests_per_s,
                metrics=metrics,
                schedule=schedule,
            )
        )
    return rows
