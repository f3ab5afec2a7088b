"""`specledger alerts`: webhooks, test alerts, delivering what is due, the log."""

import json
import uuid
from datetime import UTC, datetime, timedelta

import typer
from sqlalchemy import Engine
from typer.testing import CliRunner

from app.alerts import Alert, AlertKind, enqueue, verify_signature
from app.cli import alerts
from app.db import unit_of_work
from tests.alerts.conftest import Receiver

runner = CliRunner()
cli = typer.Typer()
alerts.register(cli)


def test_webhooks_add_list_test_deliver_log_disable(
    cli_env: str, engine: Engine, receiver: Receiver, down_url: str
) -> None:
    where = f"ok/{uuid.uuid4().hex}"
    added = runner.invoke(
        cli,
        [
            "alerts",
            "webhooks",
            "add",
            "finops",
            f"{receiver.url}/{where}",
            "--kinds",
            "anomaly",
            "--json",
        ],
    )
    assert added.exit_code == 0, added.output
    hook = json.loads(added.stdout)
    secret = hook["secret"]
    assert secret.startswith("whsec_")
    assert hook["kinds"] == ["anomaly"]
    assert hook["url"] == f"{receiver.url}/…"
    slack = runner.invoke(
        cli,
        [
            "alerts",
            "webhooks",
            "add",
            "slack",
            f"{down_url}/services/T0/B0/XYZ",
            "--format",
            "slack",
        ],
    )
    assert slack.exit_code == 0, slack.output
    assert "not shown again" in slack.stdout
    assert "XYZ" not in slack.stdout

    listed = runner.invoke(cli, ["alerts", "webhooks", "list"])
    assert listed.exit_code == 0, listed.output
    assert secret not in listed.stdout
    assert "XYZ" not in listed.stdout
    assert "finops" in listed.stdout
    assert "kinds=anomaly" in listed.stdout

    tested = runner.invoke(cli, ["alerts", "test", "finops"])
    assert tested.exit_code == 0, tested.output
    assert "delivered" in tested.stdout
    [got] = receiver.requests(where)
    now = datetime.now(UTC)
    assert verify_signature(secret, got.body, got.headers["x-specledger-signature"], now=now)
    failed_test = runner.invoke(cli, ["alerts", "test", "slack"])
    assert failed_test.exit_code == 1
    assert "ConnectError" in failed_test.stderr
    assert "XYZ" not in failed_test.output

    with unit_of_work(engine) as session:
        enqueue(
            session,
            Alert(
                kind=AlertKind.anomaly,
                dedup_key="anomaly:search:2026-12-05",
                title="Spend on search is 4x its usual level",
                text="",
                occurred_at=now - timedelta(minutes=1),
            ),
            now - timedelta(seconds=1),
        )
    delivered = runner.invoke(cli, ["alerts", "deliver"])
    assert delivered.exit_code == 0, delivered.output
    assert "delivered 1, retrying 1, failed 0" in delivered.stdout
    assert len(receiver.requests(where)) == 2

    log = runner.invoke(cli, ["alerts", "log", "--json"])
    assert log.exit_code == 0, log.output
    rows = json.loads(log.stdout)
    assert [(r["webhook"], r["kind"], r["status"]) for r in rows] == [
        ("slack", "anomaly", "pending"),
        ("finops", "anomaly", "delivered"),
        ("slack", "test", "failed"),
        ("finops", "test", "delivered"),
    ]
    assert "XYZ" not in log.stdout
    assert secret not in log.stdout
    failed_only = runner.invoke(cli, ["alerts", "log", "--status", "failed"])
    assert failed_only.exit_code == 0, failed_only.output
    assert "last error: ConnectError" in failed_only.stdout
    assert "finops" not in failed_only.stdout

    disabled = runner.invoke(cli, ["alerts", "webhooks", "disable", "slack"])
    assert disabled.exit_code == 0, disabled.output
    listed = runner.invoke(cli, ["alerts", "webhooks", "list", "--json"])
    assert [h["name"] for h in json.loads(listed.stdout)] == ["finops"]
    pending = runner.invoke(cli, ["alerts", "log", "--status", "pending", "--json"])
    assert json.loads(pending.stdout) == []


def test_clear_errors(cli_env: str) -> None:
    ok = runner.invoke(cli, ["alerts", "webhooks", "add", "a", "https://hooks.example.com/x"])
    assert ok.exit_code == 0, ok.output
    cases = [
        (["alerts", "webhooks", "add", "a", "https://hooks.example.com/y"], "exists already"),
        (["alerts", "webhooks", "add", "b", "hooks.example.com/secret"], "http:// or https://"),
        (
            ["alerts", "webhooks", "add", "b", "https://h.example.com/", "--kinds", "budget"],
            "unknown alert kind",
        ),
        (["alerts", "webhooks", "disable", "nobody"], "no webhook named 'nobody'"),
        (["alerts", "test", "nobody"], "no webhook named 'nobody'"),
    ]
    for args, message in cases:
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr
        assert "secret" not in result.stderr
        assert "Traceback" not in result.output
    bad_format = runner.invoke(
        cli, ["alerts", "webhooks", "add", "c", "https://h.example.com/", "--format", "xml"]
    )
    assert bad_format.exit_code == 2
    assert "Invalid value" in bad_format.stderr


def test_help_texts() -> None:
    for args in (["alerts"], ["alerts", "webhooks"], ["alerts", "deliver"], ["alerts", "log"]):
        result = runner.invoke(cli, [*args, "--help"])
        assert result.exit_code == 0, result.output
    assert "--loop" in runner.invoke(cli, ["alerts", "deliver", "--help"]).stdout
