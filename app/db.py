"""Database plumbing shared by SQLite and PostgreSQL: base class, engine, UTC times."""

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Dialect,
    Engine,
    Integer,
    MetaData,
    create_engine,
    event,
)
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

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


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine; for SQLite, create the file's folder and make transactions real."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        _make_sqlite_transactional(engine)
    return engine


def _make_sqlite_transactional(engine: Engine) -> None:
    """Let SQLAlchemy, not pysqlite, emit BEGIN, so SAVEPOINTs (test isolation) work,
    and turn on foreign keys, which SQLite leaves off by default."""

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
        connection.exec_driver_sql("BEGIN")
