"""A month with no bill: `reconcile` says NO BILL with exit status 1 (never BALANCED), and
`allocate` warns that nothing reached any team."""

import json
from pathlib import Path

from sqlalchemy import Engine
from typer.testing import CliRunner

from app.cli import app
from tests.factories import at, insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

runner = CliRunner()


def test_a_month_without_a_bill_is_no_bill_and_exit_1(engine: Engine, cli_env: str) -> None:
    insert_usage(engine, [usage_record(arrived=at(0, 1), seconds=10, gpu_ns=10**9)])

    allocated = runner.invoke(app, ["allocate", "--month", "2026-10", "--json"])
    assert allocated.exit_code == 0, allocated.output
    assert json.loads(allocated.stdout)["rows"] == 0
    assert "no bill for 2026-10" in " ".join(allocated.stderr.split())

    text = runner.invoke(app, ["reconcile", "--month", "2026-10"])
    assert text.exit_code == 1
    assert "2026-10 (run " in text.stdout
    assert text.stdout.splitlines()[0].endswith(": NO BILL")
    assert "BALANCED" not in text.stdout
    assert "specledger ingest billing" in text.stdout

    as_json = runner.invoke(app, ["reconcile", "--month", "2026-10", "--json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["balanced"] is False


def test_a_month_never_allocated_nor_billed_is_no_bill(engine: Engine, cli_env: str) -> None:
    result = runner.invoke(app, ["reconcile", "--month", "2026-07"])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == "Reconciliation 2026-07 (run none): NO BILL"


def test_a_billed_month_still_balances_and_allocate_does_not_warn(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    bill = write_focus_csv(tmp_path / "oct.csv", [focus_row(hour=h) for h in range(2)])
    assert runner.invoke(app, ["ingest", "billing", str(bill)]).exit_code == 0
    allocated = runner.invoke(app, ["allocate", "--month", "2026-10"])
    assert allocated.exit_code == 0, allocated.output
    assert "no bill" not in allocated.stderr

    result = runner.invoke(app, ["reconcile", "--month", "2026-10"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].endswith(": BALANCED")
