"""`specledger tiers show` and `tiers recommend`: the catalog as data, the brief's figures as
claims checked against the computed ones, reasoned advice."""

import json
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.breakeven.tier_catalog import TierCatalogError, load_tier_catalog, parse_tier_catalog
from app.cli import app
from tests.breakeven.helpers import sweep_rows, write_rows

runner = CliRunner()
BRIEF = "reference/product-brief.txt"

QUOTED = {  # the product brief, "3 Maturity Tiers & Infrastructure Specifications"
    "prototype": ("1200", "3500", "0.12", "$1,200 - $3,500 / mo"),
    "scaled": ("6500", "22000", "0.065", "$6,500 - $22,000 / mo"),
    "enterprise": ("22000", "95000", "0.042", "$22,000 - $95,000 / mo"),
}


def test_catalog_holds_the_three_tiers_of_the_design() -> None:
    catalog = load_tier_catalog()
    assert [t.name for t in catalog.tiers] == ["prototype", "scaled", "enterprise"]
    prototype, scaled, enterprise = catalog.tiers
    assert (prototype.instance_type, prototype.instances.min, prototype.instances.max) == (
        "g5.12xlarge",
        1,
        1,
    )
    assert (prototype.speculation.draft, prototype.target) == (
        "Llama-3.2-1B-Instruct",
        "Llama-3.1-8B-Instruct",
    )
    assert (prototype.sessions.min, prototype.sessions.max) == (5, 20)
    assert (scaled.instance_type, scaled.instances.min, scaled.instances.max) == (
        "p4d.24xlarge",
        2,
        4,
    )
    assert (scaled.sessions.min, scaled.sessions.max) == (50, 250)
    assert (enterprise.instance_type, enterprise.instances.min) == ("p5.48xlarge", 8)
    assert enterprise.speculation.method == "medusa"
    assert (enterprise.sessions.min, enterprise.sessions.max) == (500, 3000)


@pytest.mark.parametrize("name", list(QUOTED))
def test_catalog_keeps_the_briefs_tier_figures_as_quoted_claims(name: str) -> None:
    low, high, per_1k, line = QUOTED[name]
    quoted = load_tier_catalog().tier(name).quoted
    assert quoted is not None
    assert (quoted.usd_per_month.min, quoted.usd_per_month.max) == (Decimal(low), Decimal(high))
    assert quoted.usd_per_1k_session_seconds == Decimal(per_1k)
    assert quoted.usd_per_month.micros == (int(low) * 10**6, int(high) * 10**6)
    assert BRIEF in quoted.source
    assert line in quoted.text  # verbatim
    assert f"${per_1k} / 1K session-seconds" in quoted.text


def test_catalog_keeps_the_briefs_speedup_as_a_claim() -> None:
    claim = load_tier_catalog().claims.speedup
    assert claim is not None
    assert claim.value == 2.5
    assert BRIEF in claim.source
    assert "to achieve 2.5x inference speedup" in claim.quotation


def test_catalog_money_must_be_decimal_strings() -> None:
    data = json.loads(resources.files("app").joinpath("data/tiers.json").read_text("utf-8"))
    data["tiers"][0]["quoted"]["usd_per_1k_session_seconds"] = 0.12
    with pytest.raises(TierCatalogError, match=r"tiers\[0\]\.quoted\.usd_per_1k_session_seconds"):
        parse_tier_catalog(data)


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


def _checks(tier: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["claim"]: check for check in tier["claim_checks"]}


