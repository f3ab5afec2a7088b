"""The dashboards' only database access: SQLAlchemy selects read into pandas DataFrames.

Every function takes an optional ``team``: with it, the frames hold that team's rows only (its
requests, its share of shared costs), never another team's name or money. Idle and unallocated
cost belong to no team, so a team's frames have none. Times are aware UTC; money is integer
micros. The frames' columns are the ones :mod:`dashboards.figures` documents.
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import DateTime, Engine, String, func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from app.allocation.repository import to_ns
from app.catalog import instance_prices
from app.domain.breakeven import SpeculationModel, StepTimeModel, is_model_free, speedup
from app.domain.breakeven_report import breakeven_fit_as_dict, fit_breakeven
from app.domain.breakeven_sweep import SweepPoint
from app.domain.errors import InvalidInput
from app.domain.periods import month_bounds
from app.ledger.reconcile import reconcile
from app.models import AllocationRun, Deployment, LedgerEntry, Sweep, SweepPointRecord, UsageRecord

HOUR_NS = 3_600 * 10**9
BOOTSTRAP_SAMPLES = 200
"""Bootstrap replicates when a sweep has no stored fit and the dashboard fits it (a few s)."""
TIER_CATALOG = "data/tiers.json"
"""The tier catalog inside the ``app`` package (prototype / scaled / enterprise)."""


def _run_id(session: Session, month: str) -> int | None:
    return session.scalar(
        select(AllocationRun.id).where(
            AllocationRun.month == month, AllocationRun.status == "current"
        )
    )


def _hour(engine: Engine, column: Any) -> ColumnElement[Any]:
    """The UTC hour an instant falls in, as the database can group by it."""
    if engine.dialect.name == "postgresql":
        return func.date_trunc("hour", func.timezone("UTC", column), type_=DateTime())
    return func.strftime("%Y-%m-%d %H:00:00", column, type_=String())


def _utc(values: pd.Series) -> pd.Series:
    return pd.to_datetime(values, utc=True)


def months(engine: Engine) -> list[str]:
    """Months with a current allocation run or with usage, newest first."""
    with Session(engine) as session:
        allocated = set(
            session.scalars(
                select(AllocationRun.month).where(
                    AllocationRun.status == "current", AllocationRun.month.is_not(None)
                )
            )
        )
        first, last = session.execute(
            select(func.min(UsageRecord.arrived_at), func.max(UsageRecord.arrived_at))
        ).one()
    found = {m for m in allocated if m}
    if first is not None and last is not None:
        year, month = first.year, first.month
        while (year, month) <= (last.year, last.month):
            found.add(f"{year:04d}-{month:02d}")
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return sorted(found, reverse=True)


def default_month(engine: Engine) -> str:
    """The newest month with an allocation run, else with usage, else the current month."""
    with Session(engine) as session:
        allocated = session.scalar(
            select(func.max(AllocationRun.month)).where(AllocationRun.status == "current")
        )
        if allocated:
            return str(allocated)
        latest = session.scalar(select(func.max(UsageRecord.arrived_at)))
    return f"{latest or datetime.now(UTC):%Y-%m}"


def teams(engine: Engine) -> list[str]:
    """Every team seen in usage (for an administrator's team picker; never for a team)."""
    with Session(engine) as session:
        return sorted(
            t
            for t in session.scalars(
                select(UsageRecord.team).distinct().where(UsageRecord.team.is_not(None))
            )
            if t
        )


# ---------------------------------------------------------------------------------- cost


def _team_label(kind: str, team: str | None) -> str:
    if kind in ("idle", "unallocated"):
        return f"({kind})"
    if team is None:
        return "(shared)" if kind == "shared" else "(no team)"
    return team


def ledger_by_hour(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """The month's current allocation run, per charge hour, team label, kind and currency.

    Adjustments to closed months are left out, as in the reconciliation, so the rows add up to
    the month's bill. Team labels: the team, or ``(idle)``, ``(unallocated)``, ``(shared)``,
    ``(no team)``.
    """
    columns = ["period_start", "team", "kind", "currency", "effective_micros", "billed_micros"]
    start, _ = month_bounds(month)
    with Session(engine) as session:
        run_id = _run_id(session, month)
        if run_id is None:
            return pd.DataFrame(columns=columns)
        hour = _hour(engine, LedgerEntry.charge_period_start).label("hour")
        query = (
            select(
                hour,
                LedgerEntry.team,
                LedgerEntry.kind,
                LedgerEntry.currency,
                func.sum(LedgerEntry.effective_cost_micros),
                func.sum(LedgerEntry.billed_cost_micros),
            )
            .where(LedgerEntry.run_id == run_id, LedgerEntry.kind != "adjustment")
            .group_by(hour, LedgerEntry.team, LedgerEntry.kind, LedgerEntry.currency)
        )
        if team is not None:
            query = query.where(LedgerEntry.team == team)
        rows = session.execute(query).all()
    frame = pd.DataFrame(
        [(h, _team_label(k, t), k, c, int(e), int(b)) for h, t, k, c, e, b in rows], columns=columns
    )
    periods = _utc(frame["period_start"])
    frame["period_start"] = periods.fillna(pd.Timestamp(start))  # rows without a charge period
    return frame.groupby(["period_start", "team", "kind", "currency"], as_index=False)[
        ["effective_micros", "billed_micros"]
    ].sum()


def usage_by_hour(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """Requests, tokens and speculation counters per arrival hour, deployment and team."""
    columns = [
        "period_start",
        "deployment",
        "team",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "num_drafts",
        "draft_tokens",
        "accepted_tokens",
    ]
    start, end = month_bounds(month)
    hour = _hour(engine, UsageRecord.arrived_at).label("hour")
    query = (
        select(
            hour,
            UsageRecord.deployment,
            UsageRecord.team,
            func.count(),
            func.sum(UsageRecord.prompt_tokens),
            func.sum(UsageRecord.completion_tokens),
            func.sum(UsageRecord.num_drafts),
            func.sum(UsageRecord.draft_tokens),
            func.sum(UsageRecord.accepted_tokens),
        )
        .where(UsageRecord.arrived_at >= start, UsageRecord.arrived_at < end)
        .group_by(hour, UsageRecord.deployment, UsageRecord.team)
    )
    if team is not None:
        query = query.where(UsageRecord.team == team)
    with Session(engine) as session:
        rows = session.execute(query).all()
    frame = pd.DataFrame(
        [
            (h, d, _team_label("request", t), *(int(v or 0) for v in rest))
            for h, d, t, *rest in rows
        ],
        columns=columns,
    )
    frame["period_start"] = _utc(frame["period_start"])
    return frame


def _merged_intervals(
    keys: Sequence[object], start_ns: np.ndarray, end_ns: np.ndarray
) -> pd.DataFrame:
    """Union of the intervals of each key: one row per disjoint covered stretch."""
    codes, uniques = pd.factorize(pd.Series(list(keys), dtype=object))
    frame = pd.DataFrame({"code": codes, "start": start_ns, "end": end_ns})
    frame = frame[frame["end"] > frame["start"]].sort_values(["code", "start"])
    if frame.empty:
        return pd.DataFrame({"key": [], "start": [], "end": []})
    reach = frame.groupby("code")["end"].cummax()
    previous_reach = reach.groupby(frame["code"]).shift(1)
    block = (previous_reach.isna() | (frame["start"] > previous_reach)).cumsum()
    merged = (
        frame.groupby(block)
        .agg(code=("code", "first"), start=("start", "min"), end=("end", "max"))
        .reset_index(drop=True)
    )
    merged["key"] = list(np.asarray(uniques, dtype=object)[merged["code"].to_numpy()])
    return merged[["key", "start", "end"]]


def _seconds_per_hour(merged: pd.DataFrame) -> pd.DataFrame:
    """Split covered stretches at hour boundaries: seconds covered per (key, hour)."""
    if merged.empty:
        return pd.DataFrame({"key": [], "hour_ns": [], "seconds": []})
    start = merged["start"].to_numpy(np.int64)
    end = merged["end"].to_numpy(np.int64)
    first, last = start // HOUR_NS, (end - 1) // HOUR_NS
    count = (last - first + 1).astype(np.int64)
    index = np.repeat(np.arange(len(merged)), count)
    offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    hour = first[index] + offset
    piece = np.minimum(end[index], (hour + 1) * HOUR_NS) - np.maximum(start[index], hour * HOUR_NS)
    return pd.DataFrame(
        {"key": merged["key"].to_numpy()[index], "hour_ns": hour * HOUR_NS, "seconds": piece / 1e9}
    )


def session_seconds_by_hour(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """Session-seconds per hour and team: the union of each session's request intervals.

    Requests are those that arrived in the month (as in the unit-cost report); a session's
    covered time is cut at hour boundaries, so hours add up to days and months exactly.
    """
    start, end = month_bounds(month)
    query = select(
        UsageRecord.team, UsageRecord.session_id, UsageRecord.arrived_at, UsageRecord.finished_at
    ).where(UsageRecord.arrived_at >= start, UsageRecord.arrived_at < end)
    if team is not None:
        query = query.where(UsageRecord.team == team)
    with Session(engine) as session:
        rows = session.execute(query).all()
    if not rows:
        return pd.DataFrame(columns=["period_start", "team", "session_seconds"])
    labels = [_team_label("request", r[0]) for r in rows]
    keys = [(label, r[1]) for label, r in zip(labels, rows, strict=True)]
    merged = _merged_intervals(keys, to_ns([r[2] for r in rows]), to_ns([r[3] for r in rows]))
    pieces = _seconds_per_hour(merged)
    pieces["team"] = [key[0] for key in pieces["key"]]
    pieces["period_start"] = pd.to_datetime(pieces["hour_ns"].astype(np.int64), unit="ns", utc=True)
    return (
        pieces.groupby(["period_start", "team"])["seconds"]
        .sum()
        .rename("session_seconds")
        .reset_index()
    )


def reconciliation_frame(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """Per currency: the bill and its parts, requests + shared + idle + unallocated, in micros.

    A team gets its own request and shared cost only; ``bill_micros``, ``idle_micros``,
    ``unallocated_micros`` and ``balanced`` are then NA, since they describe every team's spend.
    """
    columns = [
        "currency",
        "bill_micros",
        "request_micros",
        "shared_micros",
        "idle_micros",
        "unallocated_micros",
        "balanced",
    ]
    if team is not None:
        with Session(engine) as session:
            run_id = _run_id(session, month)
            rows = (
                []
                if run_id is None
                else session.execute(
                    select(
                        LedgerEntry.currency,
                        LedgerEntry.kind,
                        func.sum(LedgerEntry.effective_cost_micros),
                    )
                    .where(
                        LedgerEntry.run_id == run_id,
                        LedgerEntry.team == team,
                        LedgerEntry.kind.in_(("request", "shared")),
                    )
                    .group_by(LedgerEntry.currency, LedgerEntry.kind)
                ).all()
            )
        sums: dict[str, dict[str, int]] = {}
        for currency, kind, micros in rows:
            sums.setdefault(currency, {})[kind] = int(micros)
        return pd.DataFrame(
            [
                (c, pd.NA, parts.get("request", 0), parts.get("shared", 0), pd.NA, pd.NA, pd.NA)
                for c, parts in sorted(sums.items())
            ],
            columns=columns,
        )
    result = reconcile(engine, month)
    if result.run_id is None and not result.bill:
        return pd.DataFrame(columns=columns)
    by_currency = result.by_currency()
    records = []
    for currency in sorted(set(result.bill) | set(by_currency)):
        kinds = {kind: line.effective for kind, line in by_currency.get(currency, {}).items()}
        bill = result.bill.get(currency)
        records.append(
            (
                currency,
                bill.effective if bill else 0,
                kinds.get("request", 0),
                kinds.get("shared", 0),
                kinds.get("idle", 0),
                kinds.get("unallocated", 0),
                result.balanced,
            )
        )
    return pd.DataFrame(records, columns=columns)


# ------------------------------------------------------------------------------ breakeven


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
    start, end = month_bounds(month)
    with Session(engine) as session:
        run_id = _run_id(session, month)
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
    merged = _merged_intervals(keys, to_ns([r[3] for r in rows]), to_ns([r[4] for r in rows]))
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
