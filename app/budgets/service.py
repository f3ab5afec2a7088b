"""Budgets: create, list and archive them; where each stands (spend, thresholds, hard limit,
month-end forecast); which are over their hard limit (what the proxy enforces); and the
alerts their thresholds and forecasts raise."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts import Alert, AlertKind, Severity, enqueue
from app.auth.teams import known_teams
from app.budgets.rules.budget import (
    DEFAULT_THRESHOLDS,
    BudgetScope,
    BudgetState,
    PeriodKind,
    ScopeKind,
    budget_period,
    check_thresholds,
    evaluate,
)
from app.budgets.rules.forecast import (
    BudgetCrossing,
    SpendForecast,
    at_least_spent,
    budget_crossing,
    forecast_spend,
)
from app.budgets.rules.steps import BudgetStep, check_steps, taken_since
from app.budgets.spend import SpendBreakdown, spend
from app.domain.errors import Conflict, Invalid, NotFound
from app.domain.money import format_micros
from app.domain.names import unknown_name
from app.models import Budget, Deployment

HISTORY_DAYS = 56
"""Days of spend before the period that the forecast learns from (eight weeks)."""
FORECAST_LEVEL = 0.9


class BudgetError(Invalid):
    code = "invalid_budget"


class BudgetNotFound(NotFound):
    code = "budget_not_found"


class BudgetExists(Conflict):
    code = "budget_exists"


@dataclass(frozen=True, slots=True)
class NewBudget:
    name: str
    scope: BudgetScope
    amount_micros: int
    currency: str
    period: PeriodKind = PeriodKind.month
    start: datetime | None = None
    end: datetime | None = None
    thresholds: Sequence[int] = DEFAULT_THRESHOLDS
    hard_limit_micros: int | None = None
    steps: Sequence[BudgetStep] = ()
    """Brownout steps before the hard limit (:mod:`app.budgets.rules.steps`)."""


def _check_scope(session: Session, scope: BudgetScope) -> None:
    """A budget for a team or deployment nobody has heard of would never see spend: refuse
    it, naming the close known ones (a team is known by its usage or an API key)."""
    if scope.kind is ScopeKind.team:
        teams = known_teams(session)
        if scope.value not in teams:
            raise BudgetError(
                unknown_name(
                    "team",
                    scope.value,
                    teams,
                    hint="a team becomes known with its first request or API key "
                    "(`specledger keys create --team NAME`)",
                )
            )
    elif scope.kind is ScopeKind.deployment:
        _check_deployment(session, scope.value)


def _check_deployment(session: Session, name: str, *, prefix: str = "") -> None:
    names = set(session.scalars(select(Deployment.name)))
    if name not in names:
        hint = "register it with `specledger deployments add`"
        raise BudgetError(prefix + unknown_name("deployment", name, names, hint=hint))


def steps_of(budget: Budget) -> tuple[BudgetStep, ...]:
    return tuple(BudgetStep.from_json(step) for step in budget.steps or ())


def create_budget(session: Session, new: NewBudget, *, now: datetime | None = None) -> Budget:
    """Add a budget.

    Raises:
        BudgetError: For a non-positive amount or hard limit, a bad period or thresholds.
        BudgetExists: If the name is taken.
    """
    if not new.name.strip() or len(new.name) > 128:
        raise BudgetError("a budget needs a name of 1 to 128 characters")
    if new.amount_micros <= 0:
        raise BudgetError("the budget amount must be positive")
    if new.hard_limit_micros is not None and new.hard_limit_micros <= 0:
        raise BudgetError("the hard limit must be positive")
    try:
        thresholds = check_thresholds(new.thresholds)
        steps = check_steps(new.steps, hard_limit_micros=new.hard_limit_micros)
    except ValueError as exc:
        raise BudgetError(str(exc)) from None
    if new.period is PeriodKind.custom:
        if new.start is None or new.end is None or new.end <= new.start:
            raise BudgetError("a custom period needs --start before --end")
        if new.start != _midnight(new.start) or new.end != _midnight(new.end):
            raise BudgetError("a custom period starts and ends at midnight UTC (whole days)")
    elif new.start is not None or new.end is not None:
        raise BudgetError("a monthly budget takes no --start or --end")
    if session.scalar(select(Budget.id).where(Budget.name == new.name)) is not None:
        raise BudgetExists(f"a budget named {new.name!r} exists")
    _check_scope(session, new.scope)
    for step in steps:
        if step.route_to is not None:
            _check_deployment(session, step.route_to, prefix=f"step {step}: ")
    budget = Budget(
        name=new.name,
        scope_kind=new.scope.kind.value,
        scope_value=new.scope.value,
        period=new.period.value,
        period_start=new.start,
        period_end=new.end,
        amount_micros=new.amount_micros,
        currency=new.currency,
        thresholds=list(thresholds),
        hard_limit_micros=new.hard_limit_micros,
        steps=[step.to_json() for step in steps],
        created_at=now or datetime.now(UTC),
    )
    session.add(budget)
    session.flush()
    return budget


def scope_of(budget: Budget) -> BudgetScope:
    return BudgetScope(ScopeKind(budget.scope_kind), budget.scope_value)


def list_budgets(
    session: Session, *, team: str | None = None, include_archived: bool = False
) -> list[Budget]:
    """Budgets by id; with ``team``, only that team's (what a team key may see)."""
    query = select(Budget).order_by(Budget.id)
    if team is not None:
        query = query.where(Budget.scope_kind == ScopeKind.team.value, Budget.scope_value == team)
    if not include_archived:
        query = query.where(Budget.archived_at.is_(None))
    return list(session.scalars(query))


