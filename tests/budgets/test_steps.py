"""Brownout steps (pure): how they are written and checked, which one is in force, and since
when each was taken."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.budgets.rules.steps import (
    BudgetStep,
    StepAction,
    check_steps,
    step_in_force,
    taken_since,
)

WARN = BudgetStep(75, StepAction.warn)
ROUTE = BudgetStep(90, StepAction.route, "smol-plain")


@pytest.mark.parametrize(("text", "step"), [("75:warn", WARN), (" 90:route=smol-plain ", ROUTE)])
def test_steps_parse_and_print_back(text: str, step: BudgetStep) -> None:
    assert BudgetStep.parse(text) == step
    assert BudgetStep.parse(str(step)) == step
    assert BudgetStep.from_json(step.to_json()) == step


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("warn", "PERCENT:warn"),
        ("x:warn", "PERCENT:warn"),
        ("75:slow", "not 'slow'"),
    ],
)
def test_a_bad_step_says_how_to_write_one(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        BudgetStep.parse(text)


@pytest.mark.parametrize(
    ("steps", "limit", "says"),
    [
        ([WARN], None, "give the budget a hard limit"),
        ([BudgetStep(100, StepAction.warn)], 10, "between 1 and 99"),
        ([BudgetStep(0, StepAction.warn)], 10, "between 1 and 99"),
        ([BudgetStep(90, StepAction.route)], 10, "names the deployment"),
        ([BudgetStep(90, StepAction.warn, "d2")], 10, "routes nowhere"),
        ([WARN, BudgetStep(75, StepAction.route, "d2")], 10, "same percentage"),
    ],
)
def test_steps_are_checked(steps: list[BudgetStep], limit: int | None, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        check_steps(steps, hard_limit_micros=limit)


def test_steps_are_kept_in_the_order_they_act() -> None:
    assert check_steps([ROUTE, WARN], hard_limit_micros=10) == (WARN, ROUTE)
    assert check_steps([], hard_limit_micros=None) == ()


@given(limit=st.integers(1, 10**9), spent=st.integers(0, 2 * 10**9))
def test_the_step_in_force_is_the_highest_one_reached_exactly(limit: int, spent: int) -> None:
    found = step_in_force((WARN, ROUTE), hard_limit_micros=limit, spent_micros=spent)
    if spent * 100 >= limit * 90:
        assert found == ROUTE
    elif spent * 100 >= limit * 75:
        assert found == WARN
    else:
        assert found is None


def test_each_step_is_taken_in_the_hour_spend_reached_it() -> None:
    t0 = datetime(2026, 12, 7, tzinfo=UTC)
    hourly = {t0 + timedelta(hours=h): micros for h, micros in enumerate([50, 20, 5, 20, 10])}
    # Cumulative 50, 70, 75, 95, 105 of a limit of 100.
    taken = taken_since((WARN, ROUTE), hard_limit_micros=100, hourly=hourly)
    assert taken == {WARN: t0 + timedelta(hours=2), ROUTE: t0 + timedelta(hours=3)}
    assert taken_since((WARN,), hard_limit_micros=1000, hourly=hourly) == {}
