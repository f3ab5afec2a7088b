from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.allocation import (
    FAST_PATH_MAX_GROUP_WEIGHT,
    HourAllocation,
    allocate_hour,
    allocate_hours_arrays,
    split_by_weight,
    split_by_weight_arrays,
)
from app.domain.errors import EmptyAllocationBasis, InvalidInput

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TOTALS = st.one_of(st.integers(-1000, 1000), INT64, st.integers(-(10**40), 10**40))
WEIGHT = st.one_of(
    st.integers(0, 10),
    st.integers(0, 2**63 - 1),
    st.fractions(min_value=0, max_value=10**6, max_denominator=10**9),
)
WEIGHTS = st.dictionaries(
    st.text(alphabet="abcdefgh", max_size=2), WEIGHT, min_size=1, max_size=12
).filter(lambda w: any(v > 0 for v in w.values()))


class TestSplitByWeight:
    @settings(deadline=None)
    @given(total=TOTALS, weights=WEIGHTS)
    def test_split_sums_exactly_and_stays_within_one_micro(self, total, weights):
        parts = split_by_weight(total, weights)
        assert sum(parts.values()) == total
        assert set(parts) == {k for k, w in weights.items() if w > 0}
        denominator = sum(Fraction(w) for w in weights.values())
        for key, part in parts.items():
            assert abs(part - total * Fraction(weights[key]) / denominator) < 1

    @settings(deadline=None)
    @given(total=TOTALS, weights=WEIGHTS)
    def test_split_of_negative_total_mirrors_positive(self, total, weights):
        assert split_by_weight(-total, weights) == {
            k: -v for k, v in split_by_weight(total, weights).items()
        }

    @settings(deadline=None)
    @given(total=TOTALS, weights=WEIGHTS)
    def test_split_parts_have_the_sign_of_the_total(self, total, weights):
        parts = split_by_weight(total, weights).values()
        assert all(p >= 0 for p in parts) if total >= 0 else all(p <= 0 for p in parts)

    @settings(deadline=None)
    @given(total=st.integers(-(10**12), 10**12), weights=WEIGHTS, factor=st.integers(1, 1000))
    def test_split_depends_only_on_weight_ratios(self, total, weights, factor):
        scaled = {k: w * factor for k, w in weights.items()}
        assert split_by_weight(total, scaled) == split_by_weight(total, weights)

    def test_split_breaks_ties_by_smaller_key(self):
        assert split_by_weight(2, {"c": 1, "a": 1, "b": 1}) == {"a": 1, "b": 1, "c": 0}
        assert split_by_weight(-2, {"c": 1, "a": 1, "b": 1}) == {"a": -1, "b": -1, "c": 0}

    def test_split_gives_zero_total_as_zeros(self):
        assert split_by_weight(0, {"a": 3, "b": 0}) == {"a": 0}

    @pytest.mark.parametrize("weights", [{}, {"a": 0}, {"a": 0, "b": Fraction(0)}])
    def test_split_without_positive_weight_raises(self, weights):
        with pytest.raises(EmptyAllocationBasis):
            split_by_weight(100, weights)

    @pytest.mark.parametrize("weight", [-1, Fraction(-1, 2), float("nan"), float("inf")])
    def test_split_rejects_negative_or_non_finite_weight(self, weight):
        with pytest.raises(InvalidInput):
            split_by_weight(100, {"a": 1, "b": weight})

    def test_split_accepts_exact_fractions(self):
        assert split_by_weight(10, {"a": Fraction(1, 3), "b": Fraction(2, 3)}) == {"a": 3, "b": 7}


def _scalar_reference(totals: Any, groups: Any, weights: Any) -> Any:
    out = np.zeros(len(weights), dtype=np.int64)
    for g, total in enumerate(totals):
        rows = [i for i, gi in enumerate(groups) if gi == g]
        parts = split_by_weight(int(total), {i: int(weights[i]) for i in rows})
        for i in rows:
            out[i] = parts.get(i, 0)
    return out


SMALL_WEIGHT = st.integers(0, 2**40)


