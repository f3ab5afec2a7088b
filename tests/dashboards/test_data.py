"""The dashboards' queries on a billed and allocated month, on SQLite and PostgreSQL."""

import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import Engine, delete, update
from sqlalchemy.orm import Session

from app.breakeven.tier_catalog import load_tier_catalog
from app.domain.periods import Month
from app.ledger.costs import CostLine, unit_costs
from app.models import Sweep, SweepPointRecord
from dashboards import breakeven_data, data, figures
from tests.dashboards.seed import MONTH, TEAMS, Seeded, add_sweep


def _unit_costs_by_team(engine: Engine, team: str | None = None) -> dict[str, CostLine]:
    with Session(engine) as session:
        lines = unit_costs(session, month=Month.parse(MONTH), by=["team"], team=team)
    return {line.key[0]: line for line in lines}


def test_ledger_by_hour_adds_up_to_the_bill(seeded: Seeded, engine: Engine) -> None:
    ledger = data.ledger_by_hour(engine, month=MONTH)
    assert int(ledger["effective_micros"].sum()) == seeded.bill_micros
    assert set(ledger["team"]) == {*TEAMS, "(idle)", "(unallocated)"}
    assert ledger["period_start"].min() == pd.Timestamp("2026-10-01T00:00", tz="UTC")
    assert ledger["period_start"].nunique() == 48
    # the same money as the unit-cost report, team by team
    lines = _unit_costs_by_team(engine)
    for team, micros in ledger.groupby("team")["effective_micros"].sum().items():
        assert lines[str(team)].effective_micros == micros
    # and the cost figure's bars carry exactly that money
    bars = figures.cost_by_team_figure(ledger).to_dict()["data"]
    assert round(sum(sum(bar["y"]) for bar in bars) * 1e6) == seeded.bill_micros


def test_a_team_sees_only_its_own_rows(seeded: Seeded, engine: Engine) -> None:
    ledger = data.ledger_by_hour(engine, month=MONTH, team="search")
    assert set(ledger["team"]) == {"search"}
    assert set(ledger["kind"]) == {"request", "shared"}
    usage = data.usage_by_hour(engine, month=MONTH, team="search")
    assert set(usage["team"]) == {"search"}
    sessions = data.session_seconds_by_hour(engine, month=MONTH, team="search")
    assert set(sessions["team"]) == {"search"}
    reconciliation = data.reconciliation_frame(engine, month=MONTH, team="search")
    (row,) = reconciliation.to_dict("records")
    assert pd.isna(row["bill_micros"])
    assert pd.isna(row["idle_micros"])
    assert row["request_micros"] + row["shared_micros"] == ledger["effective_micros"].sum()
    measured = breakeven_data.tier_frames(engine, month=MONTH, team="search").measured
    assert set(measured["tier"]) == {"prototype"}  # search only uses d1


def test_session_seconds_and_tokens_match_the_unit_cost_report(
    seeded: Seeded, engine: Engine
) -> None:
    lines = _unit_costs_by_team(engine)
    sessions = data.session_seconds_by_hour(engine, month=MONTH)
    usage = data.usage_by_hour(engine, month=MONTH)
    for team in TEAMS:
        line = lines[team]
        seconds = sessions.loc[sessions["team"] == team, "session_seconds"].sum()
        assert seconds == pytest.approx(line.session_ns / 1e9)
        rows = usage[usage["team"] == team]
        assert rows["completion_tokens"].sum() == line.completion_tokens
        assert rows["draft_tokens"].sum() == line.draft_tokens
        assert rows["accepted_tokens"].sum() == line.accepted_tokens
        assert rows["requests"].sum() == line.requests


def test_reconciliation_frame_is_balanced(seeded: Seeded, engine: Engine) -> None:
    (row,) = data.reconciliation_frame(engine, month=MONTH).to_dict("records")
    assert row["currency"] == "USD"
    assert row["balanced"] is True
    assert row["bill_micros"] == seeded.bill_micros
    parts = ("request_micros", "shared_micros", "idle_micros", "unallocated_micros")
    assert sum(row[p] for p in parts) == seeded.bill_micros
    assert row["unallocated_micros"] == 2_200_000  # the two storage rows tagged elsewhere
    assert row["shared_micros"] == 6_500_000  # the two networking rows, split evenly


