"""``specledger ingest usage`` starts on its own command tree (see :mod:`app.cli`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import _ingest_usage_only
from serving.proxy.sink import write_jsonl
from tests.serving.test_usage_sink import make_event

_HEAVY = ("scipy", "ibis", "sklearn", "statsmodels")


def test_ingest_usage_loads_without_importing_the_other_groups(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    with path.open("w", encoding="utf-8") as stream:
        write_jsonl(stream, [make_event(n) for n in range(3)])
    code = (
        "import atexit, sys\n"
        f"heavy = {_HEAVY!r}\n"
        "atexit.register(lambda: print('loaded:', sorted({m.split('.')[0] for m in "
        "sys.modules} & set(heavy))))\n"
        "from app.cli import main\n"
        "sys.argv[0] = 'specledger'\n"
        "main()\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "SPECLEDGER_DATABASE_URL": f"sqlite+pysqlite:///{tmp_path / 'ledger.db'}",
        "SPECLEDGER_DATA_DIR": str(tmp_path / "data"),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, "ingest", "usage", str(path), "--json"],
        env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary, _, loaded = done.stdout.rstrip("\n").rpartition("\n")
    assert json.loads(summary)["usage"]["inserted"] == 3
    assert loaded == "loaded: []"


@pytest.mark.parametrize(
    "args", [["ingest", "usage", "--help"], ["ingest", "usage"], ["ingest", "usage", "/nowhere"]]
)
def test_the_short_tree_answers_as_the_whole_one(args: list[str]) -> None:
    from app.cli import app

    runner = CliRunner()
    whole = runner.invoke(app, args, prog_name="specledger")
    short = runner.invoke(_ingest_usage_only(), args, prog_name="specledger")
    assert (short.exit_code, short.output) == (whole.exit_code, whole.output)
