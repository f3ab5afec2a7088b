"""Budgets over HTTP: list and read (team keys see their own team's), create and archive
(admin)."""

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path

from app.auth.deps import AdminDep, PrincipalDep
from app.budgets import service
from app.budgets.rules.budget import BudgetScope
from app.budgets.rules.steps import BudgetStep
from app.budgets.schemas import (
    BudgetCreate,
    BudgetRead,
    DaySpendRead,
    ForecastDayRead,
    ForecastRead,
    StepRead,
)
from app.deps import SessionDep, SettingsDep
from app.domain.money import decimal_to_micros
from app.errors import RESPONSES_READ, ErrorBody
from app.kit.schemas import money

router = APIRouter(prefix="/budgets", tags=["budgets"])
Ident = Annotated[str, Path(min_length=1, max_length=128, description="Budget id or name.")]


def read(result: service.BudgetReport) -> BudgetRead:
    budget, state, spend = result.budget, result.state, result.spend
    end_day = service.end_day(result.period_end)
    days = [d for d in spend.days if result.period_start.date() <= d.day < end_day]
    forecast = result.forecast
    crossing = result.crossing
    taken = result.steps_taken
    return BudgetRead(
        id=budget.id,
        name=budget.name,
        scope=str(result.scope),
        period=budget.period,
        period_start=result.period_start,
        period_end=result.period_end,
        amount=money(budget.amount_micros),
        currency=budget.currency,
        thresholds=list(budget.thresholds),
        hard_limit=None if budget.hard_limit_micros is None else money(budget.hard_limit_micros),
        spent=money(state.spent_micros),
        ledger=money(sum(d.ledger_micros for d in days)),
        metered=money(sum(d.metered_micros for d in days)),
        percent=round(state.percent, 3),
        reached=list(state.reached),
        over_hard_limit=state.over_hard_limit,
        steps=[
            StepRead(
                at_percent=step.at_percent,
                action=step.action,
                route_to=step.route_to,
                taken_since=taken.get(step),
            )
            for step in service.steps_of(budget)
        ],
        unpriced_deployments=list(spend.unpriced),
        daily=[
            DaySpendRead(day=d.day, spent=money(d.total_micros), metered=money(d.metered_micros))
            for d in days
        ],
        forecast=None
        if forecast is None
        else ForecastRead(
            model=forecast.model.value,
            level=forecast.level,
            as_of=forecast.as_of,
            expected_total=money(forecast.expected_total_micros),
            lower_total=money(forecast.lower_total_micros),
            upper_total=money(forecast.upper_total_micros),
            crossing_day=crossing.expected_day if crossing else None,
            earliest_crossing_day=crossing.earliest_day if crossing else None,
            days=[
                ForecastDayRead(
                    day=d.day,
                    expected=money(d.expected_micros),
                    lower=money(d.lower_micros),
                    upper=money(d.upper_micros),
                )
                for d in forecast.days
            ],
        ),
    )


@router.get("", response_model=list[BudgetRead], responses=RESPONSES_READ)
def list_budgets(session: SessionDep, principal: PrincipalDep) -> list[BudgetRead]:
    """Live budgets with their spend this period and the period-end forecast; a team key
    sees its own team's budgets only."""
    now = datetime.now(UTC)
    team = None if principal.is_admin else principal.team
    return [
        read(service.report(session, budget, now=now))
        for budget in service.list_budgets(session, team=team)
    ]


@router.get(
    "/{ident}", response_model=BudgetRead, responses={**RESPONSES_READ, 404: {"model": ErrorBody}}
)
def get_budget(ident: Ident, session: SessionDep, principal: PrincipalDep) -> BudgetRead:
    """One budget by id or name, with its daily spend (the burn-down) and forecast."""
    team = None if principal.is_admin else principal.team
    budget = service.get_budget(session, ident, team=team)
    return read(service.report(session, budget, now=datetime.now(UTC)))


@router.post(
    "",
    response_model=BudgetRead,
    status_code=201,
    responses={**RESPONSES_READ, 409: {"model": ErrorBody, "description": "Name taken."}},
)
def create_budget(
    body: BudgetCreate, session: SessionDep, settings: SettingsDep, _admin: AdminDep
) -> BudgetRead:
    """Create a budget (admin)."""
    try:
        scope = BudgetScope.parse(body.scope)
    except ValueError as exc:
        raise service.BudgetError(str(exc)) from None
    budget = service.create_budget(
        session,
        service.NewBudget(
            name=body.name,
            scope=scope,
            amount_micros=decimal_to_micros(body.amount),
            currency=body.currency or settings.default_currency,
            period=body.period,
            start=body.start,
            end=body.end,
            thresholds=body.thresholds,
            hard_limit_micros=None
            if body.hard_limit is None
            else decimal_to_micros(body.hard_limit),
            steps=[BudgetStep(s.at_percent, s.action, s.route_to) for s in body.steps],
        ),
    )
    return read(service.report(session, budget, now=datetime.now(UTC)))


@router.delete("/{ident}", status_code=204, responses={**RESPONSES_READ, 404: {"model": ErrorBody}})
def archive_budget(ident: Ident, session: SessionDep, _admin: AdminDep) -> None:
    """Archive a budget (admin): it stops alerting and limiting."""
    service.archive_budget(session, ident)
