"""Where the allocation plan runs: embedded DuckDB (the default) or Apache Spark.

Both run the same Ibis expression (app/allocation/plan.py); only the connection differs.
DuckDB runs in this process with nothing to install; Spark needs Java 17 and starts a local
JVM (``local[2]``) or joins the cluster named by ``SPECLEDGER_SPARK_MASTER``.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any

import ibis
import ibis.expr.types as ir
import pyarrow as pa
import pyarrow.parquet as pq
from ibis.backends import BaseBackend

from app.allocation.plan import (
    BASES,
    ENTRY_COLUMNS,
    INPUT_SCHEMAS,
    POOL_MEMBER_COLUMNS,
    allocate_plan,
)
from app.settings import Settings


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


ROLLUP_KEYS = ("start_us", "deployment", "team", "kind", "currency")


def rollup(entries: ir.Table) -> ir.Table:
    """What reports read instead of entries: sums per charge hour, deployment, team, kind and
    currency, in every cost basis, with the GPU-ns and the number of entries."""
    return entries.group_by(list(ROLLUP_KEYS)).aggregate(
        entries=entries.count(),
        gpu_ns=entries.gpu_ns.sum(),
        **{out: entries[out].sum() for _, out in BASES},
    )


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
        )

    def connect(self) -> BaseBackend:
        if self.name is EngineName.spark:
            session = spark_session(self.spark_master)
            session.conf.set("spark.sql.shuffle.partitions", str(self.spark_partitions))
            return ibis.pyspark.connect(session)
        return ibis.duckdb.connect(**dict(self.duckdb_options))

    def allocate(self, inputs: Mapping[str, pa.Table], *, share_idle: bool) -> PlanResult:
        """Run the plan over in-memory inputs (Arrow tables shaped as plan.INPUT_SCHEMAS)."""
        backend = self.connect()
        tables = {
            name: self._register(backend, name, conform(name, inputs[name]))
            for name in INPUT_SCHEMAS
        }
        return self.run(backend, tables, share_idle=share_idle)

    def run(
        self, backend: BaseBackend, tables: Mapping[str, ir.Table], *, share_idle: bool
    ) -> PlanResult:
        """Run the plan over tables of ``backend`` (registered inputs, or files it reads)."""
        entries, pool_rows = allocate_plan(
            tables["rows"],
            tables["deployments"],
            tables["replicas"],
            tables["usage"],
            share_idle=share_idle,
            stage=self._stage,
        )
        return PlanResult(
            backend.to_pyarrow(entries.select(*ENTRY_COLUMNS)),
            backend.to_pyarrow(pool_rows.select(*POOL_MEMBER_COLUMNS)),
        )

    def allocate_dataset(
        self,
        inputs: Mapping[str, pa.Table],
        usage_parquet: str,
        out: Path,
        *,
        share_idle: bool,
    ) -> DatasetRun:
        """Allocate with the usage read from a Parquet dataset, the entries written to one.

        The scale path: the engine reads the usage files itself (a glob, a hive-partitioned
        folder) and streams the entries to ``out/entries``, then reads them back for the
        rollups (``out/rollups.parquet``), so no table of a month's requests passes through
        Python. ``inputs`` holds the small tables (rows, deployments, replicas).
        """
        backend = self.connect()
        tables = {
            name: self._register(backend, name, conform(name, inputs[name]))
            for name in ("rows", "deployments", "replicas")
        }
        usage = backend.read_parquet(usage_parquet)
        tables["usage"] = usage.select(
            *(usage[c].cast(t) for c, t in INPUT_SCHEMAS["usage"].items())
        )
        entries, pool_rows = allocate_plan(
            tables["rows"],
            tables["deployments"],
            tables["replicas"],
            tables["usage"],
            share_idle=share_idle,
            stage=self._stage,
        )
        out.mkdir(parents=True, exist_ok=True)
        entries_path = out / "entries"
        backend.to_parquet(entries.select(*ENTRY_COLUMNS), self._file(entries_path))
        pools = backend.to_pyarrow(pool_rows.select(*POOL_MEMBER_COLUMNS))
        written = backend.read_parquet(self._glob(entries_path))
        rollups = backend.to_pyarrow(rollup(written))
        pq.write_table(rollups, out / "rollups.parquet")
        return DatasetRun(
            entries=int(backend.to_pyarrow(written.count().as_table()).column(0)[0].as_py()),
            pool_rows=pools,
            rollups=rollups,
        )

    @property
    def _stage(self) -> Callable[[ir.Table], ir.Table]:
        if self.name is EngineName.spark:
            return lambda table: table.cache()
        return lambda table: table

    def _file(self, folder: Path) -> str:
        """Where to_parquet writes: DuckDB writes one file, Spark a folder of parts."""
        if self.name is EngineName.spark:
            return str(folder)
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder / "part-0.parquet")

    def _glob(self, folder: Path) -> str:
        return str(folder / "*.parquet")

    def _register(self, backend: BaseBackend, name: str, table: pa.Table) -> ir.Table:
        if self.name is EngineName.spark:
            # Straight from Arrow: Ibis's own path goes through pandas, which turns a
            # missing string into "NaN".
            session = spark_session(self.spark_master)
            view = f"specledger_{name}"
            session.createDataFrame(table).createOrReplaceTempView(view)
            return backend.table(view)
        return ibis.memtable(table)


def conform(name: str, table: pa.Table) -> pa.Table:
    """An input table with exactly its declared columns and types (an empty one included)."""
    types = {"int64": pa.int64(), "string": pa.string(), "boolean": pa.bool_()}
    schema = pa.schema([(c, types[t]) for c, t in INPUT_SCHEMAS[name].items()])
    return pa.table({f.name: table[f.name].cast(f.type) for f in schema}, schema=schema)


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
