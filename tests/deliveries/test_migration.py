"""0016 gives the rows stored before it their charge keys: a bill loaded twice under two
names back then is found by `reconcile` (DUPLICATED CHARGES, exit 1), and the deliveries get
their accounts and totals."""

from datetime import UTC, datetime

from sqlalchemy import Engine, TextClause, bindparam, select, text
from typer.testing import CliRunner

from app import migrate
from app.cli import app
from app.db import UTCDateTime
from app.models import BillingDelivery

runner = CliRunner()
T = datetime(2026, 10, 1, tzinfo=UTC)


def _sql(statement: str, *times: str) -> TextClause:
    """SQL whose time parameters are bound as the models bind them."""
    return text(statement).bindparams(*(bindparam(t, type_=UTCDateTime()) for t in times))


def _store_the_same_bill_twice(engine: Engine) -> None:
    with engine.begin() as conn:
        for delivery_id, source in ((7, "file:/bills/oct.csv"), (8, "file:/bills/oct (1).csv")):
            conn.execute(
                _sql(
                    "INSERT INTO billing_deliveries (id, source, billing_period_start, "
                    "billing_period_end, fingerprint, files, focus_version, row_count, "
                    "delivered_at, ingested_at) VALUES (:id, :source, :t, :end, "
                    "'f', '[]', '1.2', 2, :t, :t)",
                    "t",
                    "end",
                ),
                {
                    "id": delivery_id,
                    "source": source,
                    "t": T,
                    "end": datetime(2026, 11, 1, tzinfo=UTC),
                },
            )
            conn.execute(
                _sql(
                    "INSERT INTO billing_row_attributes (id, delivery_id, source_file, "
                    "billing_period_start, billing_currency, billing_account_id, resource_id, "
                    "charge_category, focus_columns, provider_columns) VALUES (:id, :id, :file, "
                    ":t, 'USD', '111', 'i-1', 'Usage', '{\"SkuPriceId\": \"p\"}', '{}')",
                    "t",
                ),
                {"id": delivery_id, "file": source[5:], "t": T},
            )
            conn.execute(
                _sql(
                    "INSERT INTO billing_rows (delivery_id, attributes_id, source_row, "
                    "charge_period_start, charge_period_end, billed_cost_micros, "
                    "effective_cost_micros) VALUES (:id, :id, :row, :start, :end, :cost, :cost)",
                    "start",
                    "end",
                ),
                [
                    {
                        "id": delivery_id,
                        "row": hour + 1,
                        "start": datetime(2026, 10, 1, hour, tzinfo=UTC),
                        "end": datetime(2026, 10, 1, hour + 1, tzinfo=UTC),
                        "cost": 1_500_000 + hour,
                    }
                    for hour in range(2)
                ],
            )


def test_a_bill_stored_twice_before_charge_keys_is_reported_as_duplicated(
    engine: Engine, db_url: str, cli_env: str
) -> None:
    migrate.downgrade(db_url, "0015_read_indexes")
    try:
        _store_the_same_bill_twice(engine)
    finally:
        migrate.upgrade(db_url)

    with engine.connect() as conn:
        details = conn.execute(
            select(
                BillingDelivery.id, BillingDelivery.billing_accounts, BillingDelivery.totals
            ).order_by(BillingDelivery.id)
        ).all()
    totals = {"USD": {"billed_cost_micros": 3_000_001, "effective_cost_micros": 3_000_001}}
    assert [tuple(d) for d in details] == [(7, ["111"], totals), (8, ["111"], totals)]

    result = runner.invoke(app, ["reconcile", "--month", "2026-10"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "Reconciliation 2026-10 (run none): DUPLICATED CHARGES"
    assert (
        "delivery #8 (file:/bills/oct (1).csv) holds 2 charge(s) that delivery #7 "
        "(file:/bills/oct.csv) holds too" in result.stdout
    )
    assert "BALANCED" not in result.stdout.replace("DUPLICATED", "")

    closing = runner.invoke(app, ["ledger", "close", "2026-10"])  # shows, then needs --yes
    assert closing.exit_code == 2
    assert "deliveries #7 and #8 hold 2 of the same charges: remove one" in " ".join(
        closing.stderr.split()
    )

    removed = runner.invoke(app, ["billing", "deliveries", "remove", "8"])
    assert removed.exit_code == 0, removed.output
    after = runner.invoke(app, ["reconcile", "--month", "2026-10"])
    assert "DUPLICATED" not in after.stdout
    assert "2 billing row(s) have no entries" in after.stdout
