"""A local copy of an AWS Data Export (``aws s3 sync``) is read like the bucket: the newest
manifest of each billing period decides which files are current, so an older refresh left in
the folder is never loaded on top of the newer one."""

import gzip
import json
import os
from pathlib import Path

from sqlalchemy import Engine, select
from typer.testing import CliRunner

from app.cli import app
from app.models import BillingRow
from tests.ingest.helpers import focus_csv_text, focus_row

runner = CliRunner()
EXPORT = "focus-export"


def _deliver(
    root: Path,
    period: str,
    execution: str,
    rows: list[dict[str, str]],
    age: int,
    export: str = EXPORT,
) -> Path:
    data = root / export / "data" / period / execution / f"{export}-00001.csv.gz"
    data.parent.mkdir(parents=True)
    data.write_bytes(gzip.compress(focus_csv_text(rows).encode()))
    manifest = root / export / "metadata" / period / execution / f"{export}-Manifest.json"
    manifest.parent.mkdir(parents=True)
    key = f"exports/{export}/data/{period}/{execution}/{export}-00001.csv.gz"
    manifest.write_text(json.dumps({"dataFiles": [f"s3://acme-billing/{key}"]}))
    stamp = 1_790_000_000 - age
    os.utime(manifest, (stamp, stamp))
    return manifest


def _descriptions(engine: Engine) -> list[str | None]:
    with engine.connect() as conn:
        return list(
            conn.scalars(
                select(BillingRow.charge_description).order_by(BillingRow.charge_period_start)
            )
        )


def test_the_newest_manifest_decides_which_local_files_are_loaded(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    root = tmp_path / "synced"
    first = [focus_row(hour=h, ChargeDescription="first") for h in range(3)]
    _deliver(root, "BILLING_PERIOD=2026-10", "exec-1", first, age=7200)
    restated = [focus_row(hour=h, cost="2.00", ChargeDescription="restated") for h in range(2)]
    newest = _deliver(root, "BILLING_PERIOD=2026-10", "exec-2", restated, age=60)
    stray = root / EXPORT / "data" / "BILLING_PERIOD=2026-10" / "stray.csv"
    stray.write_text(focus_csv_text([focus_row(ChargeDescription="stray")]))

    result = runner.invoke(app, ["ingest", "billing", str(root), "--json"])

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert _descriptions(engine) == ["restated", "restated"]
    assert report["totals"]["USD"]["BilledCost"] == "4.000000"
    (warning,) = [w for w in report["warnings"] if "no newest AWS Data Exports manifest" in w]
    assert "2 billing file(s)" in warning
    listed = json.loads(runner.invoke(app, ["billing", "deliveries", "list", "--json"]).stdout)
    assert [d["manifest"] for d in listed] == [str(newest)]
    assert [d["source"] for d in listed] == [f"file:{(root / EXPORT).resolve()}"]


def test_a_manifest_listing_a_missing_file_writes_nothing(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    root = tmp_path / "synced"
    manifest = _deliver(root, "BILLING_PERIOD=2026-10", "exec-1", [focus_row()], age=60)
    manifest.write_text(json.dumps({"dataFiles": ["s3://b/x/focus-export/data/gone.csv"]}))

    result = runner.invoke(app, ["ingest", "billing", str(root)])

    assert result.exit_code == 2
    assert "listed file s3://b/x/focus-export/data/gone.csv is not in the folder" in " ".join(
        result.stderr.split()
    )
    assert _descriptions(engine) == []


def test_two_exports_of_the_same_charges_in_one_folder_are_refused(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    root = tmp_path / "synced"
    rows = [focus_row(hour=h) for h in range(2)]
    _deliver(root, "BILLING_PERIOD=2026-10", "exec-1", rows, age=60)
    _deliver(root, "BILLING_PERIOD=2026-10", "exec-1", rows, age=60, export="focus-copy")

    result = runner.invoke(app, ["ingest", "billing", str(root)])

    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "2 of its 2 charges for billing period 2026-10 are already loaded" in message
    assert "both are in this input" in message
    assert _descriptions(engine) == []
