"""Migrations run up and down on both databases, and match the models exactly."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from app import migrate
from app.db import Base, make_engine


def test_upgrade_downgrade_upgrade_and_no_drift(db_url: str, migrated_engine) -> None:  # type: ignore[no-untyped-def]
    migrate.downgrade(db_url, "base")
    engine = make_engine(db_url)
    try:
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        migrate.upgrade(db_url)
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
            if engine.dialect.name == "postgresql":  # autogenerate does not compare index kinds
                definition = conn.exec_driver_sql(
                    "SELECT indexdef FROM pg_indexes "
                    "WHERE indexname = 'ix_billing_rows_delivery_id'").scalar_one()
                assert "USING brin" in definition
        assert migrate.current_revision(engine) == migrate.head_revision(db_url)
    finally:
        engine.dispose()
