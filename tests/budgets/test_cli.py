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


def test_budget_steps_are_created_shown_and_checked(cli_env: str, engine: Engine, tmp_path: Path):
    with Session(engine) as session, session.begin():
        register(session)
        bill(session, tmp_path, range(4), "4.00", "bill")
        use(session, range(4), team="search", share=0.5)
        allocate(session)
    window = ["--period", "custom", "--start", "2026-10-01", "--end", "2026-11-01"]
    created = runner.invoke(
        app,
        ["budgets", "create", "stepped", "--scope", "team=search", "--amount", "10", *window,
         "--hard-limit", "12.5", "--step", "75:route=d1", "--step", "50:warn"],
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    # 2.00 a hour: 6.25 (50% of the hard limit) is passed in the hour from 03:00.
    shown = runner.invoke(app, ["budgets", "show", "stepped"]).stdout
    assert "step at 50%: warn: taken since 2026-10-01 03:00 UTC" in shown
    assert "step at 75%: route to d1: not reached" in shown
    as_json = json.loads(runner.invoke(app, ["budgets", "show", "stepped", "--json"]).stdout)
    assert as_json["steps"] == [
        {"at_percent": 50, "action": "warn", "route_to": None,
         "taken_since": "2026-10-01T03:00:00Z"},
        {"at_percent": 75, "action": "route", "route_to": "d1", "taken_since": None},
    ]  # fmt: skip
    for args, message in (
        (["--step", "50:warn"], "give the budget a hard limit"),
        (["--hard-limit", "5", "--step", "75:route"], "names the deployment"),
        (["--hard-limit", "5", "--step", "75:route=d9"], "step 75:route=d9: unknown deployment"),
        (["--hard-limit", "5", "--step", "75:slow"], "the action is warn or"),
        (["--hard-limit", "5", "--step", "100:warn"], "between 1 and 99"),
    ):
        refused = runner.invoke(
            app, ["budgets", "create", "b2", "--scope", "team=search", "--amount", "1", *args]
        )
        assert refused.exit_code == 2, refused.output
        assert message in " ".join(refused.stderr.split()), refused.stderr
