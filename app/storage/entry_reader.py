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
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Select, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from app.domain.ledger import RunStatus
from app.domain.money import residual_column
from app.models import AllocationRun, LedgerPoolRow
from app.storage.dataset_store import DatasetStore
from app.storage.run_repository import store_entries_prefix
from app.storage.usage_store import months_between, usage_dataset

__all__ = ["EntryReader", "WindowPart", "entry_reader", "places", "window_readers"]


class EntryReader(Protocol):
    dialect: str
    """The SQL dialect the query runs in: ``sqlite`` or ``postgresql`` (DuckDB reads the
    latter), for the few expressions that differ (durations in seconds)."""

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
        self.dialect = session.get_bind().dialect.name

    def rows(self, query: Select[*tuple[Any, ...]]) -> Sequence[Sequence[Any]]:
        return list(self.session.execute(query))

    def mappings(self, query: Select[*tuple[Any, ...]]) -> Sequence[dict[str, Any]]:
        return [dict(row) for row in self.session.execute(query).mappings()]

    def batches(
        self, query: Select[*tuple[Any, ...]], rows: int, types: Mapping[str, pa.DataType]
    ) -> Iterator[pa.Table]:
        names = list(query.selected_columns.keys())
        for part in self._partitions(query, rows):
            columns = zip(*part, strict=True)
            yield pa.table(
                {
                    name: pa.array(values, types.get(name, pa.string()))
                    for name, values in zip(names, columns, strict=True)
                }
            )

    def _partitions(self, query: Select[*tuple[Any, ...]], rows: int) -> Iterator[Sequence[Any]]:
        """The query's rows, ``rows`` at a time: straight from the SQLite cursor where no
        column's type converts what the driver returns (a third of the time of SQLAlchemy
        rows), else streamed through SQLAlchemy Core (the server-side cursor on PostgreSQL)."""
        connection = self.session.connection()
        if self.dialect == "sqlite" and not _converted(query, connection.dialect):
            compiled = query.compile(dialect=connection.dialect)
            params = compiled.construct_params()
            cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                cursor.execute(str(compiled), [params[n] for n in compiled.positiontup or []])
                while part := cursor.fetchmany(rows):
                    yield part
            finally:
                cursor.close()
            return
        yield from connection.execute(query.execution_options(yield_per=rows)).partitions()


class _StoreReader:
    dialect = "postgresql"

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


def _converted(query: Select[*tuple[Any, ...]], dialect: Any) -> bool:
    """Whether SQLAlchemy converts any of the query's result columns (dates, JSON, enums)."""
    return any(
        column.type.dialect_impl(dialect).result_processor(dialect, None) is not None
        for column in query.selected_columns
    )


def _compiled(query: Select[*tuple[Any, ...]]) -> tuple[str, list[Any]]:
    """The query as PostgreSQL SQL with ``$n`` parameters, and their values in order."""
    compiled = query.compile(dialect=_POSTGRES, compile_kwargs={"render_postcompile": True})
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
        con.register("allocation_runs", _the_run(run))
        yield _StoreReader(con)


@dataclass(frozen=True, slots=True)
class WindowPart:
    """A part of a report's window and the reader of the place that keeps its ledger."""

    start: datetime
    end: datetime
    reader: EntryReader


@contextmanager
def window_readers(
    session: Session, start: datetime, end: datetime, *, s3_endpoint_url: str | None = None
) -> Iterator[list[WindowPart]]:
    """``[start, end)`` cut where the ledger keeps it, in time order: each current month
    run kept in a Parquet store gives its part of the window, read from its store (its
    entries, the store's usage); the rest is read from the database. Readers stay open
    while the context is.

    A report counts usage over the parts (usage arriving in the part, from its place) and
    sums costs over the :func:`places`: the place's entries joined to the place's usage
    arriving anywhere in the window. A request's entries are where each month's run keeps
    them, and a run prices only usage of its own place (a store run reads its store's
    usage, the month before included), so every entry is counted once, also for a request
    that spans two months kept in different places.
    """
    stored = session.execute(
        select(AllocationRun.id, AllocationRun.window_start, AllocationRun.window_end)
        .where(
            AllocationRun.store_uri.is_not(None),
            AllocationRun.status == RunStatus.current,
            AllocationRun.month.is_not(None),
            AllocationRun.window_start < end,
            AllocationRun.window_end > start,
        )
        .order_by(AllocationRun.window_start)
    ).all()
    parts: list[WindowPart] = []
    database = _DatabaseReader(session)
    cursor = start
    with ExitStack() as stack:
        for run_id, run_start, run_end in stored:
            part_start, part_end = max(run_start, start), min(run_end, end)
            if cursor < part_start:
                parts.append(WindowPart(cursor, part_start, database))
            reader = stack.enter_context(
                entry_reader(session, run_id, s3_endpoint_url=s3_endpoint_url)
            )
            parts.append(WindowPart(part_start, part_end, reader))
            cursor = part_end
        if cursor < end:
            parts.append(WindowPart(cursor, end, database))
        yield parts


