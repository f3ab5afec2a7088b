"""`specledger tiers show` and `tiers recommend`: the catalog as data, reasoned advice."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.tiers.catalog import TierCatalogError, load_tier_catalog, parse_tier_catalog
from tests.breakeven.helpers import sweep_rows, write_rows

runner = CliRunner()


def test_catalog_holds_the_three_tiers_of_the_design() -> None:
    catalog = load_tier_catalog()
    assert [t.name for t in catalog.tiers] == ["prototype", "scaled", "enterprise"]
    prototype, scaled, enterprise = catalog.tiers
    assert (prototype.instance_type, prototype.instances_min, prototype.instances_max) == (
        "g5.12xlarge",
        1,
        1,
    )
    assert (prototype.speculation.draft, prototype.target) == (
        "Llama-3.2-1B-Instruct",
        "Llama-3.1-8B-Instruct",
    )
    assert (prototype.sessions_min, prototype.sessions_max) == (5, 20)
    assert (scaled.instance_type, scaled.instances_min, scaled.instances_max) == (
        "p4d.24xlarge",
        2,
        4,
    )
    assert (scaled.sessions_min, scaled.sessions_max) == (50, 250)
    assert (enterprise.instance_type, enterprise.instances_min) == ("p5.48xlarge", 8)
    assert enterprise.speculation.method == "medusa"
    assert (enterprise.sessions_min, enterprise.sessions_max) == (500, 3000)
    for tier in catalog.tiers:  # no figures were given anywhere: say so, invent nothing
        assert tier.quoted["usd_per_month"] is None
        assert "not provided" in tier.quoted["note"]


def test_catalog_errors_name_the_entry() -> None:
    with pytest.raises(TierCatalogError, match=r"tiers\[0\]"):
        parse_tier_catalog(
            {
                "hours_per_month": 730,
                "calibration": {
                    "bandwidth_efficiency": 1,
                    "compute_efficiency": 1,
                    "step_overhead_s": 0,
                    "source": "x",
                },
                "tpot_p90_over_mean": {"value": 1, "source": "x"},
                "gpus": {},
                "models": {},
                "tiers": [{"name": "t"}],
            }
        )


def test_tiers_show_json_prices_every_tier() -> None:
    result = runner.invoke(app, ["tiers", "show", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    tiers = {t["name"]: t for t in report["tiers"]}
    assert set(tiers) == {"prototype", "scaled", "enterprise"}
    prototype = tiers["prototype"]["sizes"][0]
    assert prototype["usd_per_hour"] == "5.672000"  # instance_prices.json
    assert prototype["usd_per_month"] == "4140.560000"  # x 730 h
    assert [s["instances"] for s in tiers["scaled"]["sizes"]] == [2, 3, 4]
    point = prototype["points"][0]
    assert point["concurrency"] == 5
    # $5.672/h over 5 sessions: 5.672 / 3.6 / 5 per 1K session-seconds, in every mode
    assert point["none"]["usd_per_1k_session_seconds"] == "0.315111"
    assert point["fixed"]["usd_per_1k_session_seconds"] == "0.315111"
    assert float(point["fixed"]["usd_per_1m_tokens"]) < float(point["none"]["usd_per_1m_tokens"])


def test_tiers_show_text_mentions_quoted_figures_and_sources() -> None:
    result = runner.invoke(app, ["tiers", "show"])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("quoted: not provided") == 3
    assert "Calibration: reference/specdecode.md 3.6" in result.stdout


@pytest.mark.parametrize(
    ("concurrency", "tpot", "expected"),
    [
        (12, 0.010, "prototype"),
        (150, 0.030, "scaled"),
        (1000, 0.012, "enterprise"),
    ],
)
def test_recommend_picks_the_tier_sized_for_the_load(
    concurrency: int, tpot: float, expected: str
) -> None:
    result = runner.invoke(
        app,
        [
            "tiers",
            "recommend",
            "--concurrency",
            str(concurrency),
            "--tpot-p90",
            str(tpot),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["recommended"] == expected
    assert body["chosen_outside_session_range"] is False
    chosen = next(o for o in body["options"] if o["tier"] == expected)
    assert chosen["feasible"]
    assert chosen["tpot_p90_s"][chosen["speculation"]] <= tpot
    assert len(body["reasoning"]) >= 4


def test_recommend_explains_when_no_tier_meets_the_target() -> None:
    result = runner.invoke(
        app, ["tiers", "recommend", "--concurrency", "3000", "--tpot-p90", "0.001"]
    )
    assert result.exit_code == 0, result.output
    assert "No tier meets the target." in result.stdout
    assert "prototype: cannot meet it (3000 sessions exceed 1 instance(s)" in result.stdout
    assert "enterprise: cannot meet it (even 8 instance(s) give a TPOT p90 of" in result.stdout


def test_recommend_outside_every_range_says_so() -> None:
    result = runner.invoke(
        app, ["tiers", "recommend", "--concurrency", "30", "--tpot-p90", "0.02", "--json"]
    )
    body = json.loads(result.stdout)
    assert body["recommended"] is not None
    assert body["chosen_outside_session_range"] is True
    assert any("no tier sized for this load meets the target" in line for line in body["reasoning"])


def test_recommend_with_a_sweep_uses_its_acceptance(cli_env: str, tmp_path: Path) -> None:
    rows = sweep_rows(noise=0.01, seed=0)
    for row in rows:
        row["tpot_p90_s"] = float(row["tpot_p50_s"]) * 1.5  # type: ignore[arg-type]
    header = [*rows[0].keys()]
    fitted = runner.invoke(
        app,
        [
            "breakeven",
            "fit",
            str(write_rows(tmp_path / "s.csv", rows, header)),
            "--json",
            "--bootstrap",
            "0",
        ],
    )
    sweep_id = json.loads(fitted.stdout)["sweep_id"]
    result = runner.invoke(
        app,
        [
            "tiers",
            "recommend",
            "--concurrency",
            "12",
            "--tpot-p90",
            "0.02",
            "--sweep",
            str(sweep_id),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["workload"] == f"sweep {sweep_id} (s.csv)"
    assert body["tpot_p90_over_mean"] == pytest.approx(1.5)
    missing = runner.invoke(
        app, ["tiers", "recommend", "--concurrency", "12", "--tpot-p90", "0.02", "--sweep", "999"]
    )
    assert missing.exit_code == 2
    assert "no sweep 999" in missing.stderr
