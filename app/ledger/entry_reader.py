"""Where a report reads a run's entries: the database, or the Parquet store that holds them.

A report builds its SQLAlchemy query over ``ledger_entries`` and ``usage_records`` once and
runs it through an :class:`EntryReader`. For a run kept in a store, the same query,
compiled as PostgreSQL SQL (which DuckDB reads: ``$n`` parameters, ``::`` casts, ``->>``
on JSON), runs in an embedded DuckDB whose views ``ledger_entries`` and ``usage_records``
are the run's entry files and the store's usage files, with the database's column names
and types (and ``ledger_pool_rows`` the run's pool rows, copied from the database). One
query, two places to run it: the answers cannot drift apart.
"""

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Select, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from app.kit.dataset_store import DatasetStore
from app.ledger.repository import store_entries_prefix
from app.models import AllocationRun, LedgerPoolRow
from app.usage.store import PARTITIONS, USAGE_PREFIX, months_between

__all__ = ["EntryReader", "entry_reader"]


class EntryReader(Protocol):
    def rows(self, query: Select[*tuple[Any, ...]]) -> Sequence[Sequence[Any]]:
        """The query's rows as tuples."""
        ...

    def mappings(self, query: Select[*tuple[Any, ...]]) -> Sequence[dict[str, Any]]:
        """The query's rows as dicts by column label."""
        ...

    def batches(
        self, query: Select[*tuple[Any, ...]], rows: int, types: Mapping[str, pa.DataType]
    ) -> Iterator[pa.Table]:
        """The query's rows as Arrow tables of up to ``rows`` rows, each column of its type
        in ``types`` (text otherwise), streamed."""
        ...


class _DatabaseReader:
    def __init__(self, session: Session) -> None:
        self.session = session

    def rows(self, query: Select[*tuple[Any, ...]]) -> Sequence[Sequence[Any]]:
        return list(self.session.execute(query))

    def mappings(self, query: Select[*tuple[Any, ...]]) -> Sequence[dict[str, Any]]:
        return [dict(row) for row in self.session.execute(query).mappings()]

    def batches(
        self, query: Select[*tuple[Any, ...]], rows: int, types: Mapping[str, pa.DataType]
    ) -> Iterator[pa.Table]:
        result = self.session.execute(query.execution_options(yield_per=rows))
        names = list(result.keys())
        for part in result.partitions():
            columns = zip(*part, strict=True)
            yield pa.table(
                {
                    name: pa.array(values, types.get(name, pa.string()))
                    for name, values in zip(names, columns, strict=True)
                }
            )


class _StoreReader:
    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def _run(self, query: Select[*tuple[Any, ...]]) -> duckdb.DuckDBPyConnection:
        return self.con.execute(*_compiled(query))

    def rows(self, query: Select[*tuple[Any, ...]]) -> Sequence[Sequence[Any]]:
        return self._run(query).fetchall()

    def mappings(self, query: Select[*tuple[Any, ...]]) -> Sequence[dict[str, Any]]:
        result = self._run(query)
        names = [d[0] for d in result.description or []]
        return [dict(zip(names, row, strict=True)) for row in result.fetchall()]

    def batches(
        self, query: Select[*tuple[Any, ...]], rows: int, types: Mapping[str, pa.DataType]
    ) -> Iterator[pa.Table]:
        sql, values = _compiled(query)
        for batch in self.con.sql(sql, params=values).to_arrow_reader(rows):
            table = pa.Table.from_batches([batch])
            yield pa.table(
                {
                    name: table[name].cast(types.get(name, pa.string()))
                    for name in table.column_names
                }
            )


def _compiled(query: Select[*tuple[Any, ...]]) -> tuple[str, list[Any]]:
    """The query as PostgreSQL SQL with ``$n`` parameters, and their values in order."""
    compiled = query.compile(dialect=_POSTGRES)
    params = compiled.construct_params()
    return str(compiled), [_plain(params[name]) for name in compiled.positiontup or []]


_POSTGRES = postgresql.psycopg.dialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, StrEnum) else value


