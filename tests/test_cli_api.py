"""`specledger keys`: keys are shown once, stored hashed, listed by prefix, revocable."""

import json

from sqlalchemy import Engine, select
from typer.testing import CliRunner

from app.cli import app
from app.models import ApiKey

runner = CliRunner()


def test_keys_create_list_revoke(cli_env: str, engine: Engine) -> None:
    created = runner.invoke(app, ["keys", "create", "--team", "search", "--json"])
    assert created.exit_code == 0, created.output
    key = json.loads(created.stdout)
    assert key["team"] == "search"
    assert key["key"].startswith("slk_")
    assert key["key"].startswith(key["prefix"])
    admin = runner.invoke(app, ["keys", "create", "--admin"])
    assert admin.exit_code == 0, admin.output
    assert "not shown again" in admin.stdout
    with engine.connect() as conn:
        stored = conn.execute(select(ApiKey.key_hash, ApiKey.prefix)).all()
    assert all(key["key"] not in (h, p) for h, p in stored)  # only the hash and prefix
    listed = json.loads(runner.invoke(app, ["keys", "list", "--json"]).stdout)
    assert [(k["team"], k["admin"]) for k in listed] == [("search", False), (None, True)]
    revoked = runner.invoke(app, ["keys", "revoke", key["prefix"]])
    assert revoked.exit_code == 0, revoked.output
    assert len(json.loads(runner.invoke(app, ["keys", "list", "--json"]).stdout)) == 1
    assert len(json.loads(runner.invoke(app, ["keys", "list", "--all", "--json"]).stdout)) == 2


def test_keys_need_exactly_one_scope(cli_env: str) -> None:
    for args in ([], ["--admin", "--team", "x"]):
        result = runner.invoke(app, ["keys", "create", *args])
        assert result.exit_code == 2
        assert "exactly one" in result.stderr
    missing = runner.invoke(app, ["keys", "revoke", "slk_nothing"])
    assert missing.exit_code == 2


def test_proxy_keys_from_the_command_line(cli_env: str, engine: Engine) -> None:
    created = runner.invoke(
        app,
        ["keys", "create", "--proxy", "--team", "search", "--cost-center", "cc-7",
         "--tags", "app=rag", "--deployments", "smol,big", "--gateway", "--json"],
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    key = json.loads(created.stdout)
    assert (key["purpose"], key["team"], key["cost_center"]) == ("proxy", "search", "cc-7")
    assert (key["tags"], key["deployments"], key["gateway"]) == (
        {"app": "rag"},
        ["big", "smol"],
        True,
    )
    listed = runner.invoke(app, ["keys", "list"])
    assert "proxy team=search cost_center=cc-7 deployments=big,smol gateway" in listed.stdout
    for args, message in (
        (["--team", "x", "--cost-center", "c"], "--cost-center is for proxy keys"),
        (["--proxy", "--team", "x", "--tags", "novalue"], "--tags"),
        (["--proxy", "--admin"], "a proxy key bills one team"),
        (["--proxy", "--team", "x", "--tags", "specledger.via=key"], "proxy's own"),
    ):
        refused = runner.invoke(app, ["keys", "create", *args])
        assert refused.exit_code == 2, refused.output
        assert message in " ".join(refused.stderr.split()), refused.stderr
    with engine.connect() as conn:
        assert conn.execute(select(ApiKey.id)).all() == [(key["id"],)]  # nothing else stored


def test_a_blank_team_is_no_team(cli_env: str) -> None:
    refused = runner.invoke(app, ["keys", "create", "--team", "  "])
    assert refused.exit_code == 2
    assert "exactly one" in refused.stderr


def test_keys_in_a_query_string_never_reach_the_access_log() -> None:
    import logging

    from app.ops import RedactKeysInAccessLog

    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
        ("1.2.3.4", "GET", "/dashboards/cost?month=2026-10&key=slk_secret&team=a", "1.1", 200),
        None,
    )  # fmt: skip
    assert RedactKeysInAccessLog().filter(record)
    assert "slk_secret" not in record.getMessage()
    assert "key=REDACTED&team=a" in record.getMessage()
