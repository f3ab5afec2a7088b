"""`specledger budgets`, `specledger anomalies` and `specledger alerts check` on a database
with an allocated month."""

import json
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.cli import app
from tests.budgets.helpers import allocate, bill, register, use

runner = CliRunner()


def test_budgets_create_list_show_check_archive(cli_env: str, engine: Engine, tmp_path: Path):
    with Session(engine) as session, session.begin():
        register(session)
        bill(session, tmp_path, range(4), "4.00", "bill")
        use(session, range(4), team="search", share=0.5)
        allocate(session)
    created = runner.invoke(
        app,
        ["budgets", "create", "search-oct", "--scope", "team=search", "--amount", "10",
         "--period", "custom", "--start", "2026-10-01", "--end", "2026-11-01",
         "--hard-limit", "12.5"],
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    shown = json.loads(runner.invoke(app, ["budgets", "show", "search-oct", "--json"]).stdout)
    assert (shown["spent"], shown["ledger"], shown["metered"]) == ("8.000000",) * 2 + ("0.000000",)
    assert (shown["reached"], shown["over_hard_limit"]) == ([50, 80], False)
    assert shown["forecast"]["model"] == "period_complete"  # October is over
    listed = runner.invoke(app, ["budgets", "list"])
    assert "search-oct" in listed.stdout
    assert "spent 8.000000 of 10.000000 USD (80.0%)" in listed.stdout
    for args, message in (
        (["--scope", "squad=x", "--amount", "1"], "scope 'squad=x'"),
        (["--scope", "team=x", "--amount", "ten"], "--amount"),
        (["--scope", "team=x", "--amount", "-1"], "must be positive"),
    ):
        refused = runner.invoke(app, ["budgets", "create", "b2", *args])
        assert refused.exit_code == 2, refused.output
        assert message in " ".join(refused.stderr.split()), refused.stderr
    checked = runner.invoke(app, ["alerts", "check"])
    assert checked.exit_code == 0, checked.output
    assert "queued 0 deliveries" in checked.stdout  # no webhook yet
    anomalies = runner.invoke(app, ["anomalies", "--json"])
    assert anomalies.exit_code == 0, anomalies.output
    assert json.loads(anomalies.stdout) == []
    assert runner.invoke(app, ["budgets", "archive", "search-oct"]).exit_code == 0
    assert json.loads(runner.invoke(app, ["budgets", "list", "--json"]).stdout) == []
    missing = runner.invoke(app, ["budgets", "show", "search-oct"])
    assert missing.exit_code != 0
    assert "no such budget" in missing.stderr
