"""Frames of the breakeven and tiers dashboards: stored sweeps and their fits, the tier
catalog, and the tiers measured from the ledger."""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.allocation.repository import to_ns
from app.catalog import instance_prices
from app.domain.breakeven import SpeculationModel, StepTimeModel, is_model_free, speedup
from app.domain.breakeven_report import breakeven_fit_as_dict, fit_breakeven
from app.domain.breakeven_sweep import SweepPoint
from app.domain.errors import InvalidInput
from app.domain.periods import Month
from app.ledger.repository import current_run_id
from app.models import Deployment, LedgerEntry, Sweep, SweepPointRecord, UsageRecord
from dashboards.data import merged_intervals

BOOTSTRAP_SAMPLES = 200
TIER_CATALOG = "data/tiers.json"
"""The tier catalog inside the ``app`` package (prototype / scaled / enterprise)."""


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
    """The fit as ``breakeven_fit_as_dict`` gives it (stored with the sweep, or computed)."""
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
def _fit(points: tuple[SweepPoint, ...]) -> dict[str, Any]:
    return breakeven_fit_as_dict(fit_breakeven(points, bootstrap_samples=BOOTSTRAP_SAMPLES))


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


def _fitted_curves(fit: dict[str, Any], points: Sequence[SweepPoint]) -> pd.DataFrame:
    step = StepTimeModel(**{k: float(v) for k, v in fit["step_model"].items()})
    params = {p["name"]: float(p["value"]) for p in fit["parameters"]}
    levels = [float(p.concurrency) for p in points]
    grid = np.geomspace(min(levels), max(levels), 80)
    frames = []
    for config in fit["configs"]:
        name = str(config["config"])
        cost_name = "drafter_overhead_s" if is_model_free(config["method"]) else "draft_cost_ratio"
        spec = SpeculationModel(
            k=int(config["k"]),
            mean_acceptance_length=float(config["mean_acceptance_length"]),
            **{cost_name: params.get(f"{name}.{cost_name}", 0.0)},
        )
        frames.append(
            pd.DataFrame(
                {
                    "config": name,
                    "concurrency": grid,
                    "speedup": speedup(step, spec, concurrency=grid),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def breakeven_frames(engine: Engine, *, sweep_id: int | None = None) -> BreakevenFrames:
    """The newest sweep (or ``sweep_id``): measured speedups, fitted curve, breakeven, schedule.

    Sweeps carry no team (they measure a deployment, not a tenant's traffic), so every caller
    sees them. A sweep without a stored fit is fitted here (cached per sweep content).
    """
    with Session(engine) as session:
        listing = [
            {"id": s.id, "name": s.name, "deployment": s.deployment, "created_at": s.created_at}
            for s in session.scalars(
                select(Sweep).order_by(Sweep.created_at.desc(), Sweep.id.desc())
            )
        ]
        chosen = next((s for s in listing if sweep_id is None or s["id"] == sweep_id), None)
        if chosen is None:
            return _empty_breakeven(listing)
        sweep = session.get(Sweep, chosen["id"])
        stored_fit = sweep.fit if sweep else None
        records = session.scalars(
            select(SweepPointRecord)
            .where(SweepPointRecord.sweep_id == chosen["id"])
            .order_by(SweepPointRecord.id)
        ).all()
        points = tuple(
            SweepPoint(
                config=r.config,
                method=r.method,
                k=r.k,
                concurrency=r.concurrency,
                output_tokens_per_s=r.output_tokens_per_s,
                tpot_p50_s=_float(r.tpot_p50_s),
                acceptance_rate=_float((r.metrics or {}).get("acceptance_rate")),
                mean_acceptance_length=_float((r.metrics or {}).get("mean_acceptance_length")),
            )
            for r in records
        )
    empty = _empty_breakeven(listing)
    if not points:
        return BreakevenFrames(
            **{**empty.__dict__, "sweep": chosen, "message": "this sweep has no points"}
        )
    measured = _measured_speedups(points)
    try:
        fit = stored_fit or _fit(points)
    except InvalidInput as exc:
        return BreakevenFrames(
            **{**empty.__dict__, "sweep": chosen, "points": measured, "message": f"no fit: {exc}"}
        )
    ci = fit.get("breakeven_ci") or [None, None]
    summary = pd.DataFrame(
        [
            {
                "config": fit.get("config"),
                "breakeven_concurrency": _float(fit.get("breakeven_concurrency")),
                "ci_low": _float(ci[0]),
                "ci_high": _float(ci[1]),
            }
        ]
    )
    schedule = pd.DataFrame(
        [list(band) for band in fit.get("schedule") or []], columns=["start", "end", "k"]
    )
    return BreakevenFrames(
        sweep=chosen,
        points=measured,
        curve=_fitted_curves(fit, points),
        summary=summary,
        schedule=schedule,
        fit=fit,
        sweeps=listing,
    )


# ---------------------------------------------------------------------------------- tiers


@dataclass(frozen=True)
class TierSpec:
    """One maturity tier of the catalog."""

    name: str
    instance_type: str | None
    instances: tuple[int, ...]
    """Instance counts the tier spans, e.g. ``(2, 4)``."""
    sessions: tuple[float, float] | None
    quoted_usd_per_1k_session_seconds: float | None
    quoted_usd_per_month: float | None


def _pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and value:
        return float(value[0]), float(value[-1])
    if isinstance(value, dict) and {"min", "max"} <= set(value):
        return float(value["min"]), float(value["max"])
    if isinstance(value, int | float | str) and str(value).strip():
        return float(value), float(value)
    return None


def _quoted(item: dict[str, Any], suffix: str) -> float | None:
    for key in ("quoted", "brief", "quoted_figures", "claims"):
        block = item.get(key)
        if isinstance(block, dict):
            for name, value in block.items():
                if suffix in name and (pair := _pair(value)) is not None:
                    return math.sqrt(pair[0] * pair[1]) if pair[0] > 0 else pair[1]
    return None


def parse_tier_catalog(data: dict[str, Any]) -> list[TierSpec]:
    """Tiers from the catalog's JSON: ``{"tiers": [...]}`` or ``{"tiers": {name: {...}}}``.

    Each tier may give ``instance_type``, ``instances`` (a count or ``[min, max]``),
    ``sessions`` (``[min, max]`` concurrent sessions) and a ``quoted`` object whose keys
    contain ``per_1k_session_seconds`` or ``per_month`` (a number, decimal string or range).
    """
    raw = data.get("tiers", data)
    items = (
        [{"name": name, **body} for name, body in raw.items() if isinstance(body, dict)]
        if isinstance(raw, dict)
        else [i for i in raw if isinstance(i, dict)]
    )
    specs = []
    for item in items:
        count = _pair(item.get("instances", item.get("instance_count", item.get("nodes", 1))))
        specs.append(
            TierSpec(
                name=str(item.get("name") or item.get("tier")),
                instance_type=item.get("instance_type"),
                instances=tuple(sorted({int(count[0]), int(count[1])})) if count else (1,),
                sessions=_pair(item.get("sessions", item.get("concurrent_sessions"))),
                quoted_usd_per_1k_session_seconds=_quoted(item, "1k_session_seconds"),
                quoted_usd_per_month=_quoted(item, "per_month"),
            )
        )
    return specs


def load_tier_catalog(path: Path | None = None) -> list[TierSpec]:
    """The tier catalog (default ``app/data/tiers.json``); empty when there is none."""
    try:
        text = (
            path.read_text("utf-8")
            if path is not None
            else resources.files("app").joinpath(TIER_CATALOG).read_text("utf-8")
        )
    except FileNotFoundError:
        return []
    return parse_tier_catalog(json.loads(text))


@dataclass(frozen=True)
class TierFrames:
    modelled: pd.DataFrame
    quoted: pd.DataFrame
    measured: pd.DataFrame
    catalog_found: bool


def _modelled(tiers: Sequence[TierSpec]) -> pd.DataFrame:
    prices = instance_prices()
    frames = []
    for tier in tiers:
        price = prices.get(tier.instance_type or "")
        if price is None or tier.sessions is None:
            continue
        grid = np.geomspace(max(tier.sessions[0] / 2, 1.0), tier.sessions[1] * 2, 40)
        for count in tier.instances:
            hourly = float(price.usd_per_hour) * count
            frames.append(
                pd.DataFrame(
                    {
                        "tier": tier.name,
                        "label": f"list price, {count}x {price.instance_type}",
                        "concurrency": grid,
                        "usd_per_1k_session_seconds": hourly / (3.6 * grid),
                    }
                )
            )
    columns = ["tier", "label", "concurrency", "usd_per_1k_session_seconds"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def _measured_tiers(engine: Engine, month: str, team: str | None) -> pd.DataFrame:
    columns = ["tier", "concurrency", "usd_per_1k_session_seconds", "session_seconds"]
    parsed = Month.parse(month)
    start, end = parsed.start, parsed.end
    with Session(engine) as session:
        run_id = current_run_id(session, month)
        if run_id is None:
            return pd.DataFrame(columns=columns)
        cost = (
            select(
                LedgerEntry.event_id, func.sum(LedgerEntry.effective_cost_micros).label("micros")
            )
            .where(
                LedgerEntry.run_id == run_id,
                LedgerEntry.event_id.is_not(None),
                LedgerEntry.currency == "USD",
            )
            .group_by(LedgerEntry.event_id)
            .subquery()
        )
        query = (
            select(
                Deployment.tier,
                UsageRecord.session_id,
                UsageRecord.concurrency,
                UsageRecord.arrived_at,
                UsageRecord.finished_at,
                cost.c.micros,
            )
            .join(Deployment, Deployment.name == UsageRecord.deployment)
            .outerjoin(cost, cost.c.event_id == UsageRecord.event_id)
            .where(
                Deployment.tier.is_not(None),
                UsageRecord.arrived_at >= start,
                UsageRecord.arrived_at < end,
            )
        )
        if team is not None:
            query = query.where(UsageRecord.team == team)
        rows = session.execute(query).all()
    if not rows:
        return pd.DataFrame(columns=columns)
    # Concurrency in powers of two, so that each point rests on enough requests.
    level = [2 ** math.ceil(math.log2(max(int(r[2] or 1), 1))) for r in rows]
    keys = [(r[0], lv, r[1]) for r, lv in zip(rows, level, strict=True)]
    merged = merged_intervals(keys, to_ns([r[3] for r in rows]), to_ns([r[4] for r in rows]))
    merged["seconds"] = (merged["end"] - merged["start"]) / 1e9
    merged["tier"] = [k[0] for k in merged["key"]]
    merged["concurrency"] = [k[1] for k in merged["key"]]
    seconds = merged.groupby(["tier", "concurrency"])["seconds"].sum()
    spent = pd.DataFrame(
        {
            "tier": [r[0] for r in rows],
            "concurrency": level,
            "micros": [int(r[5] or 0) for r in rows],
        }
    )
    micros = spent.groupby(["tier", "concurrency"])["micros"].sum()
    joined = pd.concat([micros, seconds], axis=1).reset_index()
    joined = joined[joined["seconds"] > 0]
    joined["usd_per_1k_session_seconds"] = joined["micros"] / 1e6 * 1000 / joined["seconds"]
    return joined.rename(columns={"seconds": "session_seconds"})[columns]


def tier_frames(
    engine: Engine,
    *,
    month: str,
    team: str | None = None,
    catalog: Sequence[TierSpec] | None = None,
) -> TierFrames:
    """Catalog model and quoted figures per tier, and what the ledger measured in ``month``.

    Measured: the effective cost of requests to deployments registered with a tier, over their
    session-seconds, per concurrency (requests in flight on the replica, in powers of two).
    """
    tiers = load_tier_catalog() if catalog is None else list(catalog)
    quoted = pd.DataFrame(
        [
            (
                t.name,
                t.sessions[0],
                t.sessions[1],
                t.quoted_usd_per_1k_session_seconds,
                t.quoted_usd_per_month,
            )
            for t in tiers
            if t.sessions and t.quoted_usd_per_1k_session_seconds is not None
        ],
        columns=[
            "tier",
            "sessions_low",
            "sessions_high",
            "usd_per_1k_session_seconds",
            "usd_per_month",
        ],
    )
    return TierFrames(
        modelled=_modelled(tiers),
        quoted=quoted,
        measured=_measured_tiers(engine, month, team),
        catalog_found=bool(tiers),
    )