def test_tiers_show_json_puts_the_quotes_beside_the_computed_figures() -> None:
    result = runner.invoke(app, ["tiers", "show", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["claims"]["speedup"]["value"] == 2.5
    assert BRIEF in report["claims"]["speedup"]["source"]
    assert report["claims"]["speedup"]["measured"] is None  # no sweep named
    tiers = {t["name"]: t for t in report["tiers"]}
    for name, (low, high, per_1k, _) in QUOTED.items():
        quoted = tiers[name]["quoted"]
        assert quoted["usd_per_month"] == {"min": f"{low}.000000", "max": f"{high}.000000"}
        assert Decimal(quoted["usd_per_1k_session_seconds"]) == Decimal(per_1k)
        assert BRIEF in quoted["source"]
    # 1 x g5.12xlarge at $5.672/h x 730 h = $4,140.56 against a quoted top of $3,500
    prototype = _checks(tiers["prototype"])
    assert prototype["usd_per_month"]["verdict"] == "above"
    assert prototype["usd_per_month"]["computed"] == {"min": "4140.560000", "max": "4140.560000"}
    assert "617 h a month (85% of 730 h)" in prototype["usd_per_month"]["reason"]
    # $5.672/h / 3.6 over 5-20 sessions spans $0.0788-0.3151: the quoted $0.12 is in it
    assert prototype["usd_per_1k_session_seconds"]["verdict"] == "within"
    assert prototype["usd_per_1k_session_seconds"]["computed"] == {
        "min": "0.078778",
        "max": "0.315111",
    }
    assert "13.1 concurrent sessions" in prototype["usd_per_1k_session_seconds"]["reason"]
    # 2-4 x p4d.24xlarge at $21.957642/h x 730 h: $32,058.16-64,116.31 against $22,000
    scaled = _checks(tiers["scaled"])
    assert scaled["usd_per_month"]["verdict"] == "above"
    assert scaled["usd_per_month"]["computed"]["min"] == "32058.157320"
    assert scaled["usd_per_1k_session_seconds"]["verdict"] == "within"
    # 8 x p5.48xlarge at $55.04/h x 730 h = $321,433.60, 3.38x the quoted top of $95,000
    enterprise = _checks(tiers["enterprise"])
    assert enterprise["usd_per_month"]["verdict"] == "above"
    assert enterprise["usd_per_month"]["computed"]["min"] == "321433.600000"
    reason = enterprise["usd_per_month"]["reason"]
    assert "8 x p5.48xlarge (64 GPUs) is 3.38x the quoted top of $95,000.00" in reason
    assert "2.36 instances running all month" in reason
    assert "8 running 216 h a month (30% of 730 h)" in reason
    assert enterprise["usd_per_1k_session_seconds"]["verdict"] == "within"
    for tier in tiers.values():  # the model stays under the brief's 2.5x at every tier's load
        speedup = _checks(tier)["speedup"]
        assert speedup["verdict"] == "below"
        assert speedup["quoted"] == {"min": 2.5, "max": 2.5}
        assert speedup["computed"]["max"] < 2.5


def test_tiers_show_text_flags_the_quotes_with_their_source_and_reason() -> None:
    result = runner.invoke(app, ["tiers", "show"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.count("quoted: ") == 3
    assert text.count(BRIEF) == 4  # three tiers and the speedup
    assert '"1. Prototype / Early Stage5 - 20 concurrent sessions | $1,200 - $3,500 / mo' in text
    assert (
        "FLAG monthly cost: quoted $1,200.00 to $3,500.00, computed $4,140.56: computed ABOVE"
        in text
    )
    assert "FLAG monthly cost: quoted $22,000.00 to $95,000.00, computed $321,433.60" in text
    assert "ok   cost per 1K session-seconds: quoted $0.12" in text
    assert text.count("FLAG speedup: quoted 2.50x") == 3
    assert text.count("why: ") == 9
    assert "Calibration: reference/specdecode.md 3.6" in text


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
    # the brief's figures beside the computed ones at this load, flagged
    assert BRIEF in chosen["quoted"]["source"]
    checks = {c["claim"]: c for c in chosen["claim_checks"]}
    assert set(checks) == {"usd_per_month", "usd_per_1k_session_seconds"}
    assert (
        checks["usd_per_1k_session_seconds"]["computed"]["min"]
        == (chosen["usd_per_1k_session_seconds"])
    )
    assert checks["usd_per_month"]["verdict"] == "above"  # no tier meets its monthly quote


def test_recommend_explains_when_no_tier_meets_the_target() -> None:
    result = runner.invoke(
        app, ["tiers", "recommend", "--concurrency", "3000", "--tpot-p90", "0.001"]
    )
    assert result.exit_code == 0, result.output
    assert "No tier meets the target." in result.stdout
    assert "prototype: cannot meet it (3000 sessions exceed 1 instance(s)" in result.stdout
    assert "enterprise: cannot meet it (even 8 instance(s) give a TPOT p90 of" in result.stdout
    assert "against the brief" not in result.stdout  # no size chosen: nothing to check


def test_recommend_text_says_what_the_brief_quotes_at_this_load() -> None:
    result = runner.invoke(app, ["tiers", "recommend", "--concurrency", "12", "--tpot-p90", "0.01"])
    assert result.exit_code == 0, result.output
    assert (
        "the brief quotes $1,200.00-$3,500.00 a month (computed $4,140.56: above) and $0.12 "
        "per 1K session-seconds (computed $0.131296: above)" in " ".join(result.stdout.split())
    )
    assert "prototype against the brief, at this load:" in result.stdout
    assert "more than this load's 12" in result.stdout


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
    shown = runner.invoke(app, ["tiers", "show", "--sweep", str(sweep_id), "--json"])
    assert shown.exit_code == 0, shown.output
    measured = json.loads(shown.stdout)["claims"]["speedup"]["measured"]
    assert measured["source"] == f"sweep {sweep_id} (s.csv)"
    assert [c for c, _ in measured["points"]] == [1, 2, 4, 8, 16, 32]
    assert measured["verdict"] == "below"  # the CPU sweep's best is about 1.7x
    assert (
        "measured by sweep"
        in runner.invoke(app, ["tiers", "show", "--sweep", str(sweep_id)]).stdout
    )
    missing = runner.invoke(
        app, ["tiers", "recommend", "--concurrency", "12", "--tpot-p90", "0.02", "--sweep", "999"]
    )
    assert missing.exit_code == 2
    assert "no sweep 999" in missing.stderr
