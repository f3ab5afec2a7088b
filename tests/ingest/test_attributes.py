"""distinct_rows finds each distinct combination once and maps every row back to it."""

from datetime import UTC, datetime

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from ingest.attributes import distinct_rows

_TEXT = st.one_of(st.none(), st.sampled_from(["", "a", "b", "NULL"]))
_STAMP = st.one_of(st.none(), st.sampled_from([datetime(2026, m, 1, tzinfo=UTC) for m in (1, 2)]))


@given(
    st.lists(st.tuples(_TEXT, _TEXT, _STAMP, st.one_of(st.none(), st.integers(-2, 2))), max_size=60)
)
def test_every_row_maps_to_the_one_distinct_row_equal_to_it(rows: list[tuple[object, ...]]) -> None:
    table = pa.table(
        {
            "a": pa.array([r[0] for r in rows], pa.string()),
            "b": pa.array([r[1] for r in rows], pa.string()),
            "t": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC")),
            "n": pa.array([r[3] for r in rows], pa.int64()),
        }
    )
    distinct, index = distinct_rows(table)

    as_tuples = list(zip(*(c.to_pylist() for c in distinct.columns), strict=True))
    assert len(as_tuples) == len(set(as_tuples)) == len(set(rows))
    assert distinct.take(pa.array(index, pa.int64())).to_pylist() == table.to_pylist()


def test_nested_values_are_compared_by_their_text() -> None:
    table = pa.table(
        {
            "l": pa.array([[1, 2], None, [1, 2], [3]], pa.list_(pa.int64())),
            "s": ["x", "x", "x", "x"],
        }
    )
    distinct, index = distinct_rows(table)
    assert distinct.num_rows == 3
    assert distinct.take(pa.array(index)).to_pylist() == table.to_pylist()


def test_many_columns_of_many_values_do_not_overflow_the_combined_key() -> None:
    rows = 5_000
    table = pa.table(
        {f"c{i}": pa.array([(r * (i + 7)) % 4_999 for r in range(rows)]) for i in range(8)}
    )  # 4,999 ** 8 combinations would overflow int64
    distinct, index = distinct_rows(table)
    assert distinct.num_rows == len(set(zip(*(c.to_pylist() for c in table.columns), strict=True)))
    assert distinct.take(pa.array(index)).to_pylist() == table.to_pylist()
