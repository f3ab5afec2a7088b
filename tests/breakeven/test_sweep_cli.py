"""`specledger breakeven sweep --proxy URL`: the whole command against the proxy and a fake
vLLM (no engine): CSV, database, vLLM's acceptance figures; and the engine-slot guard."""

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from app.breakeven.sweep_file import read_sweep_file
from app.cli import app
from app.models import Sweep, SweepPointRecord, UsageRecord
from serving.engine.config import EngineConfig
from serving.load import sweep as sweep_module
from serving.load.sweep import SweepError, SweepTarget, engine_for_method, sweep_target
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import proxy_key, serve

runner = CliRunner()


def _prompts(path: Path) -> Path:
    lines = [
        json.dumps(
            {
                "id": f"p{i}",
                "kind": "copy",
                "max_tokens": 12,
                "messages": [{"role": "user", "content": f"SLOW copy {i}"}],
            }
        )
        for i in range(3)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_sweep_drives_a_running_proxy_and_stores_the_sweep(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
    fake = FakeVllm(k=4, slow_chunk_s=0.01)
    key = proxy_key(engine, "load-test")
    config = ProxyConfig(
        replicas=(ReplicaSpec(url="http://fake:8000", spec_method="ngram", spec_k=4),),
        database_url=cli_env,
        jsonl_path=tmp_path / "usage.jsonl",
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
    )
    out = tmp_path / "sweep.csv"
    with serve(create_proxy_app(config, transport=fake.transport())) as url:
        result = runner.invoke(
            app,
            [
                "breakeven",
                "sweep",
                "--concurrency",
                "1,2,4",
                "--spec",
                "none,ngram",
                "--proxy",
                url,
                "--proxy",
                url,
                "--requests-per-level",
                "3",
                "--prompts",
                str(_prompts(tmp_path / "p.jsonl")),
                "--out",
                str(out),
                "--proxy-key",
                key,
            ],
        )
    assert result.exit_code == 0, result.output
    assert "stored as sweep" in result.stdout
    rows = read_sweep_file(out).rows
    assert [(r.point.config, r.point.concurrency) for r in rows] == [
        ("none", 1),
        ("none", 2),
        ("none", 4),
        ("ngram-k4", 1),
        ("ngram-k4", 2),
        ("ngram-k4", 4),
    ]
    for row in rows:
        assert row.metrics["requests"] == 3
        assert row.metrics["errors"] == 0
        assert row.point.output_tokens_per_s > 0
    ngram = rows[3].point
    assert ngram.acceptance_rate == pytest.approx(7 / 16)  # the fake's steps (1, 5, 1, 3, 2)
    assert ngram.mean_acceptance_length == pytest.approx(1 + 7 / 4)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Sweep)).scalar() == 1
        assert conn.execute(select(func.count()).select_from(SweepPointRecord)).scalar() == 6
    assert (tmp_path / "usage.jsonl").read_text().count("\n") >= 6 * 3  # metered by the proxy
    with engine.connect() as conn:  # and billed to the key's team
        teams = conn.execute(select(UsageRecord.team).distinct()).scalars().all()
    assert teams == ["load-test"]
    # Fitting the CSV the sweep wrote refits that sweep rather than storing a copy.
    refit = runner.invoke(app, ["breakeven", "fit", str(out), "--json", "--bootstrap", "0"])
    assert refit.exit_code == 0, refit.output
    with engine.connect() as conn:
        stored_id = conn.execute(select(Sweep.id)).scalar_one()
    assert json.loads(refit.stdout)["sweep_id"] == stored_id


def test_proxy_urls_must_match_the_configs(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "breakeven",
            "sweep",
            "--spec",
            "none,ngram",
            "--proxy",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "s.csv"),
            "--no-store",
        ],
    )
    assert result.exit_code == 2
    assert "--proxy was given 1 time(s) for 2 --spec config(s)" in result.stderr


def test_no_engine_starts_while_another_vllm_server_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sweep_module, "running_vllm_servers", lambda: [4242])
    target = SweepTarget(
        name="none",
        method="none",
        k=0,
        engine=EngineConfig(model="/m", python="/nonexistent/python"),
    )
    with pytest.raises(SweepError, match=r"another vLLM server is running \(pid 4242\)"):
        sweep_target(
            target,
            levels=[1],
            requests_per_level=1,
            prompts=[],
            work_dir=tmp_path,
            engines_dir=tmp_path,
            wait_s=0.0,
        )


def test_engine_for_method_checks_the_draft_model(tmp_path: Path) -> None:
    base = EngineConfig(model="/m")
    assert engine_for_method("ngram", base=base, k=3, draft_model=None).speculation.method == (
        "ngram"
    )
    with pytest.raises(SweepError, match="draft model"):
        engine_for_method("draft", base=base, k=3, draft_model=tmp_path / "missing")
    with pytest.raises(SweepError, match="unknown --spec 'eagle'"):
        engine_for_method("eagle", base=base, k=3, draft_model=None)
