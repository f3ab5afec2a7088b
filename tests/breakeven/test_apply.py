"""`specledger breakeven apply`: the fitted schedule reaches the registry and the engine file."""

import itertools
import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from app.cli import app
from app.models import Deployment
from serving.engine import launcher
from serving.engine.config import (
    DraftModelSpeculation,
    EngineConfig,
    NgramSpeculation,
    NoSpeculation,
    load_engine_config,
    save_engine_config,
)
from tests.breakeven.helpers import CPU_STEP, sweep_rows, write_rows

runner = CliRunner()


def _fit(tmp_path: Path, rows: list[dict[str, object]] | None = None) -> dict[str, object]:
    path = write_rows(tmp_path / "sweep.csv", rows or sweep_rows(noise=0.02, seed=0))
    result = runner.invoke(app, ["breakeven", "fit", str(path), "--json", "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    body: dict[str, object] = json.loads(result.stdout)
    return body


def _deployment(name: str, engines: Path, speculation: object | None = None) -> Path:
    assert runner.invoke(app, ["deployments", "add", name]).exit_code == 0
    config = EngineConfig(
        name=name, model="/models/smol", speculation=speculation or NgramSpeculation(k=4)
    )
    return save_engine_config(config, engines / f"{name}.json")


def test_apply_writes_the_schedule_to_the_engine_file_and_the_registry(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
    engines = tmp_path / "engines"
    path = _deployment("smol", engines)
    body = _fit(tmp_path)
    result = runner.invoke(
        app,
        [
            "breakeven",
            "apply",
            "--deployment",
            "smol",
            "--min-k",
            "0",
            "--engines-dir",
            str(engines),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"from sweep {body['sweep_id']}" in result.stdout
    assert f"specledger engine start --config {path}" in result.stdout

    config = load_engine_config(path)
    assert config.batch_size_schedule is not None
    assert [[b.start, b.end, b.k] for b in config.batch_size_schedule] == body["schedule"]
    with engine.connect() as conn:
        stored = conn.execute(
            select(Deployment.engine_config).where(Deployment.name == "smol")
        ).scalar_one()
    assert EngineConfig.model_validate(stored) == config
    # The next start passes vLLM's dynamic speculation.
    argv = launcher.build_argv(config)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens_per_batch_size"] == body["schedule"]
    assert spec["num_speculative_tokens"] == 4


def test_apply_from_a_fit_file_turns_on_ngram_for_a_plain_engine(
    cli_env: str, tmp_path: Path
) -> None:
    engines = tmp_path / "engines"
    path = _deployment("plain", engines, NoSpeculation())
    fit_file = tmp_path / "fit.json"
    fit_file.write_text(json.dumps(_fit(tmp_path)))
    result = runner.invoke(
        app,
        [
            "breakeven",
            "apply",
            "--deployment",
            "plain",
            "--fit",
            str(fit_file),
            "--engines-dir",
            str(engines),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "set to ngram k=4" in result.stdout
    config = load_engine_config(path)
    assert config.speculation == NgramSpeculation(k=4)
    assert config.batch_size_schedule is not None


def test_a_schedule_that_never_speculates_turns_speculation_off(
    cli_env: str, tmp_path: Path
) -> None:
    from app.breakeven.rules.model import SpeculationModel

    never = SpeculationModel(k=4, mean_acceptance_length=1.05, drafter_overhead_s=0.01)
    engines = tmp_path / "engines"
    path = _deployment("slow", engines)
    body = _fit(tmp_path, sweep_rows(CPU_STEP, never, levels=(1, 2, 4, 8), seed=0))
    assert body["schedule"] == [[1, 256, 0]]
    result = runner.invoke(
        app, ["breakeven", "apply", "--deployment", "slow", "--engines-dir", str(engines)]
    )
    assert result.exit_code == 0, result.output
    assert "plain decoding" in result.stdout
    config = load_engine_config(path)
    assert config.speculation == NoSpeculation()
    assert config.batch_size_schedule is None


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("none", ["--deployment", "ghost"], "unknown deployment 'ghost'"),
        ("no-engine", ["--deployment", "bare"], "has no engine config"),
        ("draft", ["--deployment", "drafty"], "the fit is for 'ngram' but the engine"),
        ("fit", ["--deployment", "smol", "--sweep", "999"], "no sweep 999"),
        ("no-fit", ["--deployment", "smol"], "no fitted sweep yet"),
    ],
)
def test_apply_errors_are_clear(
    cli_env: str, tmp_path: Path, setup: str, args: list[str], message: str
) -> None:
    engines = tmp_path / "engines"
    if setup == "no-engine":
        assert runner.invoke(app, ["deployments", "add", "bare"]).exit_code == 0
    elif setup == "draft":
        _deployment("drafty", engines, DraftModelSpeculation(draft_model="/models/d", k=4))
    elif setup in ("fit", "no-fit"):
        _deployment("smol", engines)
    if setup not in ("no-fit",):
        _fit(tmp_path)
    result = runner.invoke(app, ["breakeven", "apply", *args, "--engines-dir", str(engines)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.stderr.split())


def test_min_k_keeps_the_drafter_drafting_where_the_fit_says_k0(
    cli_env: str, tmp_path: Path
) -> None:
    engines = tmp_path / "engines"
    path = _deployment("smol", engines)
    body = _fit(tmp_path)
    fitted = body["schedule"]
    assert isinstance(fitted, list)
    assert fitted[-1][2] == 0  # the fit turns drafting off
    result = runner.invoke(
        app, ["breakeven", "apply", "--deployment", "smol", "--engines-dir", str(engines)]
    )  # --min-k 1 by default
    assert result.exit_code == 0, result.output
    config = load_engine_config(path)
    assert config.batch_size_schedule is not None
    bands = [[b.start, b.end, b.k] for b in config.batch_size_schedule]
    assert min(k for _, _, k in bands) == 1
    assert (bands[0][0], bands[-1][1]) == (1, fitted[-1][1])
    assert all(a[1] + 1 == b[0] and a[2] != b[2] for a, b in itertools.pairwise(bands))


def test_raise_bands_merges_equal_neighbours() -> None:
    from app.breakeven.rules.model import ScheduleBand, raise_bands

    bands = [ScheduleBand(1, 8, 4), ScheduleBand(9, 20, 1), ScheduleBand(21, 256, 0)]
    assert [(b.start, b.end, b.k) for b in raise_bands(bands, 1)] == [(1, 8, 4), (9, 256, 1)]
    assert raise_bands(bands, 0) == tuple(bands)


def test_a_fit_file_that_is_not_a_fit_is_refused(cli_env: str, tmp_path: Path) -> None:
    engines = tmp_path / "engines"
    _deployment("smol", engines)
    bogus = tmp_path / "fit.json"
    bogus.write_text(json.dumps({"config": "ngram", "schedule": [[1, 8, 4]]}), "utf-8")
    result = runner.invoke(
        app,
        [
            "breakeven",
            "apply",
            "--deployment",
            "smol",
            "--fit",
            str(bogus),
            "--engines-dir",
            str(engines),
        ],
    )
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert f"{bogus}: not a breakeven fit" in message
    assert "configs: Field required" in message
