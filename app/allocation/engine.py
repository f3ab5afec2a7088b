"""Where the allocation plan runs: embedded DuckDB (the default) or Apache Spark.

Both run the same Ibis expression (app/allocation/plan.py). DuckDB gets it compiled once to
SQL over fixed table names (compiling the plan costs more than running it on a small
window) and runs in this process with nothing to install; over a dataset (a large month) it
runs stage by stage instead, each stage a temporary table (or a view where recomputing is
cheaper than keeping a copy), so memory stays bounded. Spark gets it through Ibis's PySpark
backend, with the stages that several parts of the plan read checkpointed (Spark would
recompute them per reader); it needs Java 17 and starts a local JVM (``local[2]``) or joins
the cluster named by ``SPECLEDGER_SPARK_MASTER``.
"""

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any

import duckdb
import ibis
import ibis.expr.types as ir
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import sqlglot.expressions as sge
from ibis.backends.sql.compilers import duckdb as duckdb_compiler

from app.allocation.plan import (
    BASES,
    ENTRY_COLUMNS,
    ENTRY_TEXT_COLUMNS,
    INPUT_SCHEMAS,
    POOL_MEMBER_COLUMNS,
    Stage,
    allocate_tables,
)
from app.domain.money import residual_column
from app.settings import Settings

SMALL_INPUTS = ("rows", "deployments", "replicas", "job_links")
"""The inputs that are always small enough to hand over in memory (not the usage)."""


class EngineName(StrEnum):
    duckdb = "duckdb"
    """Embedded, in this process (no server)."""
    spark = "spark"
    """Apache Spark: local mode or a cluster master."""


@dataclass(frozen=True, slots=True)
class PlanResult:
    entries: pa.Table
    """One row per ledger entry (columns: plan.ENTRY_COLUMNS)."""
    pool_rows: pa.Table
    """(pool_id, billing_row_id) of every pool of several rows."""


@dataclass(frozen=True, slots=True)
class DatasetRun:
    entries: int
    """Entries written."""
    pool_rows: pa.Table
    rollups: pa.Table
    """Cost per charge hour, deployment, team, kind and currency (see :func:`rollup`)."""


ROLLUP_KEYS = (
    "pool_id",
    "billing_row_id",
    "start_us",
    "end_us",
    "deployment",
    "team",
    "kind",
    "method",
    "currency",
    "corrects_month",
)
"""What entries are summed by for ledger_rollups. A pool lies in one charge period of one
deployment, so these keys make about as many rows as (charge hour, deployment, team)."""
ROLLUP_AMOUNTS = (*(o for _, o in BASES), *(residual_column(o) for _, o in BASES))
"""The amounts summed: micros and residual picos of each cost basis."""


def rollup(entries: ir.Table) -> ir.Table:
    """What reports read instead of entries: sums per pool, charge period, deployment, team,
    kind, method, currency and corrected month, in every cost basis, with the GPU-ns and the
    number of entries."""
    return entries.group_by(list(ROLLUP_KEYS)).aggregate(
        entries=entries.count(),
        gpu_ns=entries.gpu_ns.sum(),
        **{out: entries[out].sum() for out in ROLLUP_AMOUNTS},
    )


def _view(name: str) -> str:
    return f"specledger_{name}"


@lru_cache(maxsize=8)
def plan_sql(dialect: str, share_idle: bool, split_jobs: bool = False) -> tuple[str, str]:
    """The plan as SQL over the views ``specledger_<input>``: (entries, pool rows)."""
    entries, pool_rows = allocate_tables(
        _input_tables(), share_idle=share_idle, split_jobs=split_jobs
    )
    return _compiled(entries, pool_rows, dialect)


def _input_tables() -> dict[str, ir.Table]:
    """The plan's inputs as unbound tables named ``specledger_<input>``."""
    return {n: ibis.table(schema, name=_view(n)) for n, schema in INPUT_SCHEMAS.items()}


def _compiled(entries: ir.Table, pool_rows: ir.Table, dialect: str) -> tuple[str, str]:
    """(entries, pool rows) as SQL, each column cast to its declared type."""
    return (
        _typed(str(ibis.to_sql(entries.select(*ENTRY_COLUMNS), dialect=dialect)), ENTRY_COLUMNS),
        _typed(
            str(ibis.to_sql(pool_rows.select(*POOL_MEMBER_COLUMNS), dialect=dialect)),
            POOL_MEMBER_COLUMNS,
        ),
    )