def get_budget(session: Session, ident: str, *, team: str | None = None) -> Budget:
    """A live budget by id or name (``team``: only that team's).

    Raises:
        BudgetNotFound: If there is none (or it is another team's).
    """
    query = select(Budget).where(Budget.archived_at.is_(None))
    query = query.where(Budget.id == int(ident) if ident.isdigit() else Budget.name == ident)
    budget = session.scalar(query)
    if budget is None or (
        team is not None and (budget.scope_kind, budget.scope_value) != ("team", team)
    ):
        raise BudgetNotFound("no such budget (see GET /v1/budgets or `specledger budgets list`)")
    return budget


def archive_budget(session: Session, ident: str, *, now: datetime | None = None) -> Budget:
    """Archive a budget: it stops alerting and limiting (kept for the record)."""
    budget = get_budget(session, ident)
    budget.archived_at = now or datetime.now(UTC)
    session.flush()
    return budget


@dataclass(frozen=True, slots=True)
class BudgetReport:
    """Where a budget stands at ``now``."""

    budget: Budget
    scope: BudgetScope
    period_start: datetime
    period_end: datetime
    spend: SpendBreakdown
    """From the history the forecast learns from to the period's end."""
    state: BudgetState
    forecast: SpendForecast | None
    crossing: BudgetCrossing | None
    """When spend reaches the amount (None: not within the period)."""

    @property
    def steps_taken(self) -> dict[BudgetStep, datetime]:
        """Each brownout step that spend has reached this period, and the hour it did."""
        limit = self.budget.hard_limit_micros
        if limit is None or not self.budget.steps:
            return {}
        hourly = {
            hour: ledger + metered
            for hour, (ledger, metered) in self.spend.hours.items()
            if self.period_start <= hour < self.period_end
        }
        return taken_since(steps_of(self.budget), hard_limit_micros=limit, hourly=hourly)


def report(
    session: Session, budget: Budget, *, now: datetime, forecast: bool = True
) -> BudgetReport:
    """The budget's spend in its period at ``now``, its thresholds and hard limit, and (with
    ``forecast``) the period total forecast from daily spend and the day it reaches the
    amount."""
    scope = scope_of(budget)
    start, end = budget_period(
        PeriodKind(budget.period), budget.period_start, budget.period_end, now
    )
    day = timedelta(days=1)
    history_start = _midnight(start) - (day * HISTORY_DAYS if forecast else timedelta(0))
    breakdown = spend(session, scope, history_start, end, currency=budget.currency)
    spent = breakdown.between(start.date(), end_day(end))
    state = evaluate(
        amount_micros=budget.amount_micros,
        spent_micros=spent,
        thresholds=budget.thresholds,
        hard_limit_micros=budget.hard_limit_micros,
    )
    predicted = crossing = None
    if forecast:
        period_first, period_end_day = start.date(), end_day(end)
        as_of = min(max(now.date(), period_first), period_end_day)
        history = [d.total_micros for d in breakdown.days if d.day < as_of]
        predicted = forecast_spend(
            history,
            first_day=history_start.date(),
            period_start=period_first,
            period_end=period_end_day,
            level=FORECAST_LEVEL,
        )
        predicted = at_least_spent(predicted, spent)
        crossing = budget_crossing(predicted, budget.amount_micros)
    return BudgetReport(budget, scope, start, end, breakdown, state, predicted, crossing)


def _midnight(at: datetime) -> datetime:
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


def end_day(end: datetime) -> date:
    """The first day not in a period ending at ``end`` (exclusive)."""
    return end.date() if end == _midnight(end) else end.date() + timedelta(days=1)


@dataclass(frozen=True, slots=True)
class HardLimitStanding:
    """Where a live budget with a hard limit stands in its current period: once spend
    reaches the limit, new requests in its scope get 429 until ``period_end``."""

    budget_id: int
    name: str
    scope: BudgetScope
    currency: str
    hard_limit_micros: int
    spent_micros: int
    period_end: datetime
    steps: tuple[BudgetStep, ...] = ()
    """Its brownout steps, in the order they act."""

    @property
    def reached(self) -> bool:
        return self.spent_micros >= self.hard_limit_micros

    @property
    def remaining_micros(self) -> int:
        """What the scope may still spend before the limit (never below zero)."""
        return max(0, self.hard_limit_micros - self.spent_micros)


