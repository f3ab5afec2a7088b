"""Fast bulk inserts of Arrow tables: COPY on PostgreSQL (binary where every column's type
allows, else CSV), executemany on SQLite.

Runs inside the caller's transaction (the SQLAlchemy connection's DB-API connection).
"""

import gc
import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from sqlalchemy import Connection

from app.kit import pg_copy_binary as pg_binary

_BATCH_ROWS = 50_000


def bulk_insert(conn: Connection, table_name: str, rows: pa.Table) -> None:
    """Insert every row of ``rows`` (columns named as in the table) into ``table_name``."""
    if conn.dialect.name == "postgresql":
        pg_types = _postgres_column_types(conn, table_name)
        if all(pg_binary.can_encode(f.type, pg_types.get(f.name, "")) for f in rows.schema):
            _copy_postgres_binary(conn, table_name, rows, pg_types)
        else:
            _copy_postgres(conn, table_name, _times_as_text(rows))
    else:
        _executemany(conn, table_name, _times_as_text(rows))


def insert_new(conn: Connection, table_name: str, rows: pa.Table, key: str) -> int:
    """Insert the rows of ``rows`` whose ``key`` is not stored yet, in order: of rows sharing
    a key the first is kept. ``key`` must have a unique constraint. Returns the rows inserted.

    PostgreSQL: repeated keys are dropped in Arrow and, unless the first or last key is
    stored (a reload), the rows sent by binary COPY straight into the table. Only if that
    meets a stored key (the COPY is undone), or for a reload, are the stored ones found by
    one index lookup and the rest sent; should another writer store one of the keys
    meanwhile, the rows go through a temporary table and ``INSERT ... SELECT ... ON
    CONFLICT DO NOTHING`` instead. (The lookup of every key before every COPY took an
    eighth of a fresh load's time.) SQLite: ``executemany`` of ``INSERT ... ON CONFLICT DO
    NOTHING``.
    """
    if rows.num_rows == 0:
        return 0
    if conn.dialect.name != "postgresql":
        driver = conn.connection.driver_connection
        before = driver.total_changes  # type: ignore[union-attr]
        _executemany(conn, table_name, _times_as_text(rows), f" ON CONFLICT ({key}) DO NOTHING")
        return int(driver.total_changes - before)  # type: ignore[union-attr]
    rows = _first_of_each(rows, key)
    ends = [rows[key][0].as_py(), rows[key][-1].as_py()]
    if not _any_stored(conn, table_name, key, ends) and _copied_unless_stored(
        conn, table_name, rows
    ):
        return int(rows.num_rows)
    stored = (
        conn.exec_driver_sql(
            f"SELECT {key} FROM {table_name} WHERE {key} = ANY(%(keys)s)",
            {"keys": rows[key].to_pylist()},
        )
        .scalars()
        .all()
    )
    if stored:
        rows = rows.filter(pc.invert(pc.is_in(rows[key], value_set=pa.array(stored))))
    if rows.num_rows == 0:
        return 0
    if not _copied_unless_stored(conn, table_name, rows):
        return _insert_staged(conn, table_name, rows, key)
    return int(rows.num_rows)


def _any_stored(conn: Connection, table_name: str, key: str, keys: list[object]) -> bool:
    found = conn.exec_driver_sql(
        f"SELECT EXISTS (SELECT FROM {table_name} WHERE {key} = ANY(%(keys)s))", {"keys": keys}
    ).scalar_one()
    return bool(found)


def _copied_unless_stored(conn: Connection, table_name: str, rows: pa.Table) -> bool:
    """COPY ``rows`` into the table under a savepoint: False (and nothing written) if one
    of their keys is stored."""
    import psycopg

    try:
        with conn.begin_nested():
            bulk_insert(conn, table_name, rows)
    except psycopg.errors.UniqueViolation:
        return False
    return True


def _first_of_each(rows: pa.Table, key: str) -> pa.Table:
    """The rows with the first of each ``key``, in order."""
    if pc.count_distinct(rows[key]).as_py() == rows.num_rows:
        return rows
    numbered = pa.table({key: rows[key], "row": pa.array(np.arange(rows.num_rows))})
    first = numbered.group_by(key, use_threads=False).aggregate([("row", "min")])
    return rows.take(pa.array(np.sort(first["row_min"].to_numpy())))


def _insert_staged(conn: Connection, table_name: str, rows: pa.Table, key: str) -> int:
    """COPY into a temporary table (dropped at commit), then one ``INSERT ... SELECT ...
    ON CONFLICT DO NOTHING`` in the rows' order."""
    columns = ", ".join(rows.column_names)
    staging = f"{table_name}_incoming"
    conn.exec_driver_sql(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {staging} ON COMMIT DROP AS "
        f"SELECT 0::bigint AS incoming_ord, {columns} FROM {table_name} WITH NO DATA"
    )
    conn.exec_driver_sql(f"TRUNCATE {staging}")
    numbered = rows.add_column(
        0, "incoming_ord", pa.array(np.arange(rows.num_rows, dtype=np.int64))
    )
    bulk_insert(conn, staging, numbered)
    result = conn.exec_driver_sql(
        f"INSERT INTO {table_name} ({columns}) SELECT {columns} FROM {staging} "
        f"ORDER BY incoming_ord ON CONFLICT ({key}) DO NOTHING"
    )
    return int(result.rowcount)