def _typed(sql: str, columns: tuple[str, ...]) -> str:
    """The query with its columns cast to their declared types. Ibis types a sum of int64 as
    int64 and drops the cast to it, but DuckDB's sum is HUGEINT."""
    casts = ", ".join(
        f"CAST({c} AS {'VARCHAR' if c in ENTRY_TEXT_COLUMNS else 'BIGINT'}) AS {c}" for c in columns
    )
    return f"SELECT {casts} FROM ({sql}) AS plan"


@lru_cache(maxsize=2)
def rollup_sql(dialect: str) -> str:
    """:func:`rollup` as SQL over the view ``specledger_entries``."""
    columns = (*ROLLUP_KEYS, "gpu_ns", *ROLLUP_AMOUNTS)
    schema = {c: "string" if c in ENTRY_TEXT_COLUMNS else "int64" for c in columns}
    sql = str(ibis.to_sql(rollup(ibis.table(schema, name=_view("entries"))), dialect=dialect))
    return _typed(sql, (*ROLLUP_KEYS, "entries", "gpu_ns", *ROLLUP_AMOUNTS))


@dataclass(frozen=True)
class PlanEngine:
    """An engine to run allocation plans on."""

    name: EngineName = EngineName.duckdb
    spark_master: str = "local[2]"
    spark_partitions: int = 8
    """Shuffle partitions (spark.sql.shuffle.partitions): a few in local mode, a few per
    core on a cluster."""
    duckdb_options: Mapping[str, Any] = field(default_factory=dict)
    """DuckDB settings (threads, memory_limit, temp_directory) for large months."""

    @classmethod
    def of(cls, settings: Settings) -> "PlanEngine":
        """The engine the settings name (SPECLEDGER_LEDGER_ENGINE, _SPARK_MASTER, ...)."""
        return cls(
            EngineName(settings.ledger_engine),
            spark_master=settings.spark_master,
            spark_partitions=settings.spark_partitions,
            duckdb_options={"memory_limit": settings.ledger_memory_limit},
        )

    def allocate(self, inputs: Mapping[str, pa.Table], *, share_idle: bool) -> PlanResult:
        """Run the plan over in-memory inputs (Arrow tables shaped as plan.INPUT_SCHEMAS)."""
        conformed = {name: conform(name, inputs.get(name)) for name in INPUT_SCHEMAS}
        if self.name is EngineName.spark:
            return self._spark_allocate(conformed, share_idle=share_idle)
        entries_sql, pools_sql = plan_sql("duckdb", share_idle, _splits_jobs(conformed))
        with self._duckdb(conformed) as con:
            return PlanResult(
                con.sql(entries_sql).to_arrow_table(), con.sql(pools_sql).to_arrow_table()
            )

    def allocate_dataset(
        self,
        inputs: Mapping[str, pa.Table],
        usage: str | ds.Dataset,
        out: Path,
        *,
        share_idle: bool,
    ) -> DatasetRun:
        """Allocate with the usage read from Parquet, the entries written to Parquet.

        The scale path: the engine reads the usage itself (a glob over a partitioned folder,
        or a store's dataset, whose records are read once per event id) and streams the
        entries to ``out/entries``, then reads them back for the rollups
        (``out/rollups.parquet``), so no table of a month's requests passes through Python.
        ``inputs`` holds the small tables (rows, deployments, replicas).
        """
        small = {name: conform(name, inputs.get(name)) for name in SMALL_INPUTS}
        out.mkdir(parents=True, exist_ok=True)
        if self.name is EngineName.spark:
            if not isinstance(usage, str):
                raise ValueError("Spark reads usage from a folder or glob, not a dataset object")
            return self._spark_dataset(small, usage, out, share_idle=share_idle)
        entries_file = out / "entries" / "part-0.parquet"
        entries_file.parent.mkdir(parents=True, exist_ok=True)
        spill = {"temp_directory": str(out / "spill")}
        with self._duckdb(small, {**spill, **self.duckdb_options}) as con:
            con.execute(f"CREATE VIEW {_view('usage')} AS {usage_sql(con, usage)}")
            entries_sql, pools_sql = _staged_plan_sql(
                con, share_idle=share_idle, split_jobs=_splits_jobs(small)
            )
            # zstd: a third smaller than DuckDB's default snappy and no slower to write or
            # read back (10M requests: 376 MB of entries against 553 MB).
            con.execute(
                f"COPY ({entries_sql}) TO {_quote(str(entries_file))} "
                "(FORMAT parquet, COMPRESSION zstd)"
            )
            pool_rows = con.sql(pools_sql).to_arrow_table()
            con.execute(
                f"CREATE VIEW {_view('entries')} AS "
                f"SELECT * FROM read_parquet({_quote(str(entries_file))})"
            )
            rollups = con.sql(rollup_sql("duckdb")).to_arrow_table()
            count = con.execute(f"SELECT count(*) FROM {_view('entries')}").fetchone()
        pq.write_table(rollups, out / "rollups.parquet")
        return DatasetRun(int(count[0]) if count else 0, pool_rows, rollups)

    def rollups(self, entries: pa.Table) -> pa.Table:
        """:func:`rollup` of an in-memory table of entries (plan.ENTRY_COLUMNS)."""
        with self._duckdb({"entries": entries}) as con:
            return con.sql(rollup_sql("duckdb")).to_arrow_table()

    def _duckdb(
        self, tables: Mapping[str, pa.Table], options: Mapping[str, Any] | None = None
    ) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(config=dict(self.duckdb_options if options is None else options))
        # DuckDB draws a progress bar on stdout for long queries: not in a CLI's --json.
        con.execute("SET enable_progress_bar = false")
        # Entries carry their own order keys (readers sort): no need to keep scan order,
        # which lets DuckDB write and spill in parallel.
        con.execute("SET preserve_insertion_order = false")
        for name, table in tables.items():
            con.register(_view(name), table)
        return con

    # Spark: the Ibis expression through the PySpark backend, shared stages cached.

    def _spark(self) -> Any:
        session = spark_session(self.spark_master)
        session.conf.set("spark.sql.shuffle.partitions", str(self.spark_partitions))
        return session

    def _spark_plan(
        self, session: Any, views: Mapping[str, Any], *, share_idle: bool, split_jobs: bool
    ) -> tuple[Any, ir.Table, ir.Table]:
        backend = ibis.pyspark.connect(session)
        for name, frame in views.items():
            frame.createOrReplaceTempView(_view(name))
        tables = {name: backend.table(_view(name)) for name in INPUT_SCHEMAS}
        entries, pool_rows = allocate_tables(
            tables,
            share_idle=share_idle,
            split_jobs=split_jobs,
            stage=_checkpointed(backend, session),
        )
        return backend, entries.select(*ENTRY_COLUMNS), pool_rows.select(*POOL_MEMBER_COLUMNS)

    def _spark_allocate(self, inputs: Mapping[str, pa.Table], *, share_idle: bool) -> PlanResult:
        session = self._spark()
        # Straight from Arrow: Ibis's memtables go through pandas, which turns a missing
        # string into "NaN".
        views = {name: session.createDataFrame(table) for name, table in inputs.items()}
        backend, entries, pool_rows = self._spark_plan(
            session, views, share_idle=share_idle, split_jobs=_splits_jobs(inputs)
        )
        return PlanResult(backend.to_pyarrow(entries), backend.to_pyarrow(pool_rows))

    def _spark_dataset(
        self, small: Mapping[str, pa.Table], usage_parquet: str, out: Path, *, share_idle: bool
    ) -> DatasetRun:
        from pyspark.sql import functions as F

        session = self._spark()
        usage = session.read.parquet(usage_parquet).select(
            *(
                F.col(c).cast("bigint" if t == "int64" else "string").alias(c)
                for c, t in INPUT_SCHEMAS["usage"].items()
            )
        )
        views = {name: session.createDataFrame(table) for name, table in small.items()}
        backend, entries, pool_rows = self._spark_plan(
            session,
            {**views, "usage": usage},
            share_idle=share_idle,
            split_jobs=_splits_jobs(small),
        )
        entries_dir = out / "entries"
        backend.to_parquet(entries, str(entries_dir))
        written = backend.read_parquet(str(entries_dir))
        rollups = backend.to_pyarrow(rollup(written))
        pq.write_table(rollups, out / "rollups.parquet")
        count = int(backend.to_pyarrow(written.count().as_table()).column(0)[0].as_py())
        return DatasetRun(count, backend.to_pyarrow(pool_rows), rollups)


