"""Queries for load sweeps, their points and fits (tables ``sweeps`` and ``sweep_points``)."""

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.breakeven.sweep_file import SweepRow
from app.domain.breakeven_sweep import SweepPoint
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


def find_sweep_by_digest(session: Session, digest: str) -> Sweep | None:
    """The newest sweep read from a file with this SHA-256 (``settings['sha256']``)."""
    for sweep in session.scalars(select(Sweep).order_by(Sweep.id.desc())):
        if (sweep.settings or {}).get("sha256") == digest:
            return sweep
    return None


def latest_fitted_sweep(session: Session) -> Sweep | None:
    """The newest sweep that has a stored fit."""
    return session.scalars(
        select(Sweep).where(Sweep.fit.is_not(None)).order_by(Sweep.id.desc()).limit(1)
    ).first()


def set_fit(session: Session, sweep: Sweep, fit: dict[str, Any] | None) -> None:
    """Store (or clear) a sweep's fit."""
    sweep.fit = fit
    session.flush()


def sweep_rows(session: Session, sweep_id: int) -> list[SweepRow]:
    """The stored points of a sweep, in insertion order, as sweep rows."""
    records = session.scalars(
        select(SweepPointRecord)
        .where(SweepPointRecord.sweep_id == sweep_id)
        .order_by(SweepPointRecord.id)
    )
    rows = []
    for record in records:
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
