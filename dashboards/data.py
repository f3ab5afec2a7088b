"""The dashboards' only database access: SQLAlchemy selects read into pandas DataFrames.

Every function takes an optional ``team``: with it, the frames hold that team's rows only (its
requests, its share of shared costs), never another team's name or money. Idle and unallocated
cost belong to no team, so a team's frames have none. Times are aware UTC; money is integer
micros. The frames' columns are the ones :mod:`dashboards.figures` documents.
"""

import itertools
from datetime import UTC, datetime, timedelta

import pandas as pd
from sqlalchemy import Engine, func, select

from app.budgets import service as budgets
from app.db import read_session, utc_hour
from app.domain.findings import Thresholds
from app.domain.ledger import CostLabel, EntryKind
from app.domain.money import split_picos
from app.domain.periods import Month
from app.domain.windows import TimeWindow
from app.ledger.reconcile import reconcile
from app.models import LedgerRollup, SlurmJob, UsageRecord
from app.slurm.report import counted_jobs, slurm_usage
from app.storage.run_repository import allocated_months, current_run_id
from app.waste.service import find_waste
from dashboards.figures import BudgetView, money_2dp
from dashboards.session_seconds import hourly_query

"""Bootstrap replicates when a sweep has no stored fit and the dashboard fits it (a few s)."""


def _utc(values: pd.Series) -> pd.Series:
    return pd.to_datetime(values, utc=True)


def months(engine: Engine) -> list[str]:
    """Months with a current allocation run or with usage, newest first."""
    with read_session(engine) as session:
        found = set(allocated_months(session))
        first, last = session.execute(
            select(func.min(UsageRecord.arrived_at), func.max(UsageRecord.arrived_at))
        ).one()
    if first is not None and last is not None:
        year, month = first.year, first.month
        while (year, month) <= (last.year, last.month):
            found.add(f"{year:04d}-{month:02d}")
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return sorted(found, reverse=True)


def default_month(engine: Engine) -> str:
    """The newest month with an allocation run, else with usage, else the current month."""
    with read_session(engine) as session:
        allocated = allocated_months(session)
        if allocated:
            return allocated[-1]
        latest = session.scalar(select(func.max(UsageRecord.arrived_at)))
    return f"{latest or datetime.now(UTC):%Y-%m}"


def teams(engine: Engine) -> list[str]:
    """Every team seen in usage (for an administrator's team picker; never for a team)."""
    with read_session(engine) as session:
        return sorted(
            t
            for t in session.scalars(
                select(UsageRecord.team).distinct().where(UsageRecord.team.is_not(None))
            )
            if t
        )


# ---------------------------------------------------------------------------------- cost


def _team_label(kind: EntryKind, team: str | None) -> str:
    if kind in (EntryKind.idle, EntryKind.unallocated):
        return CostLabel.of(kind)
    if team is None:
        return CostLabel.shared if kind is EntryKind.shared else CostLabel.no_team
    return team


def ledger_by_hour(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """The month's current allocation run, per charge hour, team label, kind and currency
    (from its rollups, so a month kept in a Parquet store is read the same way).

    Adjustments to closed months are left out, as in the reconciliation, so the rows add up to
    the month's bill. Team labels: the team, or ``(idle)``, ``(unallocated)``, ``(shared)``,
    ``(no team)``.
    """
    columns = ["period_start", "team", "kind", "currency", "effective_micros", "billed_micros"]
    start = Month.parse(month).start
    with read_session(engine) as session:
        run_id = current_run_id(session, month)
        if run_id is None:
            return pd.DataFrame(columns=columns)
        hour = utc_hour(engine.dialect.name, LedgerRollup.charge_period_start).label("hour")
        query = (
            select(
                hour,
                LedgerRollup.team,
                LedgerRollup.kind,
                LedgerRollup.currency,
                func.sum(LedgerRollup.effective_cost_micros),
                func.sum(LedgerRollup.billed_cost_micros),
            )
            .where(LedgerRollup.run_id == run_id, LedgerRollup.kind != EntryKind.adjustment)
            .group_by(hour, LedgerRollup.team, LedgerRollup.kind, LedgerRollup.currency)
        )
        if team is not None:
            query = query.where(LedgerRollup.team == team)
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
    """Requests, tokens, speculation counters and metered GPU-ns per arrival hour,
    deployment and team (the measures of :mod:`app.domain.measures`)."""
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
        "gpu_ns",
    ]
    parsed = Month.parse(month)
    start, end = parsed.start, parsed.end
    hour = utc_hour(engine.dialect.name, UsageRecord.arrived_at).label("hour")
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
            func.sum(UsageRecord.gpu_ns),
        )
        .where(UsageRecord.arrived_at >= start, UsageRecord.arrived_at < end)
        .group_by(hour, UsageRecord.deployment, UsageRecord.team)
    )
    if team is not None:
        query = query.where(UsageRecord.team == team)
    with read_session(engine) as session:
        rows = session.execute(query).all()
    frame = pd.DataFrame(
        [
            (h, d, _team_label(EntryKind.request, t), *(int(v or 0) for v in rest))
            for h, d, t, *rest in rows
        ],
        columns=columns,
    )
    frame["period_start"] = _utc(frame["period_start"])
    return frame