@st.composite
def grouped_weights(draw, weight=SMALL_WEIGHT):
    n_groups = draw(st.integers(1, 6))
    totals = draw(st.lists(INT64, min_size=n_groups, max_size=n_groups))
    groups = draw(st.lists(st.integers(0, n_groups - 1), min_size=0, max_size=40))
    groups += list(range(n_groups))  # every group has a row
    weights = draw(st.lists(weight, min_size=len(groups), max_size=len(groups)))
    for g in range(n_groups):  # ... with a positive weight
        weights[len(groups) - n_groups + g] = max(weights[len(groups) - n_groups + g], 1)
    return np.array(totals, dtype=np.int64), np.array(groups), np.array(weights, dtype=np.int64)


WEIGHT_MIX = st.one_of(
    st.integers(0, 3),
    st.integers(0, 2**40),
    st.integers(0, 2**52),
    st.integers(2**55, 2**56),
    st.integers(0, 2**62),
)


class TestSplitByWeightArrays:
    @settings(max_examples=200, deadline=None)
    @given(data=grouped_weights(weight=WEIGHT_MIX))
    def test_arrays_equal_scalar_split(self, data):
        totals, groups, weights = data
        parts = split_by_weight_arrays(totals, groups, weights)
        assert parts.dtype == np.int64
        np.testing.assert_array_equal(parts, _scalar_reference(totals, groups, weights))

    @settings(deadline=None)
    @given(data=grouped_weights())
    def test_arrays_sum_to_each_total(self, data):
        totals, groups, weights = data
        parts = split_by_weight_arrays(totals, groups, weights)
        sums = [int(parts[groups == g].sum()) for g in range(len(totals))]
        assert sums == totals.tolist()

    def test_arrays_fast_path_bound_edge(self):
        total = 2**63 - 1
        weights = np.array([FAST_PATH_MAX_GROUP_WEIGHT - 3, 1, 2], dtype=np.int64)
        for w in (weights, weights + np.array([1, 0, 0])):  # at and just above the bound
            parts = split_by_weight_arrays(np.array([total]), np.zeros(3, dtype=np.int64), w)
            expected = _scalar_reference([total], [0, 0, 0], w)
            np.testing.assert_array_equal(parts, expected)

    def test_arrays_handle_int64_min_total(self):
        parts = split_by_weight_arrays(
            np.array([-(2**63)]), np.array([0, 0, 0]), np.array([1, 1, 1])
        )
        assert [int(p) for p in parts] == [
            -3074457345618258603,
            -3074457345618258603,
            -3074457345618258602,
        ]

    def test_arrays_raise_on_group_without_positive_weight(self):
        with pytest.raises(EmptyAllocationBasis):
            split_by_weight_arrays(np.array([5, 5]), np.array([0, 1]), np.array([1, 0]))
        with pytest.raises(EmptyAllocationBasis):
            split_by_weight_arrays(np.array([5, 5]), np.array([0, 0]), np.array([1, 1]))

    @pytest.mark.parametrize(
        ("totals", "groups", "weights"),
        [
            (np.array([5]), np.array([0]), np.array([-1])),
            (np.array([5]), np.array([1]), np.array([1])),
            (np.array([5]), np.array([0, 0]), np.array([1])),
            (np.array([5.0]), np.array([0]), np.array([1])),
            (np.array([5]), np.array([0]), np.array([1.5])),
        ],
    )
    def test_arrays_reject_bad_input(self, totals, groups, weights):
        with pytest.raises(InvalidInput):
            split_by_weight_arrays(totals, groups, weights)

    def test_arrays_empty(self):
        empty = np.array([], dtype=np.int64)
        assert split_by_weight_arrays(empty, empty, empty).shape == (0,)


HOUR_REQUESTS = st.dictionaries(
    st.text(alphabet="abcdef", min_size=1, max_size=3), st.integers(0, 3_600_000_000), max_size=8
)