def test_months_and_default_month(seeded: Seeded, engine: Engine) -> None:
    assert data.default_month(engine) == MONTH
    assert data.months(engine) == [MONTH]
    assert data.teams(engine) == sorted(TEAMS)


def test_nothing_yet_gives_empty_frames(engine: Engine) -> None:
    assert data.default_month(engine) == f"{datetime.now(UTC):%Y-%m}"
    assert data.ledger_by_hour(engine, month=MONTH).empty
    assert data.usage_by_hour(engine, month=MONTH).empty
    assert data.session_seconds_by_hour(engine, month=MONTH).empty
    assert data.reconciliation_frame(engine, month=MONTH).empty
    frames = breakeven_data.breakeven_frames(engine)
    assert frames.sweep is None
    assert frames.points.empty
    assert frames.curve.empty
    tiers = breakeven_data.tier_frames(engine, month=MONTH)
    assert tiers.measured.empty
    assert set(tiers.modelled["tier"]) == {"prototype", "scaled", "enterprise"}


def test_breakeven_frames_fit_a_sweep_without_a_stored_fit(seeded: Seeded, engine: Engine) -> None:
    frames = breakeven_data.breakeven_frames(engine)
    assert frames.sweep is not None
    assert frames.sweep["id"] == seeded.sweep_id
    assert frames.fit is not None
    assert frames.message is None
    measured = frames.points.set_index("concurrency")["measured_speedup"]
    assert measured[1] == pytest.approx(49.4 / 28.8)
    assert measured[16] == pytest.approx(134.7 / 204.5)
    (summary,) = frames.summary.to_dict("records")
    assert 2.0 < summary["breakeven_concurrency"] < 8.0  # DESIGN.md: between 4 and 8 ± noise
    assert summary["ci_low"] < summary["breakeven_concurrency"] < summary["ci_high"]
    # the fitted curve crosses 1 where the fit says
    curve = frames.curve.sort_values("concurrency")
    crossing = curve[curve["speedup"] < 1.0]["concurrency"].iloc[0]
    assert crossing == pytest.approx(summary["breakeven_concurrency"], rel=0.1)
    assert list(frames.schedule.columns) == ["start", "end", "k"]
    assert frames.schedule["k"].iloc[-1] == 0


def test_breakeven_frames_use_a_stored_fit(seeded: Seeded, engine: Engine) -> None:
    computed = breakeven_data.breakeven_frames(engine).fit
    assert computed is not None
    stored = {
        **computed,
        "breakeven_concurrency": 4.5,
        "breakeven_ci": [4.0, 5.0],
        "schedule": [[1, 3, 2], [4, 256, 0]],
    }
    with engine.begin() as conn:
        conn.execute(update(Sweep).where(Sweep.id == seeded.sweep_id).values(fit=stored))
    frames = breakeven_data.breakeven_frames(engine, sweep_id=seeded.sweep_id)
    assert frames.summary.to_dict("records")[0]["breakeven_concurrency"] == 4.5
    assert frames.schedule.values.tolist() == [[1, 3, 2], [4, 256, 0]]


def test_a_sweep_that_cannot_be_fitted_still_shows_its_points(engine: Engine) -> None:
    sweep_id = add_sweep(engine)
    with engine.begin() as conn:  # too few levels: drop the top three
        conn.execute(
            delete(SweepPointRecord).where(
                SweepPointRecord.sweep_id == sweep_id, SweepPointRecord.concurrency > 2
            )
        )
    frames = breakeven_data.breakeven_frames(engine)
    assert frames.fit is None
    assert frames.message is not None
    assert frames.message.startswith("no fit:")
    assert len(frames.points) == 2


