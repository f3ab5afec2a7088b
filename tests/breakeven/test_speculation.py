"""Leviathan, Kalman, Matias (2023) formulas: equation 1, theorems 3.8 and 3.11, corollary 3.9."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.breakeven.rules.speculation import (
    acceptance_breakeven,
    alpha_from_acceptance_length,
    arithmetic_operations_factor,
    draft_acceptance_rate,
    expected_tokens_per_step,
    optimal_k,
    walltime_speedup,
)
from app.domain.errors import InvalidInput, NoBreakeven

ALPHA = st.floats(min_value=0.0, max_value=1.0)
OPEN_ALPHA = st.floats(min_value=0.0, max_value=0.999)
K = st.integers(min_value=1, max_value=16)
COST = st.floats(min_value=0.0, max_value=0.99)


def closed_form_tokens(alpha: float, k: int) -> float:
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@given(alpha=OPEN_ALPHA, k=st.integers(min_value=0, max_value=16))
def test_expected_tokens_matches_equation_1(alpha, k):
    assert expected_tokens_per_step(alpha=alpha, k=k) == pytest.approx(closed_form_tokens(alpha, k))


def test_expected_tokens_limits():
    assert expected_tokens_per_step(alpha=1.0, k=4) == 5.0
    assert expected_tokens_per_step(alpha=0.0, k=4) == 1.0
    assert expected_tokens_per_step(alpha=0.7, k=0) == 1.0
    # Continuous at alpha -> 1: the closed form approaches k + 1.
    assert expected_tokens_per_step(alpha=1 - 1e-9, k=4) == pytest.approx(5.0, rel=1e-8)
    # Hand values: 1 + 0.8 + 0.64 + 0.512 = 2.952.
    assert expected_tokens_per_step(alpha=0.8, k=3) == pytest.approx(2.952)


@given(alpha=OPEN_ALPHA, k=st.integers(min_value=0, max_value=16), c=COST)
def test_speedup_matches_theorem_3_8(alpha, k, c):
    expected = (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))
    assert walltime_speedup(alpha=alpha, k=k, cost_ratio=c) == pytest.approx(expected)


@given(alpha=OPEN_ALPHA, c=COST)
def test_corollary_3_9_gamma_one(alpha, c):
    assert walltime_speedup(alpha=alpha, k=1, cost_ratio=c) == pytest.approx((1 + alpha) / (1 + c))


@given(alpha=OPEN_ALPHA, k=K, c=COST)
def test_operations_factor_matches_theorem_3_11(alpha, k, c):
    expected = (1 - alpha) * (k * c + k + 1) / (1 - alpha ** (k + 1))
    assert arithmetic_operations_factor(alpha=alpha, k=k, cost_ratio_ops=c) == pytest.approx(
        expected
    )


@pytest.mark.parametrize(
    ("cost_ratio", "k", "alpha_star"),
    [
        # reference/specdecode.md section 3.1, minimum alpha table (3 decimals).
        (0.02, 1, 0.020),
        (0.02, 3, 0.057),
        (0.02, 5, 0.091),
        (0.10, 1, 0.100),
        (0.10, 3, 0.233),
        (0.10, 5, 0.334),
        (0.375, 1, 0.375),
        (0.375, 3, 0.584),
        (0.375, 5, 0.690),
    ],
)
def test_acceptance_breakeven_table(cost_ratio, k, alpha_star):
    assert acceptance_breakeven(k=k, cost_ratio=cost_ratio) == pytest.approx(alpha_star, abs=5e-4)


@given(k=K, c=st.floats(min_value=1e-4, max_value=0.99))
def test_acceptance_breakeven_gives_speedup_one(k, c):
    alpha = acceptance_breakeven(k=k, cost_ratio=c)
    assert 0.0 <= alpha < 1.0
    assert walltime_speedup(alpha=alpha, k=k, cost_ratio=c) == pytest.approx(1.0, abs=1e-9)


def test_acceptance_breakeven_edges():
    assert acceptance_breakeven(k=3, cost_ratio=0.0) == 0.0
    with pytest.raises(NoBreakeven):
        acceptance_breakeven(k=3, cost_ratio=1.0)
    with pytest.raises(InvalidInput):
        acceptance_breakeven(k=0, cost_ratio=0.1)
    with pytest.raises(InvalidInput):
        acceptance_breakeven(k=3, cost_ratio=-0.1)


@pytest.mark.parametrize(
    ("alpha", "cost_ratio", "best_k", "best_speedup"),
    [
        # reference/specdecode.md section 3.1, optimal gamma and speedup.
        (0.7, 0.02, 8, 2.76),
        (0.8, 0.02, 11, 3.82),
        (0.7, 0.10, 4, 1.98),
        (0.8, 0.10, 6, 2.47),
        (0.7, 0.375, 2, 1.25),
        (0.8, 0.375, 2, 1.39),
    ],
)
def test_optimal_k(alpha, cost_ratio, best_k, best_speedup):
    k = optimal_k(alpha=alpha, cost_ratio=cost_ratio)
    assert k == best_k
    assert walltime_speedup(alpha=alpha, k=k, cost_ratio=cost_ratio) == pytest.approx(
        best_speedup, abs=5e-3
    )


def test_optimal_k_is_zero_when_speculation_never_pays():
    assert optimal_k(alpha=0.1, cost_ratio=0.5) == 0
    assert optimal_k(alpha=1.0, cost_ratio=0.0, max_k=7) == 7


@settings(max_examples=50)
@given(alpha=ALPHA, k=K)
def test_alpha_from_acceptance_length_inverts_equation_1(alpha, k):
    length = expected_tokens_per_step(alpha=alpha, k=k)
    recovered = alpha_from_acceptance_length(mean_acceptance_length=length, k=k)
    assert expected_tokens_per_step(alpha=recovered, k=k) == pytest.approx(length, abs=1e-9)


def test_alpha_from_acceptance_length_rejects_impossible_lengths():
    with pytest.raises(InvalidInput, match="mean acceptance length"):
        alpha_from_acceptance_length(mean_acceptance_length=5.5, k=4)
    with pytest.raises(InvalidInput):
        alpha_from_acceptance_length(mean_acceptance_length=0.5, k=4)
    with pytest.raises(InvalidInput):
        alpha_from_acceptance_length(mean_acceptance_length=math.nan, k=4)


def test_draft_acceptance_rate_equals_alpha_only_for_k_one():
    assert draft_acceptance_rate(mean_acceptance_length=1.7, k=1) == pytest.approx(0.7)
    length = expected_tokens_per_step(alpha=0.7, k=4)
    assert draft_acceptance_rate(mean_acceptance_length=length, k=4) < 0.7


@pytest.mark.parametrize("alpha", [-0.1, 1.1, math.nan])
def test_alpha_out_of_range(alpha):
    with pytest.raises(InvalidInput):
        expected_tokens_per_step(alpha=alpha, k=3)
