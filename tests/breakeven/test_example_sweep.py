"""The example sweep measured on this kind of machine (examples/sweep-cpu.csv): its fit agrees
with the measured crossing, and the JSON kept beside it is that fit."""

import json

import pytest

from app.breakeven.service import fit_sweep_file
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "sweep-cpu.csv"


def test_predicted_breakeven_agrees_with_the_measured_crossing_within_20_percent() -> None:
    outcome = fit_sweep_file(None, path=EXAMPLE, bootstrap_samples=0)
    body = outcome.body
    assert body["measured_crossing"] is not None
    assert body["breakeven_concurrency"] == pytest.approx(body["measured_crossing"], rel=0.2)


def test_the_kept_fit_is_the_fit_of_the_kept_sweep() -> None:
    kept = json.loads((ROOT / "examples" / "sweep-cpu-fit.json").read_text())
    outcome = fit_sweep_file(None, path=EXAMPLE, bootstrap_samples=200, seed=0)
    assert kept["breakeven_concurrency"] == pytest.approx(
        outcome.body["breakeven_concurrency"], rel=1e-6
    )
    assert kept["schedule"] == outcome.body["schedule"]
    assert [check["config"] for check in kept["schedule_checks"]] == [
        "cpu-smollm2",
        "routed-ngram-k4-up-to-29",
        "cpu-smollm2-min-k1",
    ]


def test_the_headline_follows_the_measured_levels_when_the_model_disagrees() -> None:
    """The model crosses at 27.1, but the measured speedup is still 1.00x at 32 and falls
    through 1 only between 32 and 64: the headline and its interval come from the levels,
    and the report says the two disagree and which it reports."""
    body = fit_sweep_file(None, path=EXAMPLE, bootstrap_samples=0).body
    assert body["breakeven_source"] == "measured"
    assert 32 <= body["breakeven_concurrency"] <= 64
    assert body["breakeven_ci"] == [32.0, 64.0]  # the local line cannot bound it: the levels
    assert body["model_breakeven_concurrency"] == pytest.approx(27.12, abs=0.01)
    assert "crosses at 27.12" in body["disagreement"]
    assert "reporting the measured crossing" in body["disagreement"]
    assert all(32 < level < 64 for level in body["next_levels"])
