"""The bulk number paths of column normalisation agree with the one-value-at-a-time parser."""

from decimal import Decimal

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from app.domain.focus import BY_NAME
from ingest import cells
from ingest.columns import normalise_column

_AMOUNT = st.decimals(
    min_value=Decimal("-9e12"),
    max_value=Decimal("9e12"),
    places=9,
    allow_nan=False,
    allow_infinity=False,
)
_CANONICAL = st.one_of(
    _AMOUNT.map(str),
    _AMOUNT.map(lambda d: f"{d:e}".replace("e+", "e")),  # exponent form, canonical spelling
    st.integers(-(10**12), 10**12).map(str),
    # exactly half a micro: rounds to the even neighbour
    st.builds(
        lambda units, micros: f"{units}.{micros:06d}5",
        st.integers(-1000, 1000),
        st.integers(0, 999_999),
    ),
)


@given(st.lists(st.none() | _CANONICAL, min_size=1, max_size=40))
def test_canonical_money_matches_the_decimal_parser(texts: list[str | None]) -> None:
    result = normalise_column(BY_NAME["BilledCost"], pa.array(texts, pa.string()))
    expected = [None if t is None else cells.parse_money_exact(t)[0] for t in texts]
    assert result.values.to_pylist() == expected
    assert not result.bad_rows
    assert not result.repairs


@given(
    st.lists(st.none() | _CANONICAL, min_size=1, max_size=40),
    st.sampled_from(['"12.5"', " 7 ", "1,234.50", "NULL", ""]),
)
def test_one_messy_value_takes_the_general_path(texts: list[str | None], messy: str) -> None:
    column = [*texts, messy]
    result = normalise_column(BY_NAME["BilledCost"], pa.array(column, pa.string()))
    expected = [None if t is None else cells.parse_money_exact(t)[0] for t in texts]
    assert result.values.to_pylist()[:-1] == expected
    assert sum(result.repairs.values()) >= 1


@given(st.lists(st.none() | _CANONICAL, min_size=1, max_size=40))
def test_canonical_quantities_are_kept_as_written(texts: list[str | None]) -> None:
    result = normalise_column(BY_NAME["PricingQuantity"], pa.array(texts, pa.string()))
    assert result.values.to_pylist() == texts
