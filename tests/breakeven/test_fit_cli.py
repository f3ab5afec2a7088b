"""`specledger breakeven fit`: known parameters recovered, no crossing, degenerate input."""

import json
import math
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from app.breakeven.rules.model import SpeculationModel
from app.cli import app
from app.models import Sweep, SweepPointRecord
from tests.breakeven.helpers import HEADER, sweep_rows, true_breakeven, write_rows

runner = CliRunner()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_known_breakeven_within_5_percent(
    cli_env: str, engine: Engine, tmp_path: Path, seed: int
) -> None:
    path = write_rows(tmp_path / "sweep.csv", sweep_rows(noise=0.02, repeats=3, seed=seed))
    result = runner.invoke(app, ["breakeven", "fit", str(path), "--json", "--bootstrap", "60"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    expected = true_breakeven()
    assert body["breakeven_concurrency"] == pytest.approx(expected, rel=0.05)
    low, high = body["breakeven_ci"]
    assert low < body["breakeven_concurrency"] < high
    assert body["schedule"][0][0] == 1
    assert body["schedule"][-1][1] == 256
    assert {band[2] for band in body["schedule"]} <= set(range(5))
    assert body["measured_crossing"] == pytest.approx(expected, rel=0.25)
    with engine.connect() as conn:
        stored = conn.execute(select(Sweep.id, Sweep.fit)).one()
        points = conn.execute(select(func.count()).select_from(SweepPointRecord)).scalar()
    assert stored.id == body["sweep_id"]
    assert stored.fit["breakeven_concurrency"] == body["breakeven_concurrency"]
    assert points == 2 * 6 * 3


def test_fitting_the_same_file_again_updates_its_sweep(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
    path = write_rows(tmp_path / "sweep.csv", sweep_rows(noise=0.02, seed=3))
    first = runner.invoke(app, ["breakeven", "fit", str(path), "--json", "--bootstrap", "0"])
    second = runner.invoke(app, ["breakeven", "fit", str(path), "--json", "--bootstrap", "20"])
    assert first.exit_code == second.exit_code == 0, second.output
    assert json.loads(first.stdout)["sweep_id"] == json.loads(second.stdout)["sweep_id"]
    assert json.loads(first.stdout)["breakeven_ci"] is None
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Sweep)).scalar() == 1


def test_text_report_has_every_part(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "sweep.csv", sweep_rows(noise=0.02, repeats=2, seed=1))
    result = runner.invoke(app, ["breakeven", "fit", str(path), "--no-store", "--bootstrap", "40"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    for part in (
        "floor_s",
        "per_token_s",
        "ngram-k4.drafter_overhead_s",
        " ± ",
        "concurrency  measured  predicted",
        "Breakeven: ",
        "95% CI",
        "measured crossing (interpolated)",
        "Inflection (log-concurrency axis)",
        "Schedule (vLLM num_speculative_tokens_per_batch_size): [[1, ",
    ):
        assert part in text, part


@pytest.mark.parametrize(
    ("spec", "side"),
    [
        (SpeculationModel(k=4, mean_acceptance_length=4.6, drafter_overhead_s=0.0), "above"),
        (SpeculationModel(k=4, mean_acceptance_length=1.05, drafter_overhead_s=0.01), "below"),
    ],
)
def test_no_crossing_in_range_is_an_answer(
    tmp_path: Path, spec: SpeculationModel, side: str
) -> None:
    from tests.breakeven.helpers import CPU_STEP

    rows = sweep_rows(CPU_STEP, spec, levels=(1, 2, 4, 8, 16), noise=0.01, seed=0)
    path = write_rows(tmp_path / "flat.csv", rows)
    as_json = runner.invoke(
        app, ["breakeven", "fit", str(path), "--json", "--no-store", "--bootstrap", "20"]
    )
    assert as_json.exit_code == 0, as_json.output
    body = json.loads(as_json.stdout)
    assert body["breakeven_concurrency"] is None
    assert body["breakeven_ci"] is None
    low_edge, high_edge = body["speedup_at_edges"]
    assert (low_edge > 1 and high_edge > 1) if side == "above" else (low_edge < 1 and high_edge < 1)
    text = runner.invoke(app, ["breakeven", "fit", str(path), "--no-store", "--bootstrap", "0"])
    assert text.exit_code == 0
    assert f"no crossing in the measured range 1-16: the modelled speedup stays {side} 1" in (
        text.stdout
    )


def _rows() -> list[dict[str, object]]:
    return sweep_rows(levels=(1, 2, 4, 8), seed=0)


def _set(row: int, column: str, value: object):
    def change(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        rows[row - 1][column] = value
        return rows

    return change


# (rows -> rows, header or None, expected parts of the message)
DEGENERATE = {
    "nan throughput": (
        _set(3, "output_tokens_per_s", "nan"),
        None,
        ["row 3", "column output_tokens_per_s", "NaN"],
    ),
    "missing throughput": (
        _set(2, "output_tokens_per_s", ""),
        None,
        ["row 2", "column output_tokens_per_s", "missing"],
    ),
    "zero throughput": (
        _set(4, "output_tokens_per_s", 0),
        None,
        ["row 4", "column output_tokens_per_s", "zero"],
    ),
    "negative throughput": (
        _set(5, "output_tokens_per_s", -12.5),
        None,
        ["row 5", "column output_tokens_per_s", "negative"],
    ),
    "text throughput": (
        _set(1, "output_tokens_per_s", "fast"),
        None,
        ["row 1", "column output_tokens_per_s", "expected a number", "'fast'"],
    ),
    "negative tpot": (
        _set(6, "tpot_p50_s", -0.1),
        None,
        ["row 6", "column tpot_p50_s", "negative"],
    ),
    "nan tpot": (_set(1, "tpot_p50_s", "NaN"), None, ["row 1", "column tpot_p50_s", "NaN"]),
    "zero concurrency": (_set(3, "concurrency", 0), None, ["row 3", "column concurrency"]),
    "fractional k": (_set(2, "k", 2.5), None, ["row 2", "column k", "whole number"]),
    "speculating with k 0": (_set(2, "k", 0), None, ["row 2", "column k", "k must be >= 1"]),
    "missing config": (_set(4, "config", ""), None, ["row 4", "column config", "missing"]),
    "no acceptance": (
        lambda rows: [
            {**r, "acceptance_rate": "", "mean_acceptance_length": ""}
            if r["method"] == "ngram" and r["concurrency"] == 4
            else r
            for r in rows
        ],
        None,
        ["row 6", "column mean_acceptance_length", "both are missing"],
    ),
    "acceptance above 1": (
        _set(2, "acceptance_rate", 1.4),
        None,
        ["row 2", "column acceptance_rate", "[0, 1]"],
    ),
    "acceptance length above k+1": (
        _set(4, "mean_acceptance_length", 7),
        None,
        ["row 4", "column mean_acceptance_length", "[1, 5]"],
    ),
    "missing baseline": (
        lambda rows: [r for r in rows if r["method"] != "none"],
        None,
        ["column method", "missing baseline"],
    ),
    "two levels": (
        lambda rows: [r for r in rows if r["concurrency"] in (1, 2)],
        None,
        ["column concurrency", "config 'none' (rows 1, 3)", "at least 3"],
    ),
    "missing column": (
        lambda rows: rows,
        [c for c in HEADER if c != "tpot_p50_s"],
        ["missing required column(s): tpot_p50_s"],
    ),
    "no rows": (lambda rows: [], None, ["no sweep rows"]),
}


@pytest.mark.parametrize("case", list(DEGENERATE), ids=list(DEGENERATE))
def test_degenerate_input_exits_2_naming_file_row_and_column(tmp_path: Path, case: str) -> None:
    change, header, parts = DEGENERATE[case]
    path = write_rows(tmp_path / "bad.csv", change(_rows()), header)
    result = runner.invoke(app, ["breakeven", "fit", str(path), "--no-store", "--bootstrap", "0"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    message = " ".join(result.stderr.split())
    assert str(path) in message or "bad.csv" in message
    for part in parts:
        assert part in message, (part, message)


def test_missing_and_unreadable_files_exit_2(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["breakeven", "fit", str(tmp_path / "nope.csv"), "--no-store"])
    assert missing.exit_code == 2
    assert "nope.csv: no such file" in missing.stderr
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b'config,method\n\xff\xfe\x00\x01,"unterminated\n')
    result = runner.invoke(app, ["breakeven", "fit", str(binary), "--no-store"])
    assert result.exit_code == 2
    assert "binary.csv" in result.stderr


def test_degenerate_input_stores_nothing(cli_env: str, engine: Engine, tmp_path: Path) -> None:
    rows = _rows()
    rows[0]["output_tokens_per_s"] = math.nan
    result = runner.invoke(app, ["breakeven", "fit", str(write_rows(tmp_path / "bad.csv", rows))])
    assert result.exit_code == 2
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Sweep)).scalar() == 0


def test_fit_compares_scheduled_rows_with_both_fixed_choices(tmp_path: Path) -> None:
    rows = sweep_rows(noise=0.0)
    fixed = {
        (r["config"], r["concurrency"]): float(r["output_tokens_per_s"])  # type: ignore[arg-type]
        for r in rows
    }
    # A schedule that follows the better choice everywhere except a 10% loss at 32.
    for level in (1, 8, 32):
        best = max(fixed[("none", level)], fixed[("ngram-k4", level)])
        rows.append(
            {
                "config": "ngram-k4-dynamic",
                "method": "ngram",
                "k": 4,
                "concurrency": level,
                "output_tokens_per_s": best * (0.9 if level == 32 else 1.0),
                "tpot_p50_s": 0.05,
                # At 32 the schedule says k=0: nothing drafted, no acceptance.
                "mean_acceptance_length": "" if level == 32 else 2.6,
                "schedule": "[[1, 8, 4], [9, 256, 0]]",
            }
        )
    path = write_rows(tmp_path / "sweep.csv", rows, header=[*HEADER, "schedule"])

    as_json = runner.invoke(
        app, ["breakeven", "fit", str(path), "--json", "--bootstrap", "0", "--no-store"]
    )
    text = runner.invoke(app, ["breakeven", "fit", str(path), "--bootstrap", "0", "--no-store"])

    assert as_json.exit_code == text.exit_code == 0, as_json.output + text.output
    (check,) = json.loads(as_json.stdout)["schedule_checks"]
    assert check["config"] == "ngram-k4-dynamic"
    assert [level["concurrency"] for level in check["levels"]] == [1, 8, 32]
    assert [level["ratio_to_best"] for level in check["levels"]] == [1.0, 1.0, 0.9]
    assert check["meets_target"] is False
    assert "misses the target of 95% of the better fixed choice" in text.stdout
