"""The pure figure functions: small frames in, assertions on ``fig.to_dict()``."""

import math
from typing import Any

import pandas as pd
import pytest

from dashboards import figures


def _ts(text: str) -> pd.Timestamp:
    return pd.Timestamp(text, tz="UTC")


def _ledger(rows: list[tuple[str, str, str, int]], currency: str = "USD") -> pd.DataFrame:
    return pd.DataFrame(
        [(_ts(t), team, kind, currency, micros, micros) for t, team, kind, micros in rows],
        columns=["period_start", "team", "kind", "currency", "effective_micros", "billed_micros"],
    )


def _annotations(fig_dict: dict[str, Any]) -> list[str]:
    return [a.get("text", "") for a in fig_dict["layout"].get("annotations", [])]


LEDGER = _ledger(
    [
        ("2026-10-01T00:00", "search", "request", 1_080_000),
        ("2026-10-01T00:00", "search", "shared", 500_000),
        ("2026-10-01T00:00", "ads", "request", 2_160_001),
        ("2026-10-01T00:00", "(idle)", "idle", 3_959_999),
        ("2026-10-01T01:00", "ads", "request", 1_440_000),
        ("2026-10-01T01:00", "(unallocated)", "unallocated", 550_000),
    ]
)


class TestCostByTeam:
    def test_bar_totals_equal_the_allocated_micros(self) -> None:
        fig = figures.cost_by_team_figure(LEDGER).to_dict()
        bars = {trace["name"]: trace for trace in fig["data"]}
        assert set(bars) == {"search", "ads", "(idle)", "(unallocated)"}
        for team, expected in LEDGER.groupby("team")["effective_micros"].sum().items():
            assert round(sum(bars[team]["y"]) * 1e6) == expected
            # hover text carries the exact amount, per bar
            exact = sum(int(c[0].replace(".", "")) for c in bars[team]["customdata"])
            assert exact == expected
        total = sum(sum(t["y"]) for t in fig["data"])
        assert round(total * 1e6) == int(LEDGER["effective_micros"].sum())
        assert fig["layout"]["barmode"] == "relative"

    def test_teams_first_then_idle_and_unallocated(self) -> None:
        names = [t["name"] for t in figures.cost_by_team_figure(LEDGER).to_dict()["data"]]
        assert names == ["ads", "search", "(idle)", "(unallocated)"]

    def test_long_spans_are_shown_per_day(self) -> None:
        frame = _ledger(
            [
                (f"2026-10-0{d}T{h:02d}:00", "search", "request", 1_000_000)
                for d in range(1, 6)
                for h in (3, 15)
            ]
        )
        fig = figures.cost_by_team_figure(frame).to_dict()
        (trace,) = fig["data"]
        assert len(trace["x"]) == 5
        assert trace["y"] == [2.0] * 5
        assert "per day" in fig["layout"]["title"]["text"]

    def test_other_currencies_are_named_not_mixed(self) -> None:
        frame = pd.concat(
            [LEDGER, _ledger([("2026-10-01T00:00", "search", "request", 5)], currency="EUR")]
        )
        fig = figures.cost_by_team_figure(frame).to_dict()
        assert (
            round(sum(sum(t["y"]) for t in fig["data"]) * 1e6) == LEDGER["effective_micros"].sum()
        )
        assert any("EUR" in text for text in _annotations(fig))


@pytest.mark.parametrize(
    "build",
    [
        lambda e: figures.cost_by_team_figure(e),
        lambda e: figures.idle_share_figure(e),
        lambda e: figures.unit_cost_figure(e, e, e),
        lambda e: figures.reconciliation_figure(e),
        lambda e: figures.acceptance_rate_figure(e, by="team"),
        lambda e: figures.acceptance_length_figure(e),
        lambda e: figures.breakeven_figure(e, e, e, e),
        lambda e: figures.tiers_figure(e, e, e),
    ],
)
def test_empty_data_says_no_data_yet(build: Any) -> None:
    fig = build(pd.DataFrame()).to_dict()
    assert fig["data"] == []
    assert figures.NO_DATA in _annotations(fig)


def test_idle_share_per_period() -> None:
    fig = figures.idle_share_figure(LEDGER).to_dict()
    (trace,) = fig["data"]
    hour0 = 3_959_999 / (1_080_000 + 500_000 + 2_160_001 + 3_959_999)
    assert trace["y"] == pytest.approx([hour0, 0.0])
    overall = 3_959_999 / LEDGER["effective_micros"].sum()
    assert f"{overall:.1%}" in fig["layout"]["title"]["text"]


