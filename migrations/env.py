"""Alembic environment: one set of migrations for SQLite and PostgreSQL."""

from alembic import context

import app.models  # noqa: F401  (registers every table on Base.metadata)
from app.db import Base, make_engine
from app.settings import get_settings

config = context.config


def _url() -> str:
    url = config.attributes.get("sqlalchemy.url")
    return str(url) if url else get_settings().database_url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=Base.metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
