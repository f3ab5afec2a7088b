"""Budgets' pure rules: scopes, thresholds, the unit price of metered usage."""

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.budgets.rules.budget import (
    BudgetScope,
    PeriodKind,
    ScopeKind,
    UnitPrice,
    budget_period,
    check_thresholds,
    evaluate,
)

micros = st.integers(min_value=0, max_value=10**15)
gpu_ns = st.integers(min_value=1, max_value=10**18)


@given(cost=micros, reference=gpu_ns, parts=st.lists(st.integers(0, 10**15), max_size=20))
def test_metered_cost_is_the_price_times_the_gpu_time_to_the_micro(cost, reference, parts):
    price = UnitPrice(cost_micros=cost, gpu_ns=reference)
    assert price.cost_of(reference) == cost  # the reference day prices itself exactly
    for part in parts:
        exact = part * cost / reference
        assert abs(price.cost_of(part) - exact) <= 0.5 + 1e-9 * exact
    # splitting usage never moves the total by more than half a micro per part
    assert abs(sum(price.cost_of(p) for p in parts) - price.cost_of(sum(parts))) <= len(parts)


@given(amount=st.integers(1, 10**12), spent=micros,
       thresholds=st.lists(st.integers(1, 1000), max_size=6))  # fmt: skip
def test_a_threshold_is_reached_exactly_when_spend_reaches_its_share(amount, spent, thresholds):
    state = evaluate(amount_micros=amount, spent_micros=spent, thresholds=thresholds,
                     hard_limit_micros=None)  # fmt: skip
    for threshold in thresholds:
        assert (threshold in state.reached) == (spent * 100 >= amount * threshold)
    more = evaluate(amount_micros=amount, spent_micros=spent + 1, thresholds=thresholds,
                    hard_limit_micros=None)  # fmt: skip
    assert set(state.reached) <= set(more.reached)  # spending more never un-reaches one


@given(limit=st.integers(1, 10**12), spent=micros)
def test_the_hard_limit_is_reached_at_the_limit(limit, spent):
    state = evaluate(amount_micros=limit, spent_micros=spent, thresholds=(),
                     hard_limit_micros=limit)  # fmt: skip
    assert state.over_hard_limit == (spent >= limit)


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("team=search", ScopeKind.team, "search"),
        ("cost-center=cc 7", ScopeKind.cost_center, "cc 7"),
        ("deployment = smol", ScopeKind.deployment, "smol"),
        ("tag:app=rag=x", ScopeKind.tag, "app=rag=x"),
    ],
)
def test_scopes_parse_and_print_back(text, kind, value):
    scope = BudgetScope.parse(text)
    assert (scope.kind, scope.value) == (kind, value)
    assert BudgetScope.parse(str(scope)) == scope


@pytest.mark.parametrize("text", ["team", "team=", "squad=x", "tag:=v", "tag:k", "tag:k="])
def test_bad_scopes_say_how_to_write_one(text):
    with pytest.raises(ValueError, match="scope"):
        BudgetScope.parse(text)


def test_a_tag_scope_matches_on_the_tag_alone():
    scope = BudgetScope.parse("tag:app=rag")
    common = {"team": "t", "cost_center": None, "deployment": "d"}
    assert scope.matches(tags={"app": "rag", "env": "x"}, **common)
    assert not scope.matches(tags={"app": "chat"}, **common)


def test_periods_and_thresholds():
    now = datetime(2026, 12, 4, 21, tzinfo=UTC)
    assert budget_period(PeriodKind.month, None, None, now) == (
        datetime(2026, 12, 1, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    )
    with pytest.raises(ValueError, match="start and an end"):
        budget_period(PeriodKind.custom, None, None, now)
    assert check_thresholds([100, 50, 50]) == (50, 100)
    with pytest.raises(ValueError, match="between 1 and 1000"):
        check_thresholds([1001])