def hard_limit_standings(
    session: Session, *, now: datetime, metered_before: datetime | None = None
) -> list[HardLimitStanding]:
    """Every live budget with a hard limit whose period holds ``now``, with its spend (of
    metered usage that finished before ``metered_before`` only, when given)."""
    standings = []
    query = select(Budget).where(
        Budget.archived_at.is_(None), Budget.hard_limit_micros.is_not(None)
    )
    for budget in session.scalars(query):
        start, end = budget_period(
            PeriodKind(budget.period), budget.period_start, budget.period_end, now
        )
        if not start <= now < end:
            continue
        spent = spend(
            session,
            scope_of(budget),
            start,
            end,
            currency=budget.currency,
            metered_before=metered_before,
        ).total_micros
        assert budget.hard_limit_micros is not None
        standings.append(
            HardLimitStanding(
                budget.id,
                budget.name,
                scope_of(budget),
                budget.currency,
                budget.hard_limit_micros,
                spent,
                end,
                steps_of(budget),
            )
        )
    return standings


def over_hard_limits(session: Session, *, now: datetime) -> list[HardLimitStanding]:
    """Every live budget with a hard limit that its spend has reached, now."""
    return [s for s in hard_limit_standings(session, now=now) if s.reached]


def raise_alerts(session: Session, *, now: datetime) -> int:
    """Alerts for every live budget: each threshold reached this period, and a forecast that
    the period will end over the amount. One alert per event (deduplicated by the alerts
    channel), so this can run as often as a cron job likes. Returns the new deliveries."""
    created = 0
    for budget in list_budgets(session):
        result = report(session, budget, now=now)
        created += sum(enqueue(session, alert, now) for alert in budget_alerts(result, now=now))
    return created


def budget_alerts(result: BudgetReport, *, now: datetime) -> list[Alert]:
    """The alerts a budget's report calls for (pure given the report)."""
    budget, state = result.budget, result.state
    period = f"{result.period_start:%Y-%m-%d}"
    money = {
        "budget": budget.name,
        "scope": str(result.scope),
        "currency": budget.currency,
        "amount": format_micros(budget.amount_micros),
        "spent": format_micros(state.spent_micros),
        "period_start": result.period_start.isoformat(),
        "period_end": result.period_end.isoformat(),
    }
    alerts = [
        Alert(
            kind=AlertKind.budget_threshold,
            dedup_key=f"budget:{budget.id}:{period}:{threshold}",
            title=f"Budget {budget.name} reached {threshold}%",
            text=(
                f"{result.scope} has spent {format_micros(state.spent_micros)} "
                f"{budget.currency} of {format_micros(budget.amount_micros)} "
                f"({state.percent:.1f}%) in the period ending {result.period_end:%Y-%m-%d}."
            ),
            severity=Severity.critical if threshold >= 100 else Severity.warning,
            occurred_at=now,
            details=money | {"threshold_percent": threshold},
        )
        for threshold in state.reached
    ]
    for step, since in result.steps_taken.items():
        does = (
            f"sends its requests to {step.route_to}"
            if step.route_to
            else "marks its responses with X-SpecLedger-Budget-Step"
        )
        alerts.append(
            Alert(
                kind=AlertKind.budget_step,
                dedup_key=f"budget-step:{budget.id}:{period}:{step.at_percent}",
                title=f"Budget {budget.name} reached its {step.at_percent}% step: {step.action}",
                text=(
                    f"{result.scope} has spent {format_micros(state.spent_micros)} "
                    f"{budget.currency}, {step.at_percent}% or more of its hard limit of "
                    f"{format_micros(budget.hard_limit_micros or 0)}, since the hour from "
                    f"{since:%Y-%m-%d %H:%M} UTC: the proxy {does} until the period ends "
                    f"{result.period_end:%Y-%m-%d}."
                ),
                severity=Severity.warning,
                occurred_at=now,
                details=money
                | {
                    "hard_limit": format_micros(budget.hard_limit_micros or 0),
                    "step": step.to_json(),
                    "taken_since": since.isoformat(),
                },
            )
        )
    forecast, crossing = result.forecast, result.crossing
    if (
        forecast is not None
        and crossing is not None
        and not crossing.already_crossed
        and crossing.expected_day is not None
    ):
        alerts.append(
            Alert(
                kind=AlertKind.forecast_crossing,
                dedup_key=f"forecast:{budget.id}:{period}",
                title=f"Budget {budget.name} is forecast to be exceeded on {crossing.expected_day}",
                text=(
                    f"{result.scope} is forecast to spend {format_micros(forecast.expected_total_micros)} "
                    f"{budget.currency} (90% interval {format_micros(forecast.lower_total_micros)} to "
                    f"{format_micros(forecast.upper_total_micros)}) against a budget of "
                    f"{format_micros(budget.amount_micros)}; expected to reach it on "
                    f"{crossing.expected_day} (earliest {crossing.earliest_day})."
                ),
                severity=Severity.warning,
                occurred_at=now,
                details=money
                | {
                    "forecast_total": format_micros(forecast.expected_total_micros),
                    "forecast_lower": format_micros(forecast.lower_total_micros),
                    "forecast_upper": format_micros(forecast.upper_total_micros),
                    "expected_crossing_day": crossing.expected_day.isoformat(),
                    "earliest_crossing_day": crossing.earliest_day.isoformat(),
                    "model": forecast.model.value,
                },
            )
        )
    return alerts
