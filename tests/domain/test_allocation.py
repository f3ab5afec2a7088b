from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.allocation import split_array_by_weight, split_by_weight
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


ARRAY_WEIGHTS = st.lists(
    st.one_of(st.integers(0, 10), st.integers(0, 10**13), st.integers(0, 2**62)),
    min_size=1,
    max_size=40,
).filter(any)


class TestSplitArrayByWeight:
    @settings(deadline=None)
    @given(total=INT64, weights=ARRAY_WEIGHTS)
    def test_matches_the_keyed_split_position_by_position(self, total, weights):
        keyed = split_by_weight(total, dict(enumerate(weights)))
        parts = split_array_by_weight(total, np.array(weights, np.int64))
        assert parts.dtype == np.int64
        assert parts.tolist() == [keyed.get(i, 0) for i in range(len(weights))]

    def test_no_positive_weight_is_an_error(self):
        with pytest.raises(EmptyAllocationBasis):
            split_array_by_weight(5, np.zeros(3, np.int64))

    def test_a_negative_weight_is_an_error(self):
        with pytest.raises(InvalidInput, match="position 1"):
            split_array_by_weight(5, np.array([1, -1], np.int64))
