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