@contextmanager
def entry_reader(
    session: Session,
    run_id: int | None,
    *,
    s3_endpoint_url: str | None = None,
    store: DatasetStore | None = None,
) -> Iterator[EntryReader]:
    """A reader of the run's entries (and the usage they price) wherever the run keeps
    them; None reads the database (a month with no run has no entries there). ``store``
    is used when it is the run's store (it knows its endpoint)."""
    run = session.get(AllocationRun, run_id) if run_id is not None else None
    if run is None or run.store_uri is None:
        yield _DatabaseReader(session)
        return
    store = run_store(run.store_uri, store, s3_endpoint_url=s3_endpoint_url)
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET enable_progress_bar = false")  # it draws on stdout
        _entries_view(con, store, run)
        _usage_view(con, store, run.window_start, run.window_end)
        con.register("ledger_pool_rows", _pool_rows(session, run.id))
        yield _StoreReader(con)


def run_store(
    uri: str, known: DatasetStore | None, *, s3_endpoint_url: str | None = None
) -> DatasetStore:
    """The store a run names: ``known`` when it is that store, else opened from its URI."""
    if known is not None and known.uri == uri:
        return known
    return DatasetStore.at(uri, s3_endpoint_url=s3_endpoint_url)


def _pool_rows(session: Session, run_id: int) -> pa.Table:
    """The run's pool rows (a few per charge hour, from the database)."""
    rows = session.execute(
        select(LedgerPoolRow.run_id, LedgerPoolRow.pool_id, LedgerPoolRow.billing_row_id).where(
            LedgerPoolRow.run_id == run_id
        )
    ).all()
    names = ("run_id", "pool_id", "billing_row_id")
    return pa.table(
        {name: pa.array([r[i] for r in rows], pa.int64()) for i, name in enumerate(names)}
    )


def _micros_as_time(column: str) -> str:
    return f"make_timestamp({column})::TIMESTAMPTZ"


def _entries_view(con: duckdb.DuckDBPyConnection, store: DatasetStore, run: AllocationRun) -> None:
    booked = run.month or "adhoc"
    con.register("entry_files", store.dataset(store_entries_prefix(booked, run.id), {}))
    con.execute(
        f"""CREATE VIEW ledger_entries AS SELECT
            {run.id}::BIGINT AS run_id, '{booked}' AS booked_month, corrects_month, kind,
            method, billing_row_id, pool_id,
            {_micros_as_time("start_us")} AS charge_period_start,
            {_micros_as_time("end_us")} AS charge_period_end,
            deployment, replica, event_id, session_id, team, gpu_ns, effective_cost_micros,
            billed_cost_micros, list_cost_micros, contracted_cost_micros, currency
        FROM entry_files"""
    )


def _usage_view(
    con: duckdb.DuckDBPyConnection, store: DatasetStore, start: datetime, end: datetime
) -> None:
    first, last = (int(t.timestamp() * 1_000_000) for t in (start, end))
    usage = store.dataset(USAGE_PREFIX, PARTITIONS)
    if not usage.files:  # no usage in the store at all: an empty view of the right shape
        con.execute(f"CREATE VIEW usage_records AS {_EMPTY_USAGE}")
        return
    con.register("usage_files", usage.filter(_month_in(months_between(first, last))))
    con.execute(
        f"""CREATE VIEW usage_records AS SELECT
            event_id, session_id, team, cost_center, CAST(tags AS JSON) AS tags, deployment,
            replica, model, spec_method,
            {_micros_as_time("arrived_us")} AS arrived_at,
            {_micros_as_time("finished_us")} AS finished_at,
            gpu_ns, prompt_tokens, cached_tokens, completion_tokens, num_drafts, draft_tokens,
            accepted_tokens, status
        FROM usage_files
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY usage_ord) = 1"""
    )


def _month_in(months: list[str]) -> pc.Expression:
    return pc.field("month").isin(months)


_EMPTY_USAGE = """SELECT NULL::VARCHAR AS event_id, NULL::VARCHAR AS session_id,
    NULL::VARCHAR AS team, NULL::VARCHAR AS cost_center, NULL::JSON AS tags,
    NULL::VARCHAR AS deployment, NULL::VARCHAR AS replica, NULL::VARCHAR AS model,
    NULL::VARCHAR AS spec_method, NULL::TIMESTAMPTZ AS arrived_at,
    NULL::TIMESTAMPTZ AS finished_at, NULL::BIGINT AS gpu_ns, NULL::BIGINT AS prompt_tokens,
    NULL::BIGINT AS cached_tokens, NULL::BIGINT AS completion_tokens,
    NULL::BIGINT AS num_drafts, NULL::BIGINT AS draft_tokens, NULL::BIGINT AS accepted_tokens,
    NULL::VARCHAR AS status WHERE false"""
