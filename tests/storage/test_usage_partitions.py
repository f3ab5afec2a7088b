"""The store's month and hour partitions of usage rows, formatted once per distinct hour,
equal ``strftime`` of every row (the files' paths must not change)."""

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given
from hypothesis import strategies as st

from app.storage.usage_store import _arrival_partitions

# 1969-12-31 to 2100: rows either side of the epoch, of month ends and of leap days.
_INSTANT_US = st.integers(min_value=-86_400_000_000, max_value=4_102_444_800_000_000)


@given(st.lists(st.lists(_INSTANT_US, max_size=40), min_size=1, max_size=3))
def test_partitions_equal_strftime_of_each_row(chunks: list[list[int]]) -> None:
    arrived = pa.chunked_array(chunks, pa.int64())
    month, hour = _arrival_partitions(arrived)
    instants = arrived.cast(pa.timestamp("us", tz="UTC"))
    assert month.to_pylist() == pc.strftime(instants, "%Y-%m").to_pylist()
    assert hour.to_pylist() == pc.strftime(instants, "%Y-%m-%dT%H").to_pylist()


def test_rows_of_one_hour_share_its_label_and_keep_their_order() -> None:
    hour_us = 3_600_000_000
    arrived = pa.chunked_array([[hour_us * 5 + 1, 0, hour_us * 5, hour_us * 5 - 1]], pa.int64())
    month, hour = _arrival_partitions(arrived)
    assert hour.to_pylist() == [
        "1970-01-01T05", "1970-01-01T00", "1970-01-01T05", "1970-01-01T04",
    ]  # fmt: skip
    assert month.to_pylist() == ["1970-01"] * 4
