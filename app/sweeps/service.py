"""Load sweeps, their breakeven fits and the tiers, for the API.

Storage and fitting belong to :mod:`app.breakeven` and :mod:`app.tiers`; this module lists
and reads. A sweep's fit is the stored one unless a refit is asked for; a refit is computed
on the sweep's fixed-k rows and not stored (reads never write).
"""

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.breakeven import repository
from app.breakeven.service import fit_rows
from app.breakeven.sweep_file import SweepFileError
from app.domain.waste import BreakevenCurve
from app.models import Sweep, SweepPointRecord
from app.tiers import service as tiers
from app.tiers.catalog import TierCatalogError, load_tier_catalog


class UnfittableSweep(Exception):
    """The sweep's points cannot be fitted (too few levels, no baseline...)."""


class TierQueryError(Exception):
    """A tier question that cannot be answered (unknown or unfitted sweep, bad target)."""


@dataclass(slots=True)
class SweepSummary:
    sweep: Sweep
    points: int


def list_sweeps(session: Session, *, deployment: str | None = None) -> list[SweepSummary]:
    """Sweeps, newest first, with their point counts."""
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
    return [SweepSummary(sweep, int(n)) for sweep, n in session.execute(query)]


def get_sweep(session: Session, sweep_id: int) -> tuple[Sweep, list[SweepPointRecord]] | None:
    sweep = repository.get_sweep(session, sweep_id)
    if sweep is None:
        return None
    points = list(
        session.scalars(
            select(SweepPointRecord)
            .where(SweepPointRecord.sweep_id == sweep_id)
            .order_by(SweepPointRecord.id)
        )
    )
    return sweep, points


def sweep_fit(
    session: Session,
    sweep_id: int,
    *,
    refit: bool = False,
    bootstrap_samples: int = 200,
    seed: int = 0,
) -> tuple[dict[str, Any], bool] | None:
    """The sweep's fit as a JSON-ready dict, and whether it was computed now.

    Returns:
        None if there is no such sweep.

    Raises:
        UnfittableSweep: If the sweep's points cannot be fitted.
    """
    sweep = repository.get_sweep(session, sweep_id)
    if sweep is None:
        return None
    if sweep.fit and not refit:
        return dict(sweep.fit), False
    rows = [row for row in repository.sweep_rows(session, sweep_id) if not row.schedule]
    try:
        _, body = fit_rows(
            rows, source=f"sweep {sweep_id}", bootstrap_samples=bootstrap_samples, seed=seed
        )
    except SweepFileError as exc:
        raise UnfittableSweep(str(exc)) from None
    return body, True


def breakeven_curves(session: Session) -> dict[str, BreakevenCurve]:
    """Per deployment, the breakeven of its newest sweep that has one (stored fits first;
    a sweep never fitted is fitted now, without a bootstrap)."""
    curves: dict[str, BreakevenCurve] = {}
    for summary in list_sweeps(session):
        sweep = summary.sweep
        if sweep.deployment is None or sweep.deployment in curves:
            continue
        try:
            found = sweep_fit(session, sweep.id, bootstrap_samples=0)
        except UnfittableSweep:
            continue
        curve = curve_of(sweep.deployment, sweep.id, found[0]) if found else None
        if curve is not None:
            curves[sweep.deployment] = curve
    return curves


def curve_of(deployment: str, sweep_id: int, fit: dict[str, Any]) -> BreakevenCurve | None:
    """The primary config's breakeven, modelled speedups and schedule from a fit dict."""
    crossing = fit.get("breakeven_concurrency")
    if not isinstance(crossing, int | float) or not math.isfinite(crossing):
        return None
    primary = fit.get("config")
    config = next(
        (c for c in fit.get("configs", []) if isinstance(c, dict) and c.get("config") == primary),
        {},
    )
    speedups = [
        (float(c["concurrency"]), float(c["predicted_speedup"]))
        for c in config.get("comparisons", [])
        if isinstance(c, dict)
        and isinstance(c.get("concurrency"), int | float)
        and isinstance(c.get("predicted_speedup"), int | float)
    ]
    schedule = [
        [int(x) for x in band]
        for band in fit.get("schedule") or []
        if isinstance(band, list | tuple) and len(band) == 3
    ]
    return BreakevenCurve(
        deployment=deployment,
        breakeven_concurrency=float(crossing),
        speedups=speedups,
        schedule=schedule,
        sweep_id=sweep_id,
    )


def _tier_models(
    session: Session, sweep_id: int | None
) -> tuple[Any, list[tiers.TierModel], tiers.Workload]:
    try:
        catalog = load_tier_catalog()
        workload = (
            tiers.default_workload(catalog)
            if sweep_id is None
            else tiers.sweep_workload(session, sweep_id, catalog)
        )
    except (tiers.TierError, TierCatalogError) as exc:
        raise TierQueryError(str(exc)) from None
    return catalog, tiers.build_tier_models(catalog, workload), workload


def show_tiers(session: Session, *, sweep_id: int | None) -> dict[str, Any]:
    """The three tiers' prices, modelled replicas and unit-cost curves.

    Raises:
        TierQueryError: If the sweep is unknown or has no fit.
    """
    catalog, models, workload = _tier_models(session, sweep_id)
    return tiers.show_tiers(catalog, models, workload)


def recommend_tier(
    session: Session, *, concurrency: int, tpot_p90_s: float, sweep_id: int | None
) -> dict[str, Any]:
    """The cheapest tier meeting a TPOT p90 target at a concurrency, with the reasoning.

    Raises:
        TierQueryError: If the sweep is unknown or has no fit, or the target is not positive.
    """
    _, models, workload = _tier_models(session, sweep_id)
    try:
        return tiers.recommend_tier(
            models, workload, concurrency=concurrency, tpot_p90_s=tpot_p90_s
        )
    except tiers.TierError as exc:
        raise TierQueryError(str(exc)) from None
