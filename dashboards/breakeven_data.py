"""Frames of the breakeven and tiers dashboards: stored sweeps and their fits, the tier
catalog with the brief's quoted figures checked against the computed ones, and the tiers
measured from the ledger.

Sweeps, fits and the tier catalog come from the breakeven feature (:mod:`app.breakeven`):
this module reads no catalog file and no fit JSON of its own; a stored fit is read back
through :class:`app.breakeven.schemas.StoredFit`.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import ColumnElement, Engine, case, func, select

from app.breakeven import service, tiers
from app.breakeven.rules.model import SpeculationModel, is_model_free, speedup
from app.breakeven.rules.sweep import SweepPoint
from app.breakeven.rules.tier_costs import SpeculationMode, cost_curve
from app.breakeven.schemas import StoredFit
from app.breakeven.sweep_file import SweepRow
from app.breakeven.tier_catalog import TierCatalog, TierCatalogError, load_tier_catalog
from app.db import read_session
from app.domain.errors import Invalid
from app.domain.periods import Month
from app.models import Deployment, LedgerEntry, UsageRecord
from app.storage.run_repository import current_run_id
from dashboards.session_seconds import arrived_in, islands, request_span

BOOTSTRAP_SAMPLES = 200


@dataclass(frozen=True)
class BreakevenFrames:
    """What the breakeven dashboard shows for one sweep (frames as :func:`breakeven_figure`)."""

    sweep: dict[str, Any] | None
    """``id``, ``name``, ``deployment``, ``created_at`` of the sweep shown; None when none."""
    points: pd.DataFrame
    curve: pd.DataFrame
    summary: pd.DataFrame
    schedule: pd.DataFrame
    fit: dict[str, Any] | None = None
    """The fit as ``breakeven fit --json`` prints it (stored with the sweep, or computed)."""
    message: str | None = None
    """Why there is no fit (too few levels, no baseline), in the fit's own words."""
    sweeps: list[dict[str, Any]] = field(default_factory=list)


def _empty_breakeven(sweeps: list[dict[str, Any]], message: str | None = None) -> BreakevenFrames:
    return BreakevenFrames(
        sweep=None,
        points=pd.DataFrame(columns=["config", "concurrency", "measured_speedup"]),
        curve=pd.DataFrame(columns=["config", "concurrency", "speedup"]),
        summary=pd.DataFrame(columns=["config", "breakeven_concurrency", "ci_low", "ci_high"]),
        schedule=pd.DataFrame(columns=["start", "end", "k"]),
        message=message,
        sweeps=sweeps,
    )


def _float(value: object) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


@lru_cache(maxsize=8)
def _fit(points: tuple[SweepPoint, ...], source: str) -> dict[str, Any]:
    """The breakeven service's fit of fixed-k points, cached per sweep content."""
    rows = [SweepRow(point=point) for point in points]
    return service.fit_rows(rows, source=source, bootstrap_samples=BOOTSTRAP_SAMPLES, seed=0)[1]


def _measured_speedups(points: Sequence[SweepPoint]) -> pd.DataFrame:
    frame = pd.DataFrame(
        [(p.config, p.method, p.concurrency, p.output_tokens_per_s) for p in points],
        columns=["config", "method", "concurrency", "tps"],
    )
    medians = frame.groupby(["config", "method", "concurrency"], as_index=False)["tps"].median()
    base = medians[medians["method"] == "none"].set_index("concurrency")["tps"]
    spec = medians[medians["method"] != "none"].copy()
    spec = spec[spec["concurrency"].isin(base.index)]
    spec["measured_speedup"] = spec["tps"].to_numpy() / base.loc[spec["concurrency"]].to_numpy()
    result: pd.DataFrame = spec[["config", "concurrency", "measured_speedup"]]
    return result.reset_index(drop=True)


