"""The store's month and hour partitions of usage rows and its ordering keys, computed in
bulk, equal the per-row definitions (the files' paths and order must not change)."""

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from app.storage.usage_store import _BULK_ORDS, _arrival_partitions, event_ord, event_ords

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


_IDS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)


@settings(max_examples=25, deadline=None)
@given(st.lists(_IDS, min_size=1, max_size=20))
def test_bulk_ordering_keys_equal_the_per_record_ones(ids: list[str]) -> None:
    repeated = (ids * (_BULK_ORDS // len(ids) + 1))[:_BULK_ORDS]
    bulk = event_ords(pa.array(repeated, pa.string()))
    assert len(bulk) == _BULK_ORDS
    assert bulk.to_pylist()[: len(ids)] == [event_ord(i) for i in ids]
    assert event_ords(pa.array(ids)).to_pylist() == [event_ord(i) for i in ids]
