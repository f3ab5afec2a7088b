"""Migrations run up and down on both databases, and match the models exactly."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, select, text

from app import migrate
from app.db import Base, make_engine
from app.models import BillingRow


def test_upgrade_downgrade_upgrade_and_no_drift(db_url: str, migrated_engine: Engine) -> None:
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
                    "WHERE indexname = 'ix_billing_rows_delivery_id'"
                ).scalar_one()
                assert "USING brin" in definition
        assert migrate.current_revision(engine) == migrate.head_revision(db_url)
    finally:
        engine.dispose()


def test_rows_stored_before_the_split_read_the_same_after_it_and_back(
    db_url: str, migrated_engine: Engine
) -> None:
    """0006 moves the shared columns of existing billing rows into billing_row_attributes;
    its downgrade moves them back."""
    migrate.downgrade(db_url, "0005_billing_rows_lighter_writes")
    old_layout = [
        "delivery_id",
        "source_file",
        "source_row",
        "billing_period_start",
        "billed_cost_micros",
        "billing_currency",
        "tags",
        "focus_columns",
        "provider_columns",
    ]
    rows = [
        (
            7,
            "a.csv",
            1,
            "2026-10-01 00:00:00",
            1_500_000,
            "USD",
            '{"team":"ads"}',
            '{"SkuPriceId":"x"}',
            "{}",
        ),
        (7, "a.csv", 2, "2026-10-01 00:00:00", -250, "EUR", None, "{}", '{"x_Code":"Y"}'),
    ]
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO billing_deliveries (id, source, billing_period_start, "
                    "billing_period_end, fingerprint, files, focus_version, row_count, delivered_at, "
                    "ingested_at) VALUES (7, 's', :t, :t, 'f', '[]', '1.2', 2, :t, :t)"
                ),
                {"t": "2026-10-01 00:00:00"},
            )
            conn.execute(
                text(
                    f"INSERT INTO billing_rows ({', '.join(old_layout)}) VALUES "
                    f"({', '.join(':' + c for c in old_layout)})"
                ),
                [dict(zip(old_layout, row, strict=True)) for row in rows],
            )
        migrate.upgrade(db_url)
        with engine.connect() as conn:
            stored = conn.execute(
                select(
                    BillingRow.source_row,
                    BillingRow.billed_cost_micros,
                    BillingRow.billing_currency,
                    BillingRow.tags,
                    BillingRow.provider_columns,
                    BillingRow.delivery_id,
                ).order_by(BillingRow.source_row)
            ).all()
        assert [tuple(r) for r in stored] == [
            (1, 1_500_000, "USD", {"team": "ads"}, {}, 7),
            (2, -250, "EUR", None, {"x_Code": "Y"}, 7),
        ]
        migrate.downgrade(db_url, "0005_billing_rows_lighter_writes")
        with engine.connect() as conn:
            back = conn.exec_driver_sql(
                "SELECT source_row, source_file, billing_currency "
                "FROM billing_rows ORDER BY source_row"
            ).all()
        assert [tuple(r) for r in back] == [(1, "a.csv", "USD"), (2, "a.csv", "EUR")]
    finally:
        engine.dispose()
        migrate.downgrade(db_url, "base")
        migrate.upgrade(db_url)
