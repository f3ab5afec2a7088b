"""Database plumbing shared by SQLite and PostgreSQL: base class, engine, UTC times, enums
stored as text, and the unit of work of a command."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    DateTime,
    Dialect,
    Engine,
    Integer,
    MetaData,
    String,
    create_engine,
    event,
    func,
)
from sqlalchemy.engine import make_url
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator

E = TypeVar("E", bound=StrEnum)

NAMING_CONVENTION = {  # stable constraint names: needed for Alembic batch mode on SQLite
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments an INTEGER PRIMARY KEY, not a BIGINT one.
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on both databases.

    SQLite keeps no zone, so values are stored as naive UTC and made aware again on read;
    a naive value on the way in is a bug and is refused.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: SpecLedger stores aware UTC only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class epoch_us(FunctionElement[int]):
    """A :class:`UTCDateTime` column as integer microseconds since the epoch, in SQL, exactly
    (for sums and windows over time done by the database)."""

    type = BigInteger()
    name = "epoch_us"
    inherit_cache = True


@compiles(epoch_us, "sqlite")
def _epoch_us_sqlite(element: epoch_us, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLAlchemy stores SQLite datetimes as text, 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC here).
    # The seconds are read without the fraction: strftime('%s') rounds it to the nearest second.
    value = compiler.process(element.clauses, **kw)
    return (
        f"(CAST(strftime('%s', substr({value}, 1, 19)) AS INTEGER) * 1000000"
        f" + CAST(substr({value}, 21, 6) AS INTEGER))"
    )


@compiles(epoch_us, "postgresql")
def _epoch_us_postgresql(element: epoch_us, compiler: SQLCompiler, **kw: Any) -> str:
    # EXTRACT returns numeric (exact) since PostgreSQL 14.
    return (
        f"CAST(EXTRACT(EPOCH FROM {compiler.process(element.clauses, **kw)}) * 1000000 AS BIGINT)"
    )


class StrEnumType(TypeDecorator[E]):
    """A ``StrEnum`` stored as its value in a ``VARCHAR(length)``.

    No database enum type or CHECK constraint: the schema (and Alembic's comparison of models
    with migrations) sees a plain string column, and a new member needs no migration. A value
    that is not a member is refused on the way in (``ValueError``) and on the way out.
    """

    impl = String
    cache_ok = True

    def __init__(self, enum: type[E], length: int) -> None:
        super().__init__(length)
        self.enum = enum
        self.length = length

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum(value)


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine; for SQLite, create the file's folder and make transactions real."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        _make_sqlite_transactional(engine)
    return engine


def for_reading(engine: Engine) -> Engine:
    """The engine for transactions that only read. On SQLite they begin DEFERRED, so
    readers run beside a writer; every other transaction begins IMMEDIATE (see
    :func:`_make_sqlite_transactional`). PostgreSQL ignores the option."""
    return engine.execution_options(sqlite_begin="DEFERRED")


@contextmanager
def read_session(engine: Engine) -> Iterator[Session]:
    """A session for a command that only reads (see :func:`for_reading`)."""
    with Session(for_reading(engine), expire_on_commit=False) as session:
        yield session


def _make_sqlite_transactional(engine: Engine) -> None:
    """Let SQLAlchemy, not pysqlite, emit BEGIN, so SAVEPOINTs (test isolation) work,
    and turn on foreign keys, which SQLite leaves off by default.

    A transaction takes the write lock when it begins (``BEGIN IMMEDIATE``), waiting up to
    the busy timeout for it. A deferred transaction that reads and then writes is refused
    at once, busy timeout or not, when another writer committed after its read (WAL
    cannot upgrade a stale snapshot), so concurrent writers failed instead of queueing.
    Transactions that only read ask for ``BEGIN DEFERRED`` through :func:`for_reading`.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA foreign_keys=ON")
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        # Durable at every checkpoint, without an fsync per commit (safe with WAL).
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        dbapi_connection.execute("PRAGMA busy_timeout=30000")

    @event.listens_for(engine, "begin")
    def _on_begin(connection):  # type: ignore[no-untyped-def]
        mode = connection.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        connection.exec_driver_sql(f"BEGIN {mode}")


@contextmanager
def unit_of_work(engine: Engine) -> Iterator[Session]:
    """One transaction for a command or job: committed if the block returns, rolled back if
    it raises. Objects stay readable after the commit."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        yield session


def utc_hour(dialect: str, column: Any) -> ColumnElement[Any]:
    """The UTC hour an instant falls in, as the database can group by it (a naive UTC
    timestamp on PostgreSQL, ``YYYY-MM-DD HH:00:00`` text on SQLite)."""
    if dialect == "postgresql":
        return func.date_trunc("hour", func.timezone("UTC", column), type_=DateTime())
    return func.strftime("%Y-%m-%d %H:00:00", column, type_=String())


def utc_instant(value: Any) -> datetime:
    """A value :func:`utc_hour` returns (naive UTC on PostgreSQL, text on SQLite), or a stored
    instant, as an aware UTC datetime."""
    at: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