def _fitted_curves(fit: StoredFit, points: Sequence[SweepPoint]) -> pd.DataFrame:
    columns = ["config", "concurrency", "speedup"]
    if fit.step_model is None:
        return pd.DataFrame(columns=columns)
    step = fit.step_model.model()
    levels = [float(p.concurrency) for p in points]
    grid = np.geomspace(min(levels), max(levels), 80)
    frames = []
    for config in fit.configs:
        if config.mean_acceptance_length is None or config.k < 1:
            continue
        cost_name = "drafter_overhead_s" if is_model_free(config.method) else "draft_cost_ratio"
        spec = SpeculationModel(
            k=config.k,
            mean_acceptance_length=config.mean_acceptance_length,
            **{cost_name: fit.parameter(f"{config.config}.{cost_name}")},
        )
        curve = speedup(step, spec, concurrency=grid)
        frames.append(
            pd.DataFrame({"config": config.config, "concurrency": grid, "speedup": curve})
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def breakeven_frames(engine: Engine, *, sweep_id: int | None = None) -> BreakevenFrames:
    """The newest sweep (or ``sweep_id``): measured speedups, fitted curve, breakeven, schedule.

    Sweeps carry no team (they measure a deployment, not a tenant's traffic), so every caller
    sees them. A sweep without a stored fit is fitted here (cached per sweep content).
    """
    with read_session(engine) as session:
        sweeps = [summary.sweep for summary in service.list_sweeps(session)]
        listing = [
            {"id": s.id, "name": s.name, "deployment": s.deployment, "created_at": s.created_at}
            for s in sweeps
        ]
        sweep = next((s for s in sweeps if sweep_id is None or s.id == sweep_id), None)
        if sweep is None:
            return _empty_breakeven(listing)
        chosen = listing[sweeps.index(sweep)]
        stored_fit = sweep.fit
        rows = service.sweep_rows(session, sweep.id)
    points = tuple(row.point for row in rows)
    empty = _empty_breakeven(listing)
    if not points:
        return BreakevenFrames(
            **{**empty.__dict__, "sweep": chosen, "message": "this sweep has no points"}
        )
    measured = _measured_speedups(points)
    source = f"sweep {chosen['id']}"
    try:
        body = stored_fit or _fit(tuple(r.point for r in rows if not r.schedule), source)
        fit = service.read_stored_fit(body, source)
    except Invalid as exc:  # unfittable rows, or a stored body that is not a fit: say so
        return BreakevenFrames(
            **{**empty.__dict__, "sweep": chosen, "points": measured, "message": f"no fit: {exc}"}
        )
    ci = fit.breakeven_ci or (None, None)
    summary = pd.DataFrame(
        [
            {
                "config": fit.config,
                "breakeven_concurrency": _float(fit.breakeven_concurrency),
                "ci_low": _float(ci[0]),
                "ci_high": _float(ci[1]),
            }
        ]
    )
    schedule = pd.DataFrame([list(band) for band in fit.schedule], columns=["start", "end", "k"])
    return BreakevenFrames(
        sweep=chosen,
        points=measured,
        curve=_fitted_curves(fit, points),
        summary=summary,
        schedule=schedule,
        fit=body,
        sweeps=listing,
    )


# ---------------------------------------------------------------------------------- tiers


@dataclass(frozen=True)
class TierFrames:
    modelled: pd.DataFrame
    """``tier``, ``label``, ``concurrency``, ``usd_per_1k_session_seconds``: the computed
    cost per 1K session-seconds of each size of each tier."""
    quoted: pd.DataFrame
    """One row per tier and quoted figure (:data:`QUOTED_COLUMNS`): the brief's claim, the
    computed figure, the ledger's (cost per 1K session-seconds only), the verdict and why."""
    measured: pd.DataFrame
    catalog_found: bool


QUOTED_COLUMNS = [
    "tier", "claim", "sessions_low", "sessions_high", "quoted_low", "quoted_high",
    "computed_low", "computed_high", "measured", "verdict", "reason", "source", "text",
]  # fmt: skip
"""Money in USD (floats, for plotting); the speedup as a ratio."""


def _modelled(models: Sequence[tiers.TierModel]) -> pd.DataFrame:
    frames = []
    for model in models:
        tier = model.tier
        grid = np.geomspace(max(tier.sessions.min / 2, 1.0), tier.sessions.max * 2, 40)
        for count in range(tier.instances.min, tier.instances.max + 1):
            curve = cost_curve(
                model.step, None, model.capacity(count), concurrency=grid, mode=SpeculationMode.none
            )
            frames.append(
                pd.DataFrame(
                    {
                        "tier": tier.name,
                        "label": f"list price, {count}x {tier.instance_type}",
                        "concurrency": grid,
                        "usd_per_1k_session_seconds": curve.usd_micros_per_1k_session_seconds / 1e6,
                    }
                )
            )
    columns = ["tier", "label", "concurrency", "usd_per_1k_session_seconds"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def _quoted(
    catalog: TierCatalog, models: Sequence[tiers.TierModel], measured: pd.DataFrame
) -> pd.DataFrame:
    rows = []
    for model in models:
        tier = model.tier
        seen = measured[measured["tier"] == tier.name] if not measured.empty else measured
        seconds = float(seen["session_seconds"].sum()) if not seen.empty else 0.0
        spent = (seen["usd_per_1k_session_seconds"] * seen["session_seconds"]).sum()
        ledger = float(spent) / seconds if seconds > 0 else math.nan
        for check in tiers.tier_claim_checks(catalog, model):
            claim = check["claim"]
            quote = tier.quoted if claim != "speedup" else catalog.claims.speedup
            rows.append({
                "tier": tier.name, "claim": claim,
                "sessions_low": tier.sessions.min, "sessions_high": tier.sessions.max,
                "quoted_low": float(check["quoted"]["min"]),
                "quoted_high": float(check["quoted"]["max"]),
                "computed_low": float(check["computed"]["min"]),
                "computed_high": float(check["computed"]["max"]),
                "measured": ledger if claim == "usd_per_1k_session_seconds" else math.nan,
                "verdict": check["verdict"], "reason": check["reason"],
                "source": "" if quote is None else quote.source,
                "text": "" if quote is None else quote.quotation,
            })  # fmt: skip
    return pd.DataFrame(rows, columns=QUOTED_COLUMNS)


def _measured_tiers(engine: Engine, month: str, team: str | None) -> pd.DataFrame:
    columns = ["tier", "concurrency", "usd_per_1k_session_seconds", "session_seconds"]
    parsed = Month.parse(month)
    start, end = parsed.start, parsed.end
    with read_session(engine) as session:
        run_id = current_run_id(session, month)
        if run_id is None:
            return pd.DataFrame(columns=columns)
        per_event = select(
            LedgerEntry.event_id, func.sum(LedgerEntry.effective_cost_micros).label("micros")
        ).where(
            LedgerEntry.run_id == run_id,
            LedgerEntry.event_id.is_not(None),
            LedgerEntry.currency == "USD",
        )
        if team is not None:  # the team's requests' entries, by event_id, not the whole run's
            mine = UsageRecord.__table__.alias("mine")
            per_event = per_event.join(mine, mine.c.event_id == LedgerEntry.event_id).where(
                mine.c.team == team, mine.c.arrived_at >= start, mine.c.arrived_at < end
            )
        cost = per_event.group_by(LedgerEntry.event_id).subquery()
        bucket = concurrency_bucket(UsageRecord.concurrency).label("bucket")
        scope: list[ColumnElement[bool]] = [Deployment.tier.is_not(None)]
        if team is not None:
            scope.append(UsageRecord.team == team)
        spans = (
            select(
                Deployment.tier.label("tier"),
                bucket,
                UsageRecord.session_id.label("session"),
                *request_span(),
            )
            .join(Deployment, Deployment.name == UsageRecord.deployment)
            .where(*scope, *arrived_in(start, end))
            .subquery("spans")
        )
        covered = islands(spans, ["tier", "bucket", "session"]).subquery("covered")
        seconds = {
            (tier, int(level)): int(us) / 1e6
            for tier, level, us in session.execute(
                select(
                    covered.c.tier, covered.c.bucket, func.sum(covered.c.e - covered.c.s)
                ).group_by(covered.c.tier, covered.c.bucket)
            )
        }
        spent = {
            (tier, int(level)): int(micros or 0)
            for tier, level, micros in session.execute(
                select(Deployment.tier, bucket, func.sum(cost.c.micros))
                .join(Deployment, Deployment.name == UsageRecord.deployment)
                .outerjoin(cost, cost.c.event_id == UsageRecord.event_id)
                .where(*scope, UsageRecord.arrived_at >= start, UsageRecord.arrived_at < end)
                .group_by(Deployment.tier, bucket)
            )
        }
    rows = [
        (tier, level, spent.get((tier, level), 0) / 1e6 * 1000 / covered_s, covered_s)
        for (tier, level), covered_s in sorted(seconds.items())
        if covered_s > 0
    ]
    return pd.DataFrame(rows, columns=columns)


def concurrency_bucket(concurrency: Any) -> Any:
    """Concurrency rounded up to a power of two (1, 2, 4, ...), so that each point of the
    tiers page rests on enough requests; in SQL."""
    value = func.coalesce(concurrency, 1)
    return case(*((value <= 2**i, 2**i) for i in range(21)), else_=value)


def tier_frames(
    engine: Engine,
    *,
    month: str,
    team: str | None = None,
    catalog: TierCatalog | None = None,
) -> TierFrames:
    """Computed cost per tier, the brief's quoted figures checked against it, and what the
    ledger measured in ``month``.

    Measured: the effective cost of requests to deployments registered with a tier, over their
    session-seconds, per concurrency (requests in flight on the replica, in powers of two).

    Args:
        engine: The database.
        month: ``YYYY-MM``.
        team: Only this team's requests.
        catalog: The tier catalog; default the one shipped with the package.
    """
    measured = _measured_tiers(engine, month, team)
    try:
        chosen = load_tier_catalog() if catalog is None else catalog
        models = tiers.build_tier_models(chosen, tiers.default_workload(chosen))
    except (TierCatalogError, tiers.TierError):  # the page says the catalog is unusable
        empty = pd.DataFrame(columns=QUOTED_COLUMNS)
        return TierFrames(
            modelled=_modelled([]), quoted=empty, measured=measured, catalog_found=False
        )
    return TierFrames(
        modelled=_modelled(models),
        quoted=_quoted(chosen, models, measured),
        measured=measured,
        catalog_found=True,
    )
