"""`specledger proxy`: replica options and the checks made before serving."""

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from app.cli.proxy import parse_replica, register
from serving.engine.config import EngineConfig, NgramSpeculation, save_engine_config

runner = CliRunner()


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("noop")(lambda: None)  # keeps `proxy` a subcommand
    register(app)
    return app


def test_parse_replica_with_every_key():
    spec = parse_replica(
        "http://10.0.0.5:8100/v1,gpus=4,deployment=llama,name=r1,spec=ngram,k=4,model=llama-8b"
    )
    assert spec.base_url == "http://10.0.0.5:8100"
    assert (spec.gpus, spec.deployment, spec.replica_name) == (4, "llama", "r1")
    assert (spec.spec_method, spec.spec_k, spec.model) == ("ngram", 4, "llama-8b")
    assert parse_replica("http://h:1").replica_name == "h:1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10.0.0.5:8100", "must be the replica's http"),
        ("http://h:1,colour=red", "expected one of gpus"),
        ("http://h:1,gpus=0", "greater than 0"),
    ],
)
def test_parse_replica_errors(text, message):
    with pytest.raises(typer.BadParameter, match=message):
        parse_replica(text)


def test_replica_from_a_saved_engine_config(tmp_path: Path, monkeypatch):
    config = EngineConfig(
        name="smol",
        model="/models/SmolLM2-135M-Instruct",
        port=8123,
        speculation=NgramSpeculation(k=3),
    )
    save_engine_config(config, tmp_path / "smol.json")
    served = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: served.update(kw))
    # the command imports the app only when it runs
    monkeypatch.setattr("serving.proxy.app.create_proxy_app", lambda cfg: served.update(config=cfg))
    result = runner.invoke(
        _cli(),
        [
            "proxy",
            "--engine",
            "smol",
            "--engines-dir",
            str(tmp_path),
            "--no-db",
            "--allow-anonymous",
            "--jsonl",
            str(tmp_path / "u.jsonl"),
            "--port",
            "9999",
        ],
    )
    assert result.exit_code == 0, result.output
    (replica,) = served["config"].replicas
    assert (
        replica.base_url,
        replica.deployment,
        replica.spec_method,
        replica.spec_k,
        replica.model,
    ) == ("http://127.0.0.1:8123", "smol", "ngram", 3, "SmolLM2-135M-Instruct")
    assert served["port"] == 9999
    assert served["config"].database_url is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give at least one --replica or --engine"),
        (["--replica", "http://h:1", "--no-db"], "--no-db needs --jsonl"),
        (["--engine", "missing"], "engine 'missing'"),
        (
            ["--replica", "http://h:1", "--no-db", "--jsonl", "u.jsonl"],
            "the proxy checks proxy keys",
        ),
    ],
)
def test_proxy_refuses_incomplete_options(args, message, tmp_path: Path):
    result = runner.invoke(_cli(), ["proxy", "--engines-dir", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
