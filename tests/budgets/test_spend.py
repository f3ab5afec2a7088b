"""Budget spend on SQLite and PostgreSQL: the ledger where it has allocated, metered usage at
the deployment's latest unit cost after it, the true-up, thresholds, hard limits, alerts."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.alerts import add_webhook
from app.auth.service import create_key
from app.budgets import service
from app.budgets.rules.budget import BudgetScope
from app.budgets.spend import spend
from app.models import AlertDelivery, Budget
from tests.budgets.helpers import OCTOBER, allocate, bill, hour, register, use

D = 1_000_000  # micros per unit of currency


def _spend(session: Session, scope: str) -> tuple[int, int]:
    found = spend(session, BudgetScope.parse(scope), OCTOBER.start, OCTOBER.end, currency="USD")
    return found.ledger_micros, found.metered_micros


@pytest.fixture
def october(session: Session, tmp_path: Path) -> Session:
    """d1 billed 4.00 an hour for hours 0-9; search holds half of each hour 0-11, ads a
    quarter (cost center cc-ads, tag app=rag); allocated, so hours 10-11 are metered only."""
    register(session)
    bill(session, tmp_path, range(10), "4.00", "bill-a")
    use(session, range(12), team="search", share=0.5)
    use(session, range(12), team="ads", share=0.25, cost_center="cc-ads", tags={"app": "rag"})
    allocate(session)
    return session


@pytest.mark.parametrize(
    ("scope", "ledger", "metered"),
    [
        ("team=search", 20 * D, 4 * D),  # 2.00 an hour allocated; 2 hours at 4.00/GPU-hour
        ("team=ads", 10 * D, 2 * D),
        ("cost_center=cc-ads", 10 * D, 2 * D),
        ("tag:app=rag", 10 * D, 2 * D),
        ("tag:app=chat", 20 * D, 4 * D),
        # the deployment pays its idle too: 4.00 an hour, priced per metered GPU-hour
        ("deployment=d1", 40 * D, 8 * D),
        ("team=nobody", 0, 0),
    ],
)
def test_spend_is_the_ledger_then_metered_usage_at_the_latest_unit_cost(
    october, scope, ledger, metered
):
    assert _spend(october, scope) == (ledger, metered)


@pytest.mark.parametrize(("later_price", "drift"), [("4.00", 0), ("8.00", 4 * D), ("3.00", -D)])
def test_an_allocation_trues_the_estimate_up_to_the_ledger(october, tmp_path, later_price, drift):
    """Once hours 10-11 are billed and allocated, the ledger replaces the estimate; the two
    differ by exactly the price change times the GPU time that was estimated."""
    estimated = sum(_spend(october, "team=search"))
    bill(october, tmp_path, range(10, 12), later_price, "bill-b")
    allocate(october)
    ledger, metered = _spend(october, "team=search")
    assert metered == 0
    assert ledger - estimated == drift
    gpu_hours_estimated, price_change = 2 * 0.5, float(later_price) - 4.0
    assert drift == round(price_change * gpu_hours_estimated * D)


def test_usage_before_any_allocation_is_unpriced_and_said_so(session, tmp_path):
    register(session)
    use(session, range(3), team="search", share=0.5)
    found = spend(session, BudgetScope.parse("team=search"), OCTOBER.start, OCTOBER.end,
                  currency="USD")  # fmt: skip
    assert (found.total_micros, found.unpriced) == (0, ("d1",))
    assert found.metered_gpu_ns == 3 * 1800 * 10**9


def test_thresholds_hard_limit_and_alerts(october):
    now = hour(13)
    budget = service.create_budget(
        october,
        service.NewBudget(
            name="search-monthly",
            scope=BudgetScope.parse("team=search"),
            amount_micros=30 * D,
            currency="USD",
            hard_limit_micros=25 * D,
        ),
        now=now,
    )
    result = service.report(october, budget, now=now)
    assert result.state.spent_micros == 24 * D
    assert result.state.reached == (50, 80)
    assert not result.state.over_hard_limit
    assert service.over_hard_limits(october, now=now) == []
    add_webhook(october, name="ops", url="http://127.0.0.1:9/hook", now=now)
    first = service.raise_alerts(october, now=now)
    assert first >= 2
    assert service.raise_alerts(october, now=now + timedelta(minutes=5)) == 0  # one per event
    keys = set(october.scalars(select(AlertDelivery.dedup_key)))
    assert {f"budget:{budget.id}:2026-10-01:50", f"budget:{budget.id}:2026-10-01:80"} <= keys

    use(october, range(12, 13), team="search", share=0.5)  # +2.00 metered: 26.00
    (over,) = service.over_hard_limits(october, now=now)
    assert (over.name, over.spent_micros, over.period_end) == (
        "search-monthly",
        26 * D,
        OCTOBER.end,
    )
    assert service.over_hard_limits(october, now=OCTOBER.end) == []  # a new month, a new budget
    service.archive_budget(october, "search-monthly")
    assert service.over_hard_limits(october, now=now) == []


def test_a_team_sees_only_its_own_budgets(october):
    for team in ("search", "ads"):
        service.create_budget(
            october,
            service.NewBudget(name=f"b-{team}", scope=BudgetScope.parse(f"team={team}"),
                              amount_micros=D, currency="USD"),
        )  # fmt: skip
    assert [b.name for b in service.list_budgets(october, team="ads")] == ["b-ads"]
    with pytest.raises(service.BudgetNotFound):
        service.get_budget(october, "b-search", team="ads")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"amount_micros": 0}, "must be positive"),
        ({"hard_limit_micros": -1}, "must be positive"),
        ({"thresholds": [0, 50]}, "between 1 and 1000"),
        ({"period": "custom"}, "needs --start before --end"),
        ({"period": "custom", "start": hour(1), "end": hour(30)}, "midnight UTC"),
        ({"start": hour(0)}, "takes no --start"),
        ({"name": ""}, "name of 1 to 128"),
    ],
)
def test_bad_budgets_are_refused_and_change_nothing(session, changes, message):
    from app.budgets.rules.budget import PeriodKind

    fields = {"name": "b", "scope": BudgetScope.parse("team=t"), "amount_micros": D,
              "currency": "USD"} | changes  # fmt: skip
    if "period" in fields:
        fields["period"] = PeriodKind(fields["period"])
    with pytest.raises(service.BudgetError, match=message):
        service.create_budget(session, service.NewBudget(**fields))
    assert session.scalar(select(func.count()).select_from(Budget)) == 0


def test_a_taken_name_is_a_conflict(session):
    create_key(session, team="t", admin=False)
    new = service.NewBudget(name="b", scope=BudgetScope.parse("team=t"), amount_micros=D,
                            currency="USD")  # fmt: skip
    service.create_budget(session, new)
    with pytest.raises(service.BudgetExists):
        service.create_budget(session, new)


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ("team=serach", "unknown team 'serach' (did you mean 'search'?)"),
        ("deployment=d1x", "unknown deployment 'd1x' (did you mean 'd1'?)"),
    ],
)
def test_a_budget_for_an_unknown_team_or_deployment_is_refused(october, scope, message):
    new = service.NewBudget(name="b", scope=BudgetScope.parse(scope), amount_micros=D,
                            currency="USD")  # fmt: skip
    with pytest.raises(service.BudgetError, match=re.escape(message)):
        service.create_budget(october, new)
    assert october.scalar(select(func.count()).select_from(Budget)) == 0


def test_on_the_first_day_of_spend_the_forecast_is_never_below_what_is_spent(october):
    """All spend so far is today's, and the forecast learns from complete days only: with no
    complete day yet it has nothing to learn from, yet its total must not fall below the
    24.00 already booked (it said 0.00 before)."""
    now = hour(13)
    budget = service.create_budget(
        october,
        service.NewBudget(
            name="search-first-day",
            scope=BudgetScope.parse("team=search"),
            amount_micros=1000 * D,
            currency="USD",
        ),
        now=now,
    )
    result = service.report(october, budget, now=now)
    forecast = result.forecast
    assert forecast is not None
    assert result.state.spent_micros == 24 * D
    assert forecast.actual_micros == 0  # no complete day in the period yet
    totals = (forecast.lower_total_micros, forecast.expected_total_micros)
    assert totals == (24 * D, 24 * D)
    assert forecast.upper_total_micros >= 24 * D
    assert all(day.lower_micros >= 24 * D for day in forecast.days)