def _staged_plan_sql(
    con: duckdb.DuckDBPyConnection, *, share_idle: bool, split_jobs: bool
) -> tuple[str, str]:
    """The plan over the connection's ``specledger_<input>`` views, run stage by stage: each
    stage the plan reads more than once becomes a temporary table (a derived one a view),
    and the SQL returned (entries, pool rows) reads the last stages.

    One statement for a whole month holds several join hash tables at once, which do not
    know of each other's memory and cannot all spill: at 30M requests that ran out of a 2 GB
    limit. A stage at a time, each statement holds a few, and the tables spill to the
    connection's temp_directory. A derived stage (the split's members: the pairs joined to
    their pools' sums) is cheaper to recompute from the pairs for each reader than to write
    out, as is each subquery Ibis names with WITH: DuckDB would keep a copy of every one
    read twice, and at 10M requests those copies spilled gigabytes."""
    names = itertools.count()

    def stage(table: ir.Table, *, derived: bool = False) -> ir.Table:
        name = _view(f"stage_{next(names)}")
        kind = "VIEW" if derived else "TEMP TABLE"
        con.execute(f"CREATE {kind} {name} AS {_streamed_sql(table)}")
        return ibis.table(table.schema(), name=name)

    entries, pool_rows = allocate_tables(
        _input_tables(), share_idle=share_idle, split_jobs=split_jobs, stage=stage
    )
    return (
        _typed(_streamed_sql(entries.select(*ENTRY_COLUMNS)), ENTRY_COLUMNS),
        _typed(_streamed_sql(pool_rows.select(*POOL_MEMBER_COLUMNS)), POOL_MEMBER_COLUMNS),
    )