def test_unit_costs_divide_team_cost_by_session_seconds_and_tokens() -> None:
    usage = pd.DataFrame(
        {
            "period_start": [_ts("2026-10-01T00:00")] * 2,
            "team": ["search", "ads"],
            "prompt_tokens": [1_000, 3_000],
            "completion_tokens": [1_000, 1_000],
        }
    )
    sessions = pd.DataFrame(
        {
            "period_start": [_ts("2026-10-01T00:00")] * 2,
            "team": ["search", "ads"],
            "session_seconds": [15.0, 40.0],
        }
    )
    fig = figures.unit_cost_figure(LEDGER, usage, sessions).to_dict()
    lines = {(t["name"], t["xaxis"]): t["y"] for t in fig["data"]}
    assert set(lines) == {("ads", "x"), ("ads", "x2"), ("search", "x"), ("search", "x2")}
    # search: (1.08 + 0.50) USD over 15 session-seconds and 2,000 tokens
    assert lines[("search", "x")][0] == pytest.approx(1.58 * 1000 / 15)
    assert lines[("search", "x2")][0] == pytest.approx(1.58 * 1e6 / 2000)
    # ads has cost at 01:00 but no usage then: no unit cost, not an infinity
    assert lines[("ads", "x")][0] == pytest.approx(2.160001 * 1000 / 40)
    assert lines[("ads", "x")][1] is None or math.isnan(lines[("ads", "x")][1])


RECONCILIATION = pd.DataFrame(
    [
        {
            "currency": "USD",
            "bill_micros": 9_690_000,
            "request_micros": 4_680_001,
            "shared_micros": 500_000,
            "idle_micros": 3_959_999,
            "unallocated_micros": 550_000,
            "balanced": True,
        }
    ]
)


def test_reconciliation_tile_adds_up_to_the_bill() -> None:
    fig = figures.reconciliation_figure(RECONCILIATION).to_dict()
    (waterfall,) = fig["data"]
    assert waterfall["type"] == "waterfall"
    assert list(waterfall["x"]) == ["requests", "shared", "idle", "unallocated", "bill"]
    assert list(waterfall["measure"]) == ["relative"] * 4 + ["total"]
    assert waterfall["text"][-1] == "9.69"
    assert waterfall["customdata"][-1] == ["9.690000"]
    assert round(sum(waterfall["y"][:-1]) * 1e6) == 9_690_000
    (note,) = [a for a in _annotations(fig) if "bill" in a]
    assert note == (
        "USD: bill 9.69 = allocated 5.18 + idle 3.96 + unallocated 0.55 (balanced to the micro)"
    )


def test_reconciliation_tile_of_a_team_shows_only_its_own_cost() -> None:
    frame = RECONCILIATION.astype(object)
    frame[["bill_micros", "idle_micros", "unallocated_micros", "balanced"]] = None
    fig = figures.reconciliation_figure(frame).to_dict()
    (waterfall,) = fig["data"]
    assert list(waterfall["x"]) == ["requests", "shared", "team total"]
    assert waterfall["text"][-1] == "5.18"
    assert not any("bill" in a or "idle" in a for a in _annotations(fig))


USAGE = pd.DataFrame(
    {
        "period_start": [_ts("2026-10-01T00:00"), _ts("2026-10-01T00:00"), _ts("2026-10-01T01:00")],
        "deployment": ["d1", "d2", "d2"],
        "team": ["search", "ads", "ads"],
        "num_drafts": [20, 20, 10],
        "draft_tokens": [80, 80, 40],
        "accepted_tokens": [60, 20, 0],
    }
)


def test_acceptance_rate_per_deployment_with_the_fifty_percent_line() -> None:
    fig = figures.acceptance_rate_figure(USAGE, by="deployment").to_dict()
    rates = {t["name"]: t["y"] for t in fig["data"]}
    assert rates == {"d1 (75%)": pytest.approx([0.75]), "d2 (17%)": pytest.approx([0.25, 0.0])}
    (line,) = [s for s in fig["layout"]["shapes"] if s["type"] == "line"]
    assert line["y0"] == line["y1"] == 0.5


def test_acceptance_rate_per_team_and_mean_acceptance_length() -> None:
    team = figures.acceptance_rate_figure(USAGE, by="team").to_dict()
    assert {t["name"] for t in team["data"]} == {"search (75%)", "ads (17%)"}
    length = figures.acceptance_length_figure(USAGE).to_dict()
    by_deployment = {t["name"]: t["y"] for t in length["data"]}
    assert by_deployment["d1"] == pytest.approx([(60 + 20) / 20])
    assert by_deployment["d2"] == pytest.approx([2.0, 1.0])


