"""Properties of the 1.3 split arithmetic: AllocatedRatio units and split quantities sum back
exactly, for any weights; each part is within one unit of its exact share."""

from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from app.domain.focus import (
    RATIO_DIGITS,
    decimal_text,
    ratio_units,
    split_quantity,
    split_quantity_units,
    split_units,
    split_weights,
)
from app.ledger.focus_export import units_text

WEIGHTS = st.lists(st.integers(0, 2**62), min_size=1, max_size=30).filter(any)
QUANTITIES = st.decimals(
    min_value=Decimal("-1e15"), max_value=Decimal("1e15"), allow_nan=False, places=15
)


@given(weights=WEIGHTS)
def test_ratios_sum_to_exactly_one(weights: list[int]) -> None:
    units = ratio_units(np.array(weights, np.int64))
    assert sum(units) == 10**RATIO_DIGITS
    texts = [f"{Decimal(u).scaleb(-RATIO_DIGITS):f}" for u in units]
    assert sum(Decimal(t) for t in texts) == 1
    total = sum(weights)
    for unit, weight in zip(units, weights, strict=True):
        assert abs(Fraction(unit) - Fraction(10**RATIO_DIGITS * weight, total)) < 1


@given(total=QUANTITIES, weights=WEIGHTS)
def test_split_quantities_sum_back_exactly(total: Decimal, weights: list[int]) -> None:
    parts = split_quantity(total, np.array(weights, np.int64))
    with localcontext() as exact:  # sums of 30-digit decimals, unrounded
        exact.prec = 100
        assert sum(parts) == total
        assert sum(Decimal(decimal_text(p)) for p in parts) == total
    assert all(p == 0 for p, w in zip(parts, weights, strict=True) if w == 0)


@given(total=st.integers(-(10**30), 10**30), weights=WEIGHTS)
def test_split_units_of_any_size_sum_back(total: int, weights: list[int]) -> None:
    parts = split_units(total, np.array(weights, np.int64))
    assert sum(parts) == total
    assert all(p * total >= 0 for p in parts)  # a credit splits into credits


@given(
    amounts=st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=10),
    gpu_ns=st.integers(0, 10**15),
)
def test_weights_come_from_the_first_cost_basis_with_amounts(
    amounts: list[int], gpu_ns: int
) -> None:
    zeros = [0] * len(amounts)
    fallback = np.full(len(amounts), gpu_ns, np.int64)
    weights = split_weights([zeros, amounts], fallback)
    if any(amounts):
        assert weights.tolist() == [abs(a) for a in amounts]
    else:
        assert weights.any()
        assert len(set(weights.tolist())) == 1


@given(
    units=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20),
    digits=st.sampled_from([0, 1, 6, 9, 12, 15]),
)
def test_units_text_by_arrow_is_the_decimal_text(units: list[int], digits: int) -> None:
    expected = [decimal_text(Decimal(u).scaleb(-digits)) for u in units]
    assert units_text(np.array(units, np.int64), digits).to_pylist() == expected


@given(total=QUANTITIES, weights=WEIGHTS)
def test_quantity_parts_as_text_are_the_decimal_parts(total: Decimal, weights: list[int]) -> None:
    parts, digits = split_quantity_units(total, np.array(weights, np.int64))
    expected = [decimal_text(p) for p in split_quantity(total, np.array(weights, np.int64))]
    assert units_text(parts, digits).to_pylist() == expected
