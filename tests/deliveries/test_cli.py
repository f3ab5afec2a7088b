"""Billing deliveries through the CLI, on both databases: the same charges under another name
are refused (naming the delivery) or replaced with --replace; deliveries are listed, shown
and removed; a closed month's delivery only as a restatement, booked as adjustments."""

import json
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from app.cli import app
from app.models import BillingDelivery, BillingRow
from tests.factories import at, insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

runner = CliRunner()


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(BillingRow)) or 0


def _deliveries(*args: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(_ok("billing", "deliveries", "list", "--json", *args))
    return listed


def _bill(path: Path, costs: tuple[str, ...] = ("1.50", "2.25", "0.000001")) -> Path:
    return write_focus_csv(path, [focus_row(hour=h, cost=c) for h, c in enumerate(costs)])


def test_the_same_bill_under_another_name_is_refused_naming_its_delivery(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    _ok("ingest", "billing", str(_bill(tmp_path / "bill.csv")))
    (first,) = _deliveries()
    rows = list(
        reversed([focus_row(hour=h, cost=c) for h, c in enumerate(("1.50", "2.25", "0.000001"))])
    )
    renamed = write_focus_csv(tmp_path / "bill (1).csv", rows)

    refused = runner.invoke(app, ["ingest", "billing", str(renamed)])

    assert refused.exit_code == 2
    message = " ".join(refused.stderr.split())
    assert (
        f"3 of its 3 charges for billing period 2026-10 are already loaded as delivery #{first['id']}"
        in message
    )
    assert first["source"] in message
    assert "--replace" in message
    assert f"specledger billing deliveries remove {first['id']}" in message
    assert _rows(engine) == 3
    assert [d["id"] for d in _deliveries()] == [first["id"]]


def test_a_restated_copy_under_another_name_is_still_recognised(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    _ok("ingest", "billing", str(_bill(tmp_path / "bill.csv")))
    restated = _bill(tmp_path / "restated.csv", ("1.50", "2.30", "0.000001"))

    refused = runner.invoke(app, ["ingest", "billing", str(restated)])

    assert refused.exit_code == 2
    assert "2 of its 3 charges" in " ".join(
        refused.stderr.split()
    )  # 2.25 -> 2.30 is another charge


def test_replace_supersedes_the_delivery_that_holds_the_charges(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    _ok("ingest", "billing", str(_bill(tmp_path / "bill.csv")))
    (first,) = _deliveries()

    report = json.loads(
        _ok("ingest", "billing", str(_bill(tmp_path / "copy.csv")), "--replace", "--json")
    )

    assert any("replaced that delivery" in w and f"#{first['id']}" in w for w in report["warnings"])
    (current,) = _deliveries()
    assert current["source"].endswith("copy.csv")
    assert current["totals"] == {"USD": {"billed": "3.750001", "effective": "3.750001"}}
    gone = {d["id"]: d for d in _deliveries("--all")}[first["id"]]
    assert gone["status"] == "replaced"
    assert gone["superseded_by"] == current["id"]
    assert _rows(engine) == 3


def test_own_data_in_two_accounts_are_two_deliveries_side_by_side(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    _ok("ingest", "billing", str(_bill(tmp_path / "a.csv")))
    other = write_focus_csv(
        tmp_path / "b.csv", [focus_row(hour=h, BillingAccountId="222") for h in range(3)]
    )
    _ok("ingest", "billing", str(other))

    listed = _deliveries("--month", "2026-10")
    assert [d["billing_accounts"] for d in listed] == [["111"], ["222"]]
    assert [d["row_count"] for d in listed] == [3, 3]
    assert _rows(engine) == 6


def test_list_and_show_describe_a_delivery(engine: Engine, cli_env: str, tmp_path: Path) -> None:
    bill = _bill(tmp_path / "bill.csv")
    _ok("ingest", "billing", str(bill))
    (delivery,) = _deliveries()
    assert delivery["month"] == "2026-10"
    assert delivery["status"] == "current"
    assert delivery["files"] == [str(bill)]
    assert delivery["billing_accounts"] == ["111"]
    assert delivery["row_count"] == 3
    assert delivery["manifest"] is None

    text = _ok("billing", "deliveries", "list")
    assert f"#{delivery['id']}  2026-10  file:{bill.resolve()}  accounts 111  3 rows" in text
    shown = _ok("billing", "deliveries", "show", str(delivery["id"]))
    assert "billed 3.750001  effective 3.750001" in shown
    assert str(bill) in shown
    assert (
        json.loads(_ok("billing", "deliveries", "show", str(delivery["id"]), "--json")) == delivery
    )

    missing = runner.invoke(app, ["billing", "deliveries", "show", "999"])
    assert missing.exit_code == 2
    assert f"no billing delivery #999; current deliveries: #{delivery['id']}" in missing.stderr
    assert "no billing deliveries for 2026-09" in _ok(
        "billing", "deliveries", "list", "--month", "2026-09"
    )


def test_remove_in_an_open_month_deletes_its_rows(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    _ok("ingest", "billing", str(_bill(tmp_path / "bill.csv")))
    (delivery,) = _deliveries()

    out = _ok("billing", "deliveries", "remove", str(delivery["id"]))

    assert "allocate again: `specledger allocate --month 2026-10`" in out
    assert _rows(engine) == 0
    assert _deliveries() == []
    (removed,) = _deliveries("--all")
    assert removed["status"] == "removed"
    assert removed["removed_at"]
    again = runner.invoke(app, ["billing", "deliveries", "remove", str(delivery["id"])])
    assert again.exit_code == 2
    assert "was already removed" in again.stderr
    # The same file loads again afterwards.
    _ok("ingest", "billing", str(tmp_path / "bill.csv"))
    assert _rows(engine) == 3


def _allocate_and_close_october(engine: Engine, tmp_path: Path) -> int:
    _ok("ingest", "billing", str(_bill(tmp_path / "bill.csv", ("7.20", "7.20"))))
    _ok("deployments", "add", "d1")
    _ok("deployments", "add-replica", "d1", "r1", "--gpus", "2")
    insert_usage(engine, [usage_record(arrived=at(0, 1), seconds=10, gpu_ns=720 * 10**9)])
    _ok("allocate", "--month", "2026-10")
    _ok("ledger", "close", "2026-10", "--yes")
    (delivery,) = _deliveries()
    return int(delivery["id"])


def test_remove_in_a_closed_month_needs_restate_and_books_adjustments(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    delivery_id = _allocate_and_close_october(engine, tmp_path)

    refused = runner.invoke(app, ["billing", "deliveries", "remove", str(delivery_id)])
    assert refused.exit_code == 2
    message = " ".join(refused.stderr.split())
    assert "2026-10, which is closed" in message
    assert "--restate" in message
    assert "2026-11" in message
    assert _rows(engine) == 2

    out = _ok("billing", "deliveries", "remove", str(delivery_id), "--restate")
    assert "specledger allocate --month 2026-11" in out
    assert _rows(engine) == 0

    november = runner.invoke(app, ["allocate", "--month", "2026-11", "--json"])
    assert november.exit_code == 0, november.output
    reconciled = json.loads(
        runner.invoke(app, ["reconcile", "--month", "2026-11", "--json"]).stdout
    )
    (adjustment,) = reconciled["adjustments"]
    assert adjustment["corrects_month"] == "2026-10"
    assert adjustment["effective"] == "-14.400000"
    assert adjustment["billed"] == "-14.400000"


def test_a_closed_month_stays_as_it_was_when_removal_is_refused(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    delivery_id = _allocate_and_close_october(engine, tmp_path)
    before = _ok("reconcile", "--month", "2026-10", "--json")

    assert runner.invoke(app, ["billing", "deliveries", "remove", str(delivery_id)]).exit_code == 2

    assert _ok("reconcile", "--month", "2026-10", "--json") == before
    with engine.connect() as conn:
        assert conn.scalar(select(BillingDelivery.removed_at)) is None