@dataclass(frozen=True, slots=True)
class LedgerReaders:
    """Where a window's finding sources read: the database (registry, measurements) and the
    window's parts (the entries, where each part's ledger is kept)."""

    session: Session
    parts: Sequence[WindowPart]


def places(parts: Sequence[WindowPart]) -> list[EntryReader]:
    """Each place the parts are read from, once (the database may hold several parts)."""
    unique: dict[int, EntryReader] = {}
    for part in parts:
        unique.setdefault(id(part.reader), part.reader)
    return list(unique.values())


def _the_run(run: AllocationRun) -> pa.Table:
    """The run as the only row of ``allocation_runs``, so queries naming the current runs
    (``current_run_ids()``) read the same in a store."""
    return pa.table(
        {
            "id": pa.array([run.id], pa.int64()),
            "month": pa.array([run.month], pa.string()),
            "status": pa.array([str(run.status)], pa.string()),
        }
    )


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


_RESIDUALS = tuple(
    residual_column(f"{basis}_cost_micros")
    for basis in ("effective", "billed", "list", "contracted")
)


def _micros_as_time(column: str) -> str:
    return f"make_timestamp({column})::TIMESTAMPTZ"


def _entries_view(con: duckdb.DuckDBPyConnection, store: DatasetStore, run: AllocationRun) -> None:
    booked = run.month or "adhoc"
    files = store.dataset(store_entries_prefix(booked, run.id), {})
    con.register("entry_files", files)
    # A run allocated before money was exact to the pico has no residual columns: all 0.
    residuals = ", ".join(
        f"{name if name in files.schema.names else '0::BIGINT'} AS {name}" for name in _RESIDUALS
    )
    con.execute(
        f"""CREATE VIEW ledger_entries AS SELECT
            {run.id}::BIGINT AS run_id, '{booked}' AS booked_month, corrects_month, kind,
            method, billing_row_id, pool_id,
            {_micros_as_time("start_us")} AS charge_period_start,
            {_micros_as_time("end_us")} AS charge_period_end,
            deployment, replica, event_id, session_id, team, gpu_ns, effective_cost_micros,
            billed_cost_micros, list_cost_micros, contracted_cost_micros, {residuals},
            currency
        FROM entry_files"""
    )


def _usage_view(
    con: duckdb.DuckDBPyConnection, store: DatasetStore, start: datetime, end: datetime
) -> None:
    first, last = (int(t.timestamp() * 1_000_000) for t in (start, end))
    usage = usage_dataset(store)
    if not usage.files:  # no usage in the store at all: an empty view of the right shape
        con.execute(f"CREATE VIEW usage_records AS {_EMPTY_USAGE}")
        return
    con.register("usage_files", usage.filter(_month_in(months_between(first, last))))
    con.execute(
        f"""CREATE VIEW usage_records AS SELECT
            event_id, session_id, team, cost_center, CAST(tags AS JSON) AS tags, deployment,
            replica, model, spec_method, spec_k::INTEGER AS spec_k,
            {_micros_as_time("arrived_us")} AS arrived_at,
            {_micros_as_time("finished_us")} AS finished_at,
            gpu_ns, prompt_tokens, cached_tokens, completion_tokens, num_drafts, draft_tokens,
            accepted_tokens, accepted_hist, concurrency::INTEGER AS concurrency, status
        FROM usage_files
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY usage_ord) = 1"""
    )


def _month_in(months: list[str]) -> pc.Expression:
    return pc.field("month").isin(months)


_EMPTY_USAGE = """SELECT NULL::VARCHAR AS event_id, NULL::VARCHAR AS session_id,
    NULL::VARCHAR AS team, NULL::VARCHAR AS cost_center, NULL::JSON AS tags,
    NULL::VARCHAR AS deployment, NULL::VARCHAR AS replica, NULL::VARCHAR AS model,
    NULL::VARCHAR AS spec_method, NULL::INTEGER AS spec_k, NULL::TIMESTAMPTZ AS arrived_at,
    NULL::TIMESTAMPTZ AS finished_at, NULL::BIGINT AS gpu_ns, NULL::BIGINT AS prompt_tokens,
    NULL::BIGINT AS cached_tokens, NULL::BIGINT AS completion_tokens,
    NULL::BIGINT AS num_drafts, NULL::BIGINT AS draft_tokens, NULL::BIGINT AS accepted_tokens,
    NULL::BIGINT[] AS accepted_hist,
    NULL::INTEGER AS concurrency, NULL::VARCHAR AS status WHERE false"""