def _streamed_sql(table: ir.Table) -> str:
    """``table`` as DuckDB SQL whose common subqueries are recomputed per reader, not kept
    (``WITH ... AS NOT MATERIALIZED``)."""
    compiler = duckdb_compiler.compiler
    query = compiler.to_sqlglot(table.unbind())
    for cte in query.find_all(sge.CTE):
        cte.set("materialized", False)
    return str(query.sql(dialect=compiler.dialect))


def usage_sql(con: duckdb.DuckDBPyConnection, usage: str | ds.Dataset) -> str:
    """The plan's usage input over Parquet files (a glob) or a dataset (read once per event
    id, the lowest usage_ord kept: a store may hold a record twice)."""
    columns = ", ".join(
        f"CAST({c} AS {'BIGINT' if t == 'int64' else 'VARCHAR'}) AS {c}"
        for c, t in INPUT_SCHEMAS["usage"].items()
    )
    if isinstance(usage, str):
        return f"SELECT {columns} FROM read_parquet({_quote(usage)})"
    con.register(_view("usage_files"), usage)
    return (
        f"SELECT {columns} FROM {_view('usage_files')} "
        "QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY usage_ord) = 1"
    )


def _checkpointed(backend: Any, session: Any) -> Stage:
    """A plan stage for Spark: computed once and kept (a local checkpoint), then read as a
    table of its own. Spark plans are trees: without a cut, every reader of a stage holds a
    copy of the plan below it, and the plan (and its text, which Spark builds for each
    adaptive re-plan) grows with each stage that reads another."""
    names = itertools.count()

    def stage(table: ir.Table, *, derived: bool = False) -> ir.Table:
        name = _view(f"stage_{next(names)}")
        session.sql(str(backend.compile(table))).localCheckpoint().createOrReplaceTempView(name)
        return backend.table(name)

    return stage


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def conform(name: str, table: pa.Table | None) -> pa.Table:
    """An input table with exactly its declared columns and types (an empty one included;
    None: an empty one). Residual columns left out are 0: amounts given in micros only."""
    types = {"int64": pa.int64(), "string": pa.string(), "boolean": pa.bool_()}
    schema = pa.schema([(c, types[t]) for c, t in INPUT_SCHEMAS[name].items()])
    if table is None:
        return schema.empty_table()
    zeros = pa.array(np.zeros(table.num_rows, np.int64))
    return pa.table(
        {
            f.name: (
                zeros
                if f.name.endswith("_residual_picos") and f.name not in table.column_names
                else table[f.name].cast(f.type)
            )
            for f in schema
        },
        schema=schema,
    )


def _splits_jobs(inputs: Mapping[str, pa.Table]) -> bool:
    """Whether the plan must split linked Slurm jobs (see plan.allocate_plan)."""
    return bool(inputs["job_links"].num_rows > 0)


@lru_cache(maxsize=1)
def spark_session(master: str) -> Any:
    """One Spark session per process: ANSI arithmetic (overflow is an error), UTC."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName("specledger-allocation")
        .config("spark.sql.ansi.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