def reserve_ids(conn: Connection, table_name: str, count: int) -> np.ndarray:
    """``count`` new values of ``table_name``'s ``id`` key, for rows the caller inserts with
    :func:`bulk_insert`. On SQLite the caller must already have written in its transaction
    (so that it holds the database's write lock, as the key's own default would need)."""
    if count == 0:
        return np.zeros(0, np.int64)
    if conn.dialect.name == "postgresql":
        sequence = conn.exec_driver_sql(
            "SELECT pg_get_serial_sequence(%(table)s, 'id')", {"table": table_name}
        ).scalar_one()
        return np.array(
            conn.exec_driver_sql(
                "SELECT array_agg(nextval(%(sequence)s::regclass)) FROM generate_series(1, %(count)s)",
                {"sequence": sequence, "count": count},
            ).scalar_one(),
            np.int64,
        )
    largest = conn.exec_driver_sql(f"SELECT COALESCE(MAX(id), 0) FROM {table_name}").scalar_one()
    return np.arange(largest + 1, largest + 1 + count, dtype=np.int64)


def _postgres_column_types(conn: Connection, table_name: str) -> dict[str, str]:
    result = conn.exec_driver_sql(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %(table)s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
        {"table": table_name},
    )
    return {row[0]: row[1] for row in result}


def _times_as_text(rows: pa.Table) -> pa.Table:
    """Timestamps as ``YYYY-MM-DD HH:MM:SS.ffffff`` (UTC), the form SQLAlchemy stores in SQLite
    and PostgreSQL parses. Formatting only the distinct values keeps it fast."""
    for index, field in enumerate(rows.schema):
        if pa.types.is_timestamp(field.type) and field.type.unit == "us":
            # Casting to text writes the same form, with six digits, far faster.
            naive = rows.column(index).cast(pa.timestamp("us"))
            rows = rows.set_column(index, field.name, naive.cast(pa.string()))
        elif pa.types.is_timestamp(field.type):
            encoded = pc.dictionary_encode(rows.column(index).combine_chunks())
            text = pc.strftime(encoded.dictionary, format="%Y-%m-%d %H:%M:%S")
            rows = rows.set_column(index, field.name, text.take(encoded.indices))
    return rows


def _copy_postgres(conn: Connection, table_name: str, rows: pa.Table) -> None:
    """COPY in CSV: Arrow writes nulls as empty fields and empty strings as "", which is
    exactly how PostgreSQL's CSV format tells them apart. A thread formats the next chunk
    while the server parses the current one."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    statement = f"COPY {table_name} ({', '.join(rows.column_names)}) FROM STDIN WITH (FORMAT csv)"

    def as_csv(batch: pa.RecordBatch) -> bytes:
        buffer = io.BytesIO()
        pacsv.write_csv(batch, buffer, pacsv.WriteOptions(include_header=False))
        return buffer.getvalue()

    with cursor.copy(statement) as copy, ThreadPoolExecutor(max_workers=1) as formatter:
        for chunk in formatter.map(as_csv, rows.to_batches(max_chunksize=_BATCH_ROWS)):
            copy.write(chunk)


def _copy_postgres_binary(
    conn: Connection, table_name: str, rows: pa.Table, pg_types: dict[str, str]
) -> None:
    """COPY in PostgreSQL's binary format; a thread encodes the next chunk meanwhile."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    statement = (
        f"COPY {table_name} ({', '.join(rows.column_names)}) FROM STDIN WITH (FORMAT binary)"
    )

    def encode(batch: pa.RecordBatch) -> pa.Buffer:
        return pg_binary.encode_rows(batch, pg_types)

    with cursor.copy(statement) as copy, ThreadPoolExecutor(max_workers=1) as encoder:
        copy.write(pg_binary.SIGNATURE)
        for chunk in encoder.map(encode, rows.to_batches(max_chunksize=_BATCH_ROWS)):
            copy.write(memoryview(chunk))
        copy.write(pg_binary.TRAILER)


def _executemany(conn: Connection, table_name: str, rows: pa.Table, suffix: str = "") -> None:
    """executemany in batches, with the garbage collector paused: millions of fresh tuples
    would trigger full collections that find nothing to free."""
    names = rows.column_names
    statement = (
        f"INSERT INTO {table_name} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
        + suffix
    )
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]

    with _gc_paused():
        for batch in rows.to_batches(max_chunksize=_BATCH_ROWS):
            cursor.executemany(statement, zip(*(c.to_pylist() for c in batch.columns), strict=True))


@contextmanager
def _gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
