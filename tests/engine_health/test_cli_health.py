"""``specledger health`` end to end on the test database and this machine."""

import json

import typer
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.cli import health
from app.deployments.service import add_deployment
from tests.conftest import FIXTURES

LOGS = FIXTURES / "vllm_logs"
runner = CliRunner()

cli = typer.Typer()


@cli.callback()
def _root() -> None:
    """The test root (the real one is app.cli.app)."""


health.register(cli)


def test_numa_on_this_machine() -> None:
    done = runner.invoke(cli, ["health", "numa", "--json"], env={"VLLM_CPU_OMP_THREADS_BIND": ""})
    assert done.exit_code == 2  # an empty binding is not one vLLM accepts
    assert "VLLM_CPU_OMP_THREADS_BIND is empty" in done.output
    done = runner.invoke(cli, ["health", "numa", "--threads-bind", "auto", "--json"])
    assert done.exit_code == 0, done.output
    body = json.loads(done.stdout)
    assert body["sys_nodes"] == body["lscpu_nodes"] >= 1
    text = runner.invoke(cli, ["health", "numa", "--threads-bind", "0"])
    assert text.exit_code == 0
    assert "NUMA nodes:" in text.stdout


def test_numa_exits_1_across_sockets_and_2_on_a_bad_value() -> None:
    done = runner.invoke(cli, ["health", "numa", "--threads-bind", "0-4095"])
    assert done.exit_code == 1
    assert "critical: VLLM_CPU_OMP_THREADS_BIND='0-4095'" in done.stdout
    bad = runner.invoke(cli, ["health", "numa", "--threads-bind", "0-x"])
    assert bad.exit_code == 2
    assert "'0-x'" in bad.output


def test_numa_checks_the_binding_a_startup_log_reports() -> None:
    done = runner.invoke(cli, ["health", "numa", "--log", str(LOGS / "cpu_baseline.log"), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["threads_bind"] == "0"  # vLLM's auto bound core 0


def test_draft_memory_record_list_and_findings(cli_env: str, engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        add_deployment(session, name="smol")
    args = [
        "health",
        "draft-memory",
        "record",
        "--deployment",
        "smol",
        "--log",
        str(LOGS / "cpu_draft_l6.log"),
        "--baseline-log",
        str(LOGS / "cpu_baseline.log"),
    ]
    done = runner.invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert "holds 1.175 GiB (16.6% of 7.06 GiB requested" in done.stdout
    assert "224,000 tokens with it, 278,784 without" in done.stdout
    listed = runner.invoke(cli, ["health", "draft-memory", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)
    assert (row["deployment"], row["kv_tokens_with"], row["capacity_ratio"]) == (
        "smol",
        224_000,
        1.2446,
    )
    swapped = runner.invoke(cli, [*args[:5], "--log", args[8], "--baseline-log", args[6]])
    assert swapped.exit_code == 2
    assert "baseline log ran with speculation" in swapped.output
    unknown = runner.invoke(cli, [*args[:4], "nobody", *args[5:]])
    assert unknown.exit_code == 2
    assert "unknown deployment 'nobody'" in unknown.output
    findings = runner.invoke(cli, ["health", "draft-memory", "findings", "--json"])
    assert findings.exit_code == 0, findings.output
    assert json.loads(findings.stdout) == []  # no GPU cost in the ledger: nothing to price
