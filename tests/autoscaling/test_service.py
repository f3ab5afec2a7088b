"""The Ray advice from what the ledger holds (SQLite and PostgreSQL): the newest fitted sweep,
the p90 load by hour of the week and the ledger's node-hour price; and from the command line."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.autoscaling.rules import RayAdviceInput, advise_ray, default_tpot_target
from app.autoscaling.service import RayAdviceRequest, ray_advice
from app.cli import app
from app.domain.errors import InvalidInput
from app.domain.ledger import EntryKind
from app.slurm.partition import NoFittedSweep, fitted_tpot, hourly_load
from tests.breakeven.test_partition_load import NOW, WEEK, _rollup, _run, _store_sweep, _usage
from tests.factories import insert_usage, usage_record

runner = CliRunner()


def _ledger(session: Session, tmp_path: Path) -> None:
    insert_usage(session.connection(), _usage())
    run = _run(session, "2026-09")
    # 40 USD over 8 GPU-hours: 5 USD a GPU-hour, 40 USD an 8-GPU node-hour.
    _rollup(session, run, "2026-09", kind=EntryKind.request, cost=40_000_000, gpu_hours=8)
    _store_sweep(session, tmp_path, "d1")


def test_the_advice_comes_from_the_ledger(session: Session, tmp_path: Path) -> None:
    with pytest.raises(NoFittedSweep):
        ray_advice(session, RayAdviceRequest(deployment="d1"), now=NOW)
    _ledger(session, tmp_path)
    tpot = fitted_tpot(session, "d1")
    target = tpot(4, False) * 1.01

    advice = ray_advice(
        session,
        RayAdviceRequest(deployment="d1", tpot_target_s=target, weeks=2, max_nodes=3),
        now=NOW,
    )

    expected = advise_ray(
        RayAdviceInput(
            hourly_load=hourly_load(session, "d1", weeks=2, now=NOW),
            tpot_target_s=target,
            gpus_per_node=8,
            gpus_per_replica=8,
            max_nodes=3,
            node_hour_micros=40_000_000,
            currency="USD",
            deployment="d1",
            application="d1",
            import_path="serve_app:app",
            k=4,
            speculation="ngram k=4",
        ),
        tpot_s=tpot,
    )
    assert advice == expected
    # Hour 38's p90 is 2 sessions: one replica; the quietest hours speculate on it.
    assert advice.replicas[38] == 1
    assert advice.target_ongoing_requests >= 4
    assert advice.hours[0].speculate
    assert advice.speculation_bands[0].k == 4
    # One node all week (no downscale), 3 static.
    assert advice.weekly_cost_micros == 168 * 40_000_000
    assert advice.static_weekly_cost_micros == 3 * 168 * 40_000_000


def test_without_a_target_the_curves_breakeven_sets_it(session: Session, tmp_path: Path) -> None:
    _ledger(session, tmp_path)
    advice = ray_advice(session, RayAdviceRequest(deployment="d1", weeks=2), now=NOW)
    tpot = fitted_tpot(session, "d1")
    assert advice.input.tpot_target_s == default_tpot_target(tpot)
    # Held at the target, a replica runs where speculation has just stopped paying.
    last_on = max(band.end for band in advice.speculation_bands if band.k)
    assert advice.target_ongoing_requests >= last_on
    with pytest.raises(InvalidInput, match="not met even at one session"):
        ray_advice(session, RayAdviceRequest(deployment="d1", tpot_target_s=1e-6, weeks=2), now=NOW)


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_advise_ray_from_the_command_line(cli_env: str, engine: Engine, tmp_path: Path) -> None:
    """40 sessions for an hour a week ago, a fitted sweep and a ledger price: YAML that Ray
    reads, JSON and text; bad options exit 2 naming them."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    sessions = [
        usage_record(session_id=f"s{i}", arrived=now - WEEK, seconds=3600) for i in range(40)
    ]
    with Session(engine) as session, session.begin():
        insert_usage(session.connection(), sessions)
        run = _run(session, "2026-09")
        _rollup(session, run, "2026-09", kind=EntryKind.request, cost=40_000_000, gpu_hours=8)
        _store_sweep(session, tmp_path, "d1")
    args = ["advise", "ray", "--deployment", "d1", "--tpot-p90-ms", "1000", "--weeks", "1"]

    manifest = yaml.safe_load(_ok(*args))
    serve = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    (deployment,) = serve["applications"][0]["deployments"]
    assert deployment["name"] == "d1"
    assert deployment["autoscaling_config"]["min_replicas"] == 1
    advice = json.loads(_ok(*args, "--format", "json"))
    assert advice["node_hour_cost"] == "40.000000"
    assert advice["hours"][0]["load"] >= 0
    assert "Ray Serve advice for deployment d1" in _ok(*args, "--format", "text")
    bad = runner.invoke(app, [*args, "--format", "toml"])
    assert bad.exit_code == 2
    assert "--format" in bad.output
    missing = runner.invoke(app, ["advise", "ray", "--deployment", "nobody"])
    assert missing.exit_code == 2
    assert "no fitted sweep" in missing.output