class TestAllocateHour:
    @settings(deadline=None)
    @given(
        cost=st.integers(-(10**12), 10**12),
        capacity=st.integers(0, 8 * 3_600_000_000),
        requests=HOUR_REQUESTS,
        share_idle=st.booleans(),
    )
    def test_hour_conserves_cost(self, cost, capacity, requests, share_idle):
        result = allocate_hour(cost, capacity, requests, share_idle=share_idle)
        assert set(result.requests) == set(requests)
        assert sum(result.requests.values()) + result.idle_micros == cost
        used = sum(requests.values())
        if used:
            basis = used if share_idle else max(capacity, used)
            for rid, g in requests.items():
                assert abs(result.requests[rid] - Fraction(cost * g, basis)) < 1
        if share_idle and used:
            assert result.idle_micros == 0

    @settings(deadline=None)
    @given(
        cost=st.integers(-(10**12), 10**12),
        capacity=st.integers(0, 8 * 3_600_000_000),
        requests=HOUR_REQUESTS,
        share_idle=st.booleans(),
    )
    def test_hour_credit_mirrors_charge(self, cost, capacity, requests, share_idle):
        plus = allocate_hour(cost, capacity, requests, share_idle=share_idle)
        minus = allocate_hour(-cost, capacity, requests, share_idle=share_idle)
        assert minus.idle_micros == -plus.idle_micros
        assert minus.requests == {k: -v for k, v in plus.requests.items()}

    def test_hour_example(self):
        result = allocate_hour(1_000_000, 100, {"a": 30, "b": 20}, share_idle=False)
        assert result == HourAllocation(requests={"a": 300_000, "b": 200_000}, idle_micros=500_000)
        shared = allocate_hour(1_000_000, 100, {"a": 30, "b": 20}, share_idle=True)
        assert shared == HourAllocation(requests={"a": 600_000, "b": 400_000}, idle_micros=0)

    @pytest.mark.parametrize("share_idle", [False, True])
    def test_hour_without_usage_is_all_idle(self, share_idle):
        assert allocate_hour(700, 100, {}, share_idle=share_idle) == HourAllocation({}, 700)
        assert allocate_hour(700, 0, {"a": 0}, share_idle=share_idle) == HourAllocation(
            {"a": 0}, 700
        )

    def test_hour_clamps_basis_when_usage_exceeds_capacity(self):
        result = allocate_hour(900, 100, {"a": 100, "b": 50}, share_idle=False)
        assert result == HourAllocation(requests={"a": 600, "b": 300}, idle_micros=0)

    def test_hour_rejects_negative_quantities(self):
        with pytest.raises(InvalidInput):
            allocate_hour(1, -1, {}, share_idle=False)
        with pytest.raises(InvalidInput):
            allocate_hour(1, 10, {"a": -1}, share_idle=False)

    @settings(max_examples=100, deadline=None)
    @given(
        hours=st.lists(
            st.tuples(st.integers(-(10**12), 10**12), st.integers(0, 10**10), HOUR_REQUESTS),
            min_size=1,
            max_size=5,
        ),
        share_idle=st.booleans(),
    )
    def test_hours_arrays_equal_scalar(self, hours, share_idle):
        hour_index, usage, expected = [], [], []
        for h, (_, _, requests) in enumerate(hours):
            for rid in sorted(requests):
                hour_index.append(h)
                usage.append(requests[rid])
        result = allocate_hours_arrays(
            cost_micros=np.array([c for c, _, _ in hours], dtype=np.int64),
            capacity_gpu_us=np.array([g for _, g, _ in hours], dtype=np.int64),
            hour_index=np.array(hour_index, dtype=np.int64),
            request_gpu_us=np.array(usage, dtype=np.int64),
            share_idle=share_idle,
        )
        idle = []
        for cost, capacity, requests in hours:
            scalar = allocate_hour(cost, capacity, requests, share_idle=share_idle)
            expected += [scalar.requests[rid] for rid in sorted(requests)]
            idle.append(scalar.idle_micros)
        assert result.request_micros.tolist() == expected
        assert result.idle_micros.tolist() == idle


def test_arrays_split_a_month_quickly():
    """1M request rows over a month of hours: vectorised, well under a second here."""
    rng = np.random.default_rng(7)
    n_hours, n_rows = 744, 1_000_000
    hours = rng.integers(0, n_hours, n_rows)
    usage = rng.integers(0, 3_600_000_000, n_rows)
    result = allocate_hours_arrays(
        cost_micros=rng.integers(-(10**9), 10**11, n_hours),
        capacity_gpu_us=np.full(n_hours, 8 * 3_600_000_000 * 1000),
        hour_index=hours,
        request_gpu_us=usage,
        share_idle=False,
    )
    assert result.request_micros.shape == (n_rows,)