def session_seconds_by_hour(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """Session-seconds per hour and team: the union of each session's request intervals.

    Requests are those that arrived in the month (as in the unit-cost report); a session's
    covered time is cut at hour boundaries, so hours add up to days and months exactly. The
    database does the union and the cut (:mod:`dashboards.session_seconds`): a row per
    hour and team comes back, not one per request.
    """
    parsed = Month.parse(month)
    with read_session(engine) as session:
        rows = session.execute(hourly_query(parsed.start, parsed.end, team)).all()
    if not rows:
        return pd.DataFrame(columns=["period_start", "team", "session_seconds"])
    frame = pd.DataFrame(
        {
            "period_start": pd.to_datetime(
                pd.Series([int(r[0]) for r in rows], dtype="int64"), unit="us", utc=True
            ),
            "team": [_team_label(EntryKind.request, r[1]) for r in rows],
            "session_seconds": [int(r[2]) / 1e6 for r in rows],
        }
    )
    return (
        frame.groupby(["period_start", "team"])["session_seconds"]
        .sum()
        .reset_index()
        .sort_values(["period_start", "team"], ignore_index=True)
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
        with read_session(engine) as session:
            run_id = current_run_id(session, month)
            rows = (
                []
                if run_id is None
                else session.execute(
                    select(
                        LedgerRollup.currency,
                        LedgerRollup.kind,
                        func.sum(LedgerRollup.effective_cost_micros),
                    )
                    .where(
                        LedgerRollup.run_id == run_id,
                        LedgerRollup.team == team,
                        LedgerRollup.kind.in_((EntryKind.request, EntryKind.shared)),
                    )
                    .group_by(LedgerRollup.currency, LedgerRollup.kind)
                ).all()
            )
        sums: dict[str, dict[EntryKind, int]] = {}
        for currency, kind, micros in rows:
            sums.setdefault(currency, {})[kind] = int(micros)
        return pd.DataFrame(
            [
                (
                    c,
                    pd.NA,
                    parts.get(EntryKind.request, 0),
                    parts.get(EntryKind.shared, 0),
                    pd.NA,
                    pd.NA,
                    pd.NA,
                )
                for c, parts in sorted(sums.items())
            ],
            columns=columns,
        )
    with read_session(engine) as session:
        result = reconcile(session, Month.parse(month))
    if result.run_id is None and not result.bill:
        return pd.DataFrame(columns=columns)
    by_currency = result.by_currency()
    records = []
    for currency in sorted(set(result.bill) | set(by_currency)):
        # The reconciliation is exact (picos); the page shows micros, rounded for people.
        kinds = {
            kind: split_picos(line.effective)[0]
            for kind, line in by_currency.get(currency, {}).items()
        }
        bill = result.bill.get(currency)
        records.append(
            (
                currency,
                split_picos(bill.effective)[0] if bill else 0,
                kinds.get(EntryKind.request, 0),
                kinds.get(EntryKind.shared, 0),
                kinds.get(EntryKind.idle, 0),
                kinds.get(EntryKind.unallocated, 0),
                result.balanced,
            )
        )
    return pd.DataFrame(records, columns=columns)


# ------------------------------------------------------------------------------ breakeven


def budget_views(engine: Engine, *, month: str, team: str | None = None) -> list[BudgetView]:
    """Every live budget (a team's own only) as it stood in ``month``: now for the current
    month, the month's last moment for a past one (its period then is that month)."""
    chosen = Month.parse(month)
    now = min(datetime.now(UTC), chosen.end - timedelta(seconds=1))
    views = []
    with read_session(engine) as session:
        for budget in budgets.list_budgets(session, team=team):
            result = budgets.report(session, budget, now=now)
            forecast = result.forecast
            start_day, end_day = result.period_start.date(), budgets.end_day(result.period_end)
            elapsed = [
                d
                for d in result.spend.days
                if start_day <= d.day < min(now.date() + timedelta(days=1), end_day)
            ]
            spent = list(itertools.accumulate(d.total_micros for d in elapsed))
            views.append(
                BudgetView(
                    title=(
                        f"{budget.name} ({result.scope}): {result.state.percent:.0f}% of "
                        f"{money_2dp(budget.amount_micros)} {budget.currency} spent"
                    ),
                    currency=budget.currency,
                    amount_micros=budget.amount_micros,
                    hard_limit_micros=budget.hard_limit_micros,
                    actual=pd.DataFrame(
                        {"day": [pd.Timestamp(d.day) for d in elapsed], "spent_micros": spent}
                    ),
                    forecast=pd.DataFrame(
                        [
                            (pd.Timestamp(d.day), d.expected_micros, d.lower_micros, d.upper_micros)
                            for d in (forecast.days if forecast else ())
                        ],
                        columns=["day", "expected_micros", "lower_micros", "upper_micros"],
                    ),
                    level=forecast.level if forecast else None,
                    steps=_step_lines(result),
                )
            )
    return views


def _step_lines(result: budgets.BudgetReport) -> tuple[tuple[int, str], ...]:
    """Each brownout step's line: where it acts and what it does, since when."""
    limit = result.budget.hard_limit_micros
    if limit is None:
        return ()
    taken = result.steps_taken
    lines = []
    for step in budgets.steps_of(result.budget):
        does = f"route to {step.route_to}" if step.route_to else "warn"
        since = taken.get(step)
        when = f", taken since {since:%b %d %H:00} UTC" if since else ""
        lines.append((limit * step.at_percent // 100, f"{step.at_percent}%: {does}{when}"))
    return tuple(lines)


# ---------------------------------------------------------------------------------- slurm

SLURM_COLUMNS = [
    "cluster",
    "account",
    "partition",
    "jobs",
    "gpu_seconds",
    "cost_micros",
    "currency",
]


def slurm_usage_frame(
    engine: Engine, *, month: str, team: str | None = None, s3_endpoint_url: str | None = None
) -> pd.DataFrame:
    """GPU-seconds and allocated cost of the month's Slurm jobs per cluster, account (the
    team) and partition, as :func:`app.slurm.report.slurm_usage` reports them; a team gets
    its own account only (no ``(idle)`` line).

    Empty (columns :data:`SLURM_COLUMNS`) when no metered GPU job of the viewer's ran in the
    month, found with one cheap query, so a site without Slurm never reads the ledger for it.
    Partition ``(idle)`` is a node's unused GPUs (cost, no GPU-seconds); ``(metered
    requests)`` the requests of a server job. ``currency`` is None on a line without cost.
    """
    chosen = Month.parse(month)
    window = TimeWindow(chosen.start, chosen.end)
    jobs = select(SlurmJob.id).where(*counted_jobs(window))  # the jobs slurm_usage counts
    if team is not None:
        jobs = jobs.where(SlurmJob.account == team)
    with read_session(engine) as session:
        if session.scalar(jobs.limit(1)) is None:
            return pd.DataFrame(columns=SLURM_COLUMNS)
        lines = slurm_usage(session, window, team=team, s3_endpoint_url=s3_endpoint_url)
    return pd.DataFrame(
        [
            (x.cluster, x.account, x.partition, x.jobs, x.gpu_seconds, x.cost_micros, x.currency)
            for x in lines
        ],
        columns=SLURM_COLUMNS,
    )


WASTE_COLUMNS = ["kind", "scope", "key", "window_micros", "monthly_micros", "action", "currency"]


def waste_frame(
    engine: Engine,
    *,
    month: str,
    team: str | None = None,
    s3_endpoint_url: str | None = None,
    default_currency: str = "USD",
) -> pd.DataFrame:
    """The month's waste findings (GET /v1/waste with its default thresholds), largest
    estimated monthly cost first; a team's frame holds the findings of its own traffic."""
    period = Month.parse(month)
    with read_session(engine) as session:
        report = find_waste(
            session,
            window=TimeWindow(period.start, period.end),
            team=team,
            thresholds=Thresholds(),
            now=datetime.now(UTC),
            default_currency=default_currency,
            s3_endpoint_url=s3_endpoint_url,
        )
    rows = [
        {
            "kind": str(f.kind),
            "scope": str(f.scope),
            "key": f.key,
            "window_micros": f.window_cost_micros,
            "monthly_micros": f.monthly_cost_micros,
            "action": f.action,
            "currency": report.currency,
        }
        for f in report.findings
    ]
    return pd.DataFrame(rows, columns=WASTE_COLUMNS)
