"""Bad input: a non-zero exit, a message naming file, row and column, and nothing written."""

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from app.cli import app
from app.models import BillingDelivery, BillingRow
from tests.ingest.helpers import HEADER, focus_row, write_focus_csv

runner = CliRunner()


def _counts(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        return (
            conn.scalar(select(func.count()).select_from(BillingRow)) or 0,
            conn.scalar(select(func.count()).select_from(BillingDelivery)) or 0,
        )


@pytest.fixture
def loaded(engine: Engine, cli_env: str, tmp_path: Path) -> Path:
    """A good delivery is already stored under source 'acct', so 'writes nothing' is tested
    against a non-empty database."""
    good = write_focus_csv(tmp_path / "good.csv", [focus_row(hour=h) for h in range(3)])
    result = runner.invoke(app, ["ingest", "billing", str(good), "--source", "acct"])
    assert result.exit_code == 0, result.output
    return good


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str, str | None]]:
    """name -> (file, expected message part, expected 'row N, column C' part)."""
    header_missing = [c for c in HEADER if c != "EffectiveCost"]
    rows = [focus_row(hour=h) for h in range(4)]
    truncated = write_focus_csv(
        tmp_path / "truncated.csv.gz", [focus_row(hour=h % 20) for h in range(2000)]
    )
    truncated.write_bytes(truncated.read_bytes()[:-300])
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    return {
        "missing column": (
            write_focus_csv(tmp_path / "missing.csv", rows, header_missing),
            "missing mandatory FOCUS 1.0 columns: EffectiveCost",
            None,
        ),
        "bad cost": (
            write_focus_csv(tmp_path / "cost.csv", [*rows[:2], focus_row(hour=3, cost="12,5 EUR")]),
            "not a decimal number",
            "row 3, column BilledCost",
        ),
        "bad timestamp": (
            write_focus_csv(
                tmp_path / "ts.csv", [*rows[:3], focus_row(hour=3, ChargePeriodStart="yesterday")]
            ),
            "not an ISO 8601 date/time",
            "row 4, column ChargePeriodStart",
        ),
        "tags not an object": (
            write_focus_csv(tmp_path / "tags.csv", [focus_row(Tags=json.dumps(["a", "b"]))]),
            "not a JSON object",
            "row 1, column Tags",
        ),
        "nested tags": (
            write_focus_csv(
                tmp_path / "nested.csv",
                [rows[0], focus_row(hour=1, Tags=json.dumps({"a": {"b": 1}}))],
            ),
            "not a flat JSON object",
            "row 2, column Tags",
        ),
        "truncated gzip": (truncated, "truncated or corrupt gzip", None),
        "empty file": (empty, "the file is empty", None),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing column",
        "bad cost",
        "bad timestamp",
        "tags not an object",
        "nested tags",
        "truncated gzip",
        "empty file",
    ],
)
def test_bad_input_is_rejected_and_writes_nothing(
    engine: Engine, loaded: Path, tmp_path: Path, case: str
) -> None:
    path, message, location = _bad_files(tmp_path)[case]
    before = _counts(engine)
    # The bad file sits beside a good one for a new period: the good one must not load either.
    folder = tmp_path / "in"
    folder.mkdir()
    write_focus_csv(folder / "a-good.csv", [focus_row("2026-09")])
    target = folder / f"b-{path.name}"
    path.rename(target)

    result = runner.invoke(app, ["ingest", "billing", str(folder), "--source", "acct"])

    assert result.exit_code == 2
    assert str(target) in result.stderr
    assert message in result.stderr
    if location:
        assert location in result.stderr
    assert "Traceback" not in result.output
    assert _counts(engine) == before


def test_lenient_skips_bad_rows_and_lists_them(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    rows = [focus_row(hour=h) for h in range(4)]
    rows[1]["BilledCost"] = "abc"
    rows[3]["ChargePeriodEnd"] = "2026-10-01T00:00:00Z"  # before its start
    path = write_focus_csv(tmp_path / "bad.csv", rows)

    result = runner.invoke(app, ["ingest", "billing", str(path), "--lenient", "--json"])

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["rows"] == 2
    assert [(r["row"], r["column"]) for r in report["rejects"]] == [
        (2, "BilledCost"),
        (4, "ChargePeriodEnd"),
    ]
    assert report["totals"]["USD"]["BilledCost"] == "3.000000"
    assert _counts(engine) == (2, 1)


@pytest.mark.parametrize("allow_missing", [False, True])
def test_a_misspelt_cost_column_is_never_read_as_zero(
    engine: Engine, loaded: Path, tmp_path: Path, allow_missing: bool
) -> None:
    rows = [focus_row(hour=h) for h in range(3)]
    for row in rows:
        row["BiledCost"] = row.pop("BilledCost")
    header = ["BiledCost" if c == "BilledCost" else c for c in HEADER if c != "ListCost"]
    path = write_focus_csv(tmp_path / "misspelt.csv", rows, header)
    before = _counts(engine)

    flags = ["--allow-missing-columns"] if allow_missing else []
    result = runner.invoke(app, ["ingest", "billing", str(path), "--source", "other", *flags])

    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "rename the file's column 'BiledCost' to BilledCost" in message
    assert "never read as null or 0" in message
    if allow_missing:
        assert "ListCost" not in message  # the flag does read that one as null
    else:
        assert "missing mandatory FOCUS 1.0 columns: BilledCost, ListCost" in message
        assert "use --allow-missing-columns to read the others as null" in message
    assert _counts(engine) == before