def _breakeven(at: float | None, ci: tuple[float, float]) -> dict[str, Any]:
    points = pd.DataFrame(
        {
            "config": "ngram-k4",
            "concurrency": [1, 2, 4, 8, 16],
            "measured_speedup": [1.7, 1.3, 0.8, 0.7, 0.66],
        }
    )
    curve = pd.DataFrame(
        {"config": "ngram-k4", "concurrency": [1.0, 4.0, 16.0], "speedup": [1.45, 0.99, 0.65]}
    )
    summary = pd.DataFrame(
        [{"config": "ngram-k4", "breakeven_concurrency": at, "ci_low": ci[0], "ci_high": ci[1]}]
    )
    schedule = pd.DataFrame(
        [[1, 1, 4], [2, 2, 3], [3, 5, 2], [6, 8, 1], [9, 256, 0]], columns=["start", "end", "k"]
    )
    fig: dict[str, Any] = figures.breakeven_figure(points, curve, summary, schedule).to_dict()
    return fig


def test_breakeven_shows_points_curve_marker_interval_and_schedule() -> None:
    fig = _breakeven(3.84, (2.68, 5.36))
    traces = {t["name"]: t for t in fig["data"]}
    assert traces["ngram-k4 measured"]["y"] == [1.7, 1.3, 0.8, 0.7, 0.66]
    assert traces["ngram-k4 fitted"]["mode"] == "lines"
    marker = traces["breakeven 3.84 [2.68, 5.36]"]
    assert marker["x"] == [3.84]
    assert marker["error_x"]["array"] == pytest.approx([5.36 - 3.84])
    assert marker["error_x"]["arrayminus"] == pytest.approx([3.84 - 2.68])
    rects = [s for s in fig["layout"]["shapes"] if s["type"] == "rect"]
    assert [s["name"] for s in rects] == [f"schedule k={k}" for k in (4, 3, 2, 1, 0)] + [
        "breakeven interval"
    ]
    assert (rects[-1]["x0"], rects[-1]["x1"]) == (2.68, 5.36)
    assert rects[-2]["x1"] == 20.0  # the k=0 band is clipped to the plotted range
    assert [a for a in _annotations(fig) if a.startswith("k=")] == [
        "k=4",
        "k=3",
        "k=2",
        "k=1",
        "k=0",
    ]
    assert fig["layout"]["xaxis"]["type"] == "log"


def test_breakeven_without_a_crossing_says_so() -> None:
    fig = _breakeven(None, (math.nan, math.nan))
    assert not any(t["name"].startswith("breakeven") for t in fig["data"])
    assert "ngram-k4: no breakeven within the measured range" in _annotations(fig)


def test_breakeven_interval_open_on_one_side_is_clipped_to_the_axis() -> None:
    fig = _breakeven(3.0, (0.0, math.inf))
    (interval,) = [s for s in fig["layout"]["shapes"] if s.get("name") == "breakeven interval"]
    assert (interval["x0"], interval["x1"]) == (0.8, 20.0)


def test_tiers_put_quoted_figures_beside_the_model_and_the_measurements() -> None:
    modelled = pd.DataFrame(
        {
            "tier": "prototype",
            "label": "list price, 1x g5.12xlarge",
            "concurrency": [5.0, 20.0],
            "usd_per_1k_session_seconds": [0.315, 0.079],
        }
    )
    quoted = pd.DataFrame(
        [
            {
                "tier": "prototype",
                "claim": "usd_per_1k_session_seconds",
                "sessions_low": 5,
                "sessions_high": 20,
                "quoted_low": 0.12,
                "verdict": "within",
            },
            {  # drawn in the page's table, not on this axis
                "tier": "prototype",
                "claim": "usd_per_month",
                "sessions_low": 5,
                "sessions_high": 20,
                "quoted_low": 1200.0,
                "verdict": "above",
            },
        ]
    )
    measured = pd.DataFrame(
        [
            {
                "tier": "prototype",
                "concurrency": 8,
                "usd_per_1k_session_seconds": 0.2,
                "session_seconds": 9000.0,
            }
        ]
    )
    fig = figures.tiers_figure(modelled, quoted, measured).to_dict()
    traces = {t["name"]: t for t in fig["data"]}
    assert set(traces) == {
        "prototype: list price, 1x g5.12xlarge",
        "prototype: quoted",
        "prototype: measured",
    }
    assert traces["prototype: quoted"]["x"] == [pytest.approx(10.0)]
    assert traces["prototype: quoted"]["y"] == [0.12]
    assert traces["prototype: quoted"]["text"] == ["quoted $0.12 (computed: within)"]
    assert traces["prototype: measured"]["y"] == [0.2]
    assert fig["layout"]["yaxis"]["type"] == "log"


def test_colours_are_stable_and_special_buckets_are_fixed() -> None:
    first = figures.colour_map(["b", "a", "(idle)"])
    assert first == figures.colour_map(["(idle)", "a", "b", "a"])
    assert first["(idle)"] == "#b0b0b0"
    assert first["a"] != first["b"]
