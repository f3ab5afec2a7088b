"""Bulk inserts of Arrow tables round-trip exactly on both databases, through PostgreSQL's
binary COPY where every column allows it and through CSV COPY where one does not."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine
from sqlalchemy.dialects.postgresql import JSONB

from app.db import UTCDateTime
from app.kit import pg_copy_binary
from app.kit.bulk import bulk_insert

_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)
_ROW = st.fixed_dictionaries(
    {
        "big": st.none() | st.integers(-(2**63), 2**63 - 1),
        "small": st.none() | st.integers(-(2**31), 2**31 - 1),
        "label": st.none() | _TEXT,
        # hypothesis takes naive bounds and attaches the zone itself
        "at": st.none()
        | st.datetimes(
            datetime(1900, 1, 1),  # noqa: DTZ001
            datetime(2200, 1, 1),  # noqa: DTZ001
            timezones=st.just(UTC),
        ),
        "flag": st.none() | st.booleans(),
    }
)


def _table(metadata: sa.MetaData, name: str, *extra: sa.Column[object]) -> sa.Table:
    return sa.Table(
        name,
        metadata,
        sa.Column("big", sa.BigInteger),
        sa.Column("small", sa.Integer),
        sa.Column("label", sa.Text),
        sa.Column("at", UTCDateTime()),
        sa.Column("flag", sa.Boolean),
        *extra,
    )


def _arrow(rows: list[dict[str, object]]) -> pa.Table:
    return pa.table(
        {
            "big": pa.array([r["big"] for r in rows], pa.int64()),
            "small": pa.array([r["small"] for r in rows], pa.int32()),
            "label": pa.array([r["label"] for r in rows], pa.string()),
            "at": pa.array([r["at"] for r in rows], pa.timestamp("us", tz="UTC")),
            "flag": pa.array([r["flag"] for r in rows], pa.bool_()),
        }
    )


@pytest.fixture
def scratch(engine: Engine) -> Iterator[tuple[sa.MetaData, str]]:
    metadata = sa.MetaData()
    yield metadata, f"bulk_{uuid.uuid4().hex[:8]}"
    metadata.drop_all(engine)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(_ROW, min_size=1, max_size=30))
def test_rows_round_trip(
    engine: Engine, scratch: tuple[sa.MetaData, str], rows: list[dict[str, object]]
) -> None:
    metadata, name = scratch
    table = metadata.tables[name] if name in metadata.tables else _table(metadata, name)
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(table.delete())
        bulk_insert(conn, name, _arrow(rows))
    with engine.connect() as conn:
        stored = [tuple(r) for r in conn.execute(sa.select(table))]
    expected = [tuple(r[c.name] for c in table.columns) for r in rows]
    assert sorted(stored, key=repr) == sorted(expected, key=repr)


@pytest.mark.postgres
def test_postgres_binary_and_csv_paths_agree(
    engine: Engine, scratch: tuple[sa.MetaData, str]
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's COPY paths")
    metadata, name = scratch
    binary = _table(
        metadata,
        name + "_bin",
        sa.Column("doc", JSONB),
        sa.Column("ratio", sa.Float(53)),
        sa.Column("tiny", sa.SmallInteger),
    )
    csv = _table(
        metadata,
        name + "_csv",
        sa.Column("doc", JSONB),
        sa.Column("ratio", sa.Float(53)),
        sa.Column("tiny", sa.SmallInteger),
        sa.Column("amount", sa.Numeric(20, 6)),
    )  # numeric forces the CSV path
    metadata.create_all(engine)
    before_2000 = datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC)
    rows = (
        _arrow(
            [
                {"big": -1, "small": 2**31 - 1, "label": "", "at": before_2000, "flag": False},
                {"big": None, "small": None, "label": None, "at": None, "flag": None},
                {
                    "big": 2**62,
                    "small": -7,
                    "label": 'ü "q" \\ \n\t€',
                    "flag": True,
                    "at": datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC),
                },
            ]
        )
        .append_column("doc", pa.array(['{"a": [1, "x"]}', None, "{}"]))
        .append_column("ratio", pa.array([0.1, None, -2.5e-300]))
        .append_column("tiny", pa.array([-32768, None, 32767], pa.int16()))
    )
    with engine.begin() as conn:
        bulk_insert(conn, binary.name, rows)
        bulk_insert(
            conn, csv.name, rows.append_column("amount", pa.array(["1.5", None, "-0.000001"]))
        )
    with engine.connect() as conn:
        got_binary = [tuple(r) for r in conn.execute(sa.select(binary).order_by(binary.c.small))]
        got_csv = [tuple(r)[:-1] for r in conn.execute(sa.select(csv).order_by(csv.c.small))]
        amounts = conn.execute(sa.select(csv.c.amount).order_by(csv.c.small)).scalars().all()
    assert got_binary == got_csv
    assert got_binary[0][3] == datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC)
    assert got_binary[1][:4] == (-1, 2**31 - 1, "", before_2000)
    assert got_binary[1][5:] == ({"a": [1, "x"]}, 0.1, -32768)
    assert got_binary[2] == (None,) * 8
    assert amounts == [Decimal("-0.000001"), Decimal("1.5"), None]


def test_binary_rows_are_laid_out_as_postgres_documents() -> None:
    """One row by hand: field count, then length-prefixed big-endian fields; -1 for null."""
    batch = pa.record_batch(
        {
            "n": pa.array([1], pa.int64()),
            "s": pa.array(["hé"]),
            "none": pa.array([None], pa.int32()),
            "at": pa.array(
                [datetime(2000, 1, 1, tzinfo=UTC) + timedelta(microseconds=5)],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    encoded = pg_copy_binary.encode_rows(
        batch, {"n": "int8", "s": "varchar", "none": "int4", "at": "timestamptz"}
    ).to_pybytes()
    assert encoded == (
        b"\x00\x04"
        + b"\x00\x00\x00\x08"
        + (1).to_bytes(8, "big")
        + b"\x00\x00\x00\x03"
        + "hé".encode()
        + b"\xff\xff\xff\xff"
        + b"\x00\x00\x00\x08"
        + (5).to_bytes(8, "big")
    )


def test_only_matching_types_are_encoded_in_binary() -> None:
    assert pg_copy_binary.can_encode(pa.int32(), "int8")
    assert pg_copy_binary.can_encode(pa.string(), "json")
    assert not pg_copy_binary.can_encode(pa.string(), "timestamptz")
    assert not pg_copy_binary.can_encode(pa.string(), "numeric")
    assert not pg_copy_binary.can_encode(pa.int64(), "text")