def test_tier_frames_measure_cost_per_session_second(seeded: Seeded, engine: Engine) -> None:
    tiers = breakeven_data.tier_frames(engine, month=MONTH)
    assert tiers.catalog_found
    assert set(tiers.measured["tier"]) == {"prototype", "scaled"}
    assert set(tiers.measured["concurrency"]) <= {1, 2, 4, 8}
    lines = _unit_costs_by_team(engine)
    request_cost = sum(line.effective_micros for team, line in lines.items() if team in TEAMS)
    measured = tiers.measured
    spent = (measured["usd_per_1k_session_seconds"] * measured["session_seconds"] / 1000).sum()
    shared = data.reconciliation_frame(engine, month=MONTH)["shared_micros"].iloc[0]
    assert spent == pytest.approx((request_cost - shared) / 1e6)  # requests' own cost only
    prototype = tiers.modelled[tiers.modelled["tier"] == "prototype"]
    assert prototype["label"].iloc[0] == "list price, 1x g5.12xlarge"
    at_ten = 5.672 / (3.6 * 10)  # one instance-hour over ten sessions, per 1K session-seconds
    first = prototype.iloc[0]
    assert first["usd_per_1k_session_seconds"] == pytest.approx(at_ten * 10 / first["concurrency"])


def test_tier_frames_put_the_briefs_claims_beside_computed_and_measured(
    seeded: Seeded, engine: Engine
) -> None:
    quoted = breakeven_data.tier_frames(engine, month=MONTH).quoted
    assert list(quoted.columns) == breakeven_data.QUOTED_COLUMNS
    rows = {(r["tier"], r["claim"]): r for r in quoted.to_dict("records")}
    assert set(rows) == {
        (tier, claim)
        for tier in ("prototype", "scaled", "enterprise")
        for claim in ("usd_per_month", "usd_per_1k_session_seconds", "speedup")
    }
    for row in rows.values():  # every claim carries its source and its words
        assert "reference/product-brief.txt" in row["source"]
        assert row["text"]
    month = rows["prototype", "usd_per_month"]
    assert (month["quoted_low"], month["quoted_high"]) == (1200.0, 3500.0)
    assert month["computed_low"] == pytest.approx(4140.56)
    assert month["verdict"] == "above"
    assert "617 h a month" in month["reason"]
    assert rows["enterprise", "usd_per_month"]["computed_low"] == pytest.approx(321_433.6)
    assert rows["enterprise", "usd_per_month"]["verdict"] == "above"
    per_1k = rows["prototype", "usd_per_1k_session_seconds"]
    assert per_1k["quoted_low"] == 0.12
    assert per_1k["verdict"] == "within"
    # the ledger's figure for the tier: its requests' cost over their session-seconds
    measured = breakeven_data.tier_frames(engine, month=MONTH).measured
    prototype = measured[measured["tier"] == "prototype"]
    spent = (prototype["usd_per_1k_session_seconds"] * prototype["session_seconds"]).sum()
    assert per_1k["measured"] == pytest.approx(spent / prototype["session_seconds"].sum())
    assert pd.isna(rows["enterprise", "usd_per_1k_session_seconds"]["measured"])  # none metered
    assert pd.isna(month["measured"])
    assert rows["prototype", "speedup"]["verdict"] == "below"


def test_tier_frames_read_the_catalog_they_are_given(tmp_path: Path, engine: Engine) -> None:
    catalog = json.loads(resources.files("app").joinpath("data/tiers.json").read_text("utf-8"))
    catalog["tiers"] = catalog["tiers"][:1]
    catalog["tiers"][0]["quoted"]["usd_per_month"] = {"min": "4000", "max": "4500"}
    path = tmp_path / "tiers.json"
    path.write_text(json.dumps(catalog), "utf-8")
    frames = breakeven_data.tier_frames(engine, month=MONTH, catalog=load_tier_catalog(path))
    assert set(frames.modelled["tier"]) == {"prototype"}
    month = frames.quoted[frames.quoted["claim"] == "usd_per_month"].iloc[0]
    assert month["verdict"] == "within"
    catalog["tiers"][0]["instance_type"] = "no-such-instance"
    path.write_text(json.dumps(catalog), "utf-8")
    broken = breakeven_data.tier_frames(engine, month=MONTH, catalog=load_tier_catalog(path))
    assert not broken.catalog_found
    assert broken.quoted.empty
