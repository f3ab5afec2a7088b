"""`specledger ledger close` shows what stays idle and unallocated and asks first."""

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from app.cli import app
from app.cli import ledger as ledger_cli
from app.models import LedgerClosure
from tests.ingest.helpers import focus_row, write_focus_csv

runner = CliRunner()


@pytest.fixture
def allocated_october(cli_env: str, tmp_path: Path) -> None:
    bill = tmp_path / "oct.csv"
    write_focus_csv(
        bill,
        [
            focus_row(hour=0, cost="10.00"),
            focus_row(hour=1, cost="2.50", Tags=json.dumps({"specledger-deployment": "nobody"})),
        ],
    )
    for args in (
        ["ingest", "billing", str(bill), "--source", "aws"],
        ["deployments", "add", "d1"],
        ["deployments", "add-replica", "d1", "r1", "--gpus", "1"],
        ["allocate", "--month", "2026-10"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)


def _closed(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.scalars(select(LedgerClosure.month)))


def test_without_a_terminal_close_needs_yes_and_changes_nothing(
    allocated_october: None, engine: Engine
) -> None:
    result = runner.invoke(app, ["ledger", "close", "2026-10"])
    assert result.exit_code == 2
    assert "--yes" in result.stderr
    # What the close would freeze is shown first: no usage, so the d1 row is idle.
    assert "2026-10 USD: bill 12.500000, idle 10.000000 (80.0%)" in result.stderr
    assert "unallocated 2.500000 (20.0%)" in result.stderr
    assert "1 billing rows matched no deployment" in result.stderr
    assert _closed(engine) == []


def test_a_no_at_the_prompt_leaves_the_month_open(
    allocated_october: None, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_cli, "_interactive", lambda: True)
    result = runner.invoke(app, ["ledger", "close", "2026-10"], input="n\n")
    assert result.exit_code == 1
    assert "left open" in result.stderr
    assert _closed(engine) == []

    result = runner.invoke(app, ["ledger", "close", "2026-10"], input="y\n")
    assert result.exit_code == 0, result.output
    assert _closed(engine) == ["2026-10"]


def test_yes_closes_without_asking(allocated_october: None, engine: Engine) -> None:
    result = runner.invoke(app, ["ledger", "close", "2026-10", "--yes"])
    assert result.exit_code == 0, result.output
    assert "2026-10 closed" in result.stdout
    assert _closed(engine) == ["2026-10"]
