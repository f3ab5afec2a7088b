"""A sweep belongs to a deployment: `breakeven fit --deployment`, and `breakeven apply` takes
the deployment's own newest fitted sweep (never another deployment's) from the engines
folder of SPECLEDGER_DATA_DIR."""

import json
from pathlib import Path

from sqlalchemy import Engine, select
from typer.testing import CliRunner

from app.cli import app
from app.models import Sweep
from app.settings import get_settings
from serving.engine.config import EngineConfig, NgramSpeculation, save_engine_config
from tests.breakeven.helpers import sweep_rows, write_rows

runner = CliRunner()


def _fit(tmp_path: Path, name: str, seed: int, *extra: str) -> dict[str, object]:
    path = write_rows(tmp_path / name, sweep_rows(noise=0.02, seed=seed))
    result = runner.invoke(
        app, ["breakeven", "fit", str(path), "--json", "--bootstrap", "0", *extra]
    )
    assert result.exit_code == 0, result.output
    body: dict[str, object] = json.loads(result.stdout)
    return body


def _register(name: str) -> Path:
    assert runner.invoke(app, ["deployments", "add", name]).exit_code == 0
    config = EngineConfig(name=name, model="/models/smol", speculation=NgramSpeculation(k=4))
    return save_engine_config(config, get_settings().engines_dir / f"{name}.json")


def test_a_fitted_sweep_is_stored_with_its_deployment(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
    _register("smol")
    body = _fit(tmp_path, "a.csv", 0, "--deployment", "smol")
    with engine.connect() as conn:
        owner = conn.execute(
            select(Sweep.deployment).where(Sweep.id == body["sweep_id"])
        ).scalar_one()
    assert owner == "smol"


def test_an_unknown_deployment_is_refused_with_the_known_names(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
    _register("smol-chat")
    path = write_rows(tmp_path / "a.csv", sweep_rows(noise=0.02, seed=0))
    result = runner.invoke(
        app, ["breakeven", "fit", str(path), "--bootstrap", "0", "--deployment", "smol-chta"]
    )
    assert result.exit_code == 2
    assert "unknown deployment 'smol-chta'" in result.stderr
    assert "did you mean 'smol-chat'" in result.stderr
    with engine.connect() as conn:
        assert conn.execute(select(Sweep.id)).first() is None


def test_apply_takes_the_deployments_own_sweep_not_a_newer_one_of_another(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
    path = _register("smol")
    _register("other")
    own = _fit(tmp_path, "own.csv", 0, "--deployment", "smol")
    _fit(tmp_path, "other.csv", 1, "--deployment", "other")  # newer, another deployment's
    result = runner.invoke(app, ["breakeven", "apply", "--deployment", "smol", "--min-k", "0"])
    assert result.exit_code == 0, result.output
    assert f"from sweep {own['sweep_id']}" in result.stdout
    assert str(path) in result.stdout  # the engines folder of SPECLEDGER_DATA_DIR


def test_apply_falls_back_to_a_sweep_of_no_deployment_only(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
    _register("smol")
    _register("other")
    _fit(tmp_path, "other.csv", 1, "--deployment", "other")
    result = runner.invoke(app, ["breakeven", "apply", "--deployment", "smol"])
    assert result.exit_code == 2
    assert "no fitted sweep yet for deployment 'smol'" in result.stderr
    anyone = _fit(tmp_path, "anyone.csv", 2)
    result = runner.invoke(app, ["breakeven", "apply", "--deployment", "smol", "--min-k", "0"])
    assert result.exit_code == 0, result.output
    assert f"from sweep {anyone['sweep_id']}" in result.stdout
