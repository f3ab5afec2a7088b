"""Acceptance per draft position per deployment, on SQLite and PostgreSQL: the window's
histograms summed per deployment (streamed in batches), team and deployment filters, costs
from a stored fit or the floor, the waste finding, the Parquet store (round trip, and a
month kept there read as the database reads it), the CLI and the API."""

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from fastapi import Depends
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.allocation.service import run_allocation
from app.auth.deps import get_principal
from app.auth.service import create_key
from app.breakeven import repository
from app.cli import speculation as speculation_cli
from app.deployments.service import add_deployment, add_replica
from app.domain.findings import FindingKind, Thresholds
from app.domain.usage import UsageEvent
from app.domain.windows import TimeWindow
from app.main import create_app
from app.settings import Settings
from app.speculation import positions as positions_module
from app.speculation.positions import positions_report
from app.speculation.router import router as speculation_router
from app.speculation.rules.positions import CostBasis, PositionCounts
from app.speculation.schemas import positions_read
from app.storage.dataset_store import DatasetStore
from app.storage.usage_store import USAGE_PREFIX, events_table, usage_dataset, write_usage
from app.waste.service import find_waste
from tests.allocation.scenarios import TAG
from tests.allocation.test_ledger_close import _ingest
from tests.allocation.test_ledger_store import OCTOBER, _copy_usage, _window
from tests.factories import at, insert_usage, usage_record
from tests.ingest.helpers import focus_row

WEEK = TimeWindow(at(0), at(0, day=8))
D1_HIST = [2, 3, 5, 6, 4]
"""20 steps of k=4; at least 1, 2, 3, 4 accepted: 18, 15, 10, 4 (90%, 75%, 50%, 20%)."""


def _hist_record(histogram: list[int], **overrides: Any) -> dict[str, Any]:
    steps = sum(histogram)
    k = len(histogram) - 1
    return usage_record(
        accepted_hist=histogram,
        num_drafts=steps,
        draft_tokens=steps * k,
        accepted_tokens=sum(j * n for j, n in enumerate(histogram)),
        spec_k=k,
        **overrides,
    )


def _week(session: Session) -> None:
    rows = [
        _hist_record(
            D1_HIST, deployment="d1", team="search", arrived=at(i % 24, day=2), concurrency=3
        )
        for i in range(30)
    ]
    # d2, team ads: ten k=2 requests accepting both, ten k=4 requests accepting nothing
    rows += [
        _hist_record([0, 0, 10], deployment="d2", team="ads", arrived=at(5, day=3))
        for _ in range(10)
    ]
    rows += [
        _hist_record([10, 0, 0, 0, 0], deployment="d2", team="ads", arrived=at(6, day=3))
        for _ in range(10)
    ]
    rows += [
        # an older server (no histogram), a plain request, one outside the window
        usage_record(deployment="d1", arrived=at(1, day=2), accepted_hist=None),
        usage_record(deployment="d1", arrived=at(1, day=2), spec_method="none", num_drafts=0,
                     draft_tokens=0, accepted_tokens=0, spec_k=None, accepted_hist=None),
        _hist_record([100, 0, 0, 0, 0], deployment="d1", team="search", arrived=at(1, day=9)),
    ]  # fmt: skip
    insert_usage(session.connection(), rows)


def test_histograms_are_summed_per_deployment(session: Session) -> None:
    _week(session)
    report = positions_report(session, window=WEEK)
    d1, d2 = report.deployments
    assert (d1.deployment, d1.method, d1.requests) == ("d1", "ngram", 30)
    assert d1.counts == PositionCounts(steps=600, accepted=(540, 450, 300, 120), drafted=(600,) * 4)
    assert d1.mean_concurrency == 3.0
    assert not d1.short_drafts
    assert d1.advice is not None
    assert d1.fit is None
    assert d1.advice.basis is CostBasis.floor
    assert d1.advice.text() == "positions 1-3 pay; set num_speculative_tokens 3 (now 4)"
    # d2 mixes k=2 and k=4: positions 3 and 4 were drafted only by the k=4 requests
    assert d2.counts == PositionCounts(
        steps=200, accepted=(100, 100, 0, 0), drafted=(200, 200, 100, 100)
    )
    assert d2.advice is not None
    assert d2.advice.best_k == 2

    body = positions_read(report).model_dump(mode="json")
    first = body["deployments"][0]
    assert [p["rate"] for p in first["positions"]] == [0.9, 0.75, 0.5, 0.2]
    assert [p["pays"] for p in first["positions"]] == [True, True, True, False]
    assert (first["k"], first["suggested_k"], first["paying_positions"]) == (4, 3, [1, 2, 3])
    assert first["mean_acceptance_length"] == pytest.approx(1 + 1410 / 600, abs=1e-4)


def test_team_and_deployment_filters(session: Session) -> None:
    _week(session)
    assert [
        d.deployment for d in positions_report(session, window=WEEK, team="ads").deployments
    ] == ["d2"]
    only = positions_report(session, window=WEEK, deployment="d1").deployments
    assert [d.deployment for d in only] == ["d1"]
    assert positions_report(session, window=WEEK, team="nobody").deployments == []


def test_histograms_stream_in_batches(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    _week(session)
    whole = positions_report(session, window=WEEK)
    monkeypatch.setattr(positions_module, "_BATCH_ROWS", 7)
    assert positions_report(session, window=WEEK) == whole


def test_dynamic_k_is_flagged(session: Session) -> None:
    row = _hist_record([1, 2, 3, 4], arrived=at(3, day=2))
    row["draft_tokens"] -= 5  # some steps drafted fewer than 3
    insert_usage(session.connection(), [row])
    (found,) = positions_report(session, window=WEEK).deployments
    assert found.short_drafts


def _store_fit(session: Session, *, method: str = "ngram") -> int:
    fit = {
        "config": "ngram-k4",
        "schedule": [[1, 256, 4]],
        "configs": [{"config": "ngram-k4", "method": method, "k": 4}],
        "step_model": {"floor_s": 0.02, "per_token_s": 0.002, "per_sequence_s": 0.0},
        "parameters": [{"name": "ngram-k4.drafter_overhead_s", "value": 0.001}],
    }
    sweep = repository.add_sweep(
        session, name="cpu sweep", rows=[], settings={}, deployment="d1", fit=fit
    )
    return sweep.id


def test_a_stored_fit_prices_positions_at_the_deployments_concurrency(session: Session) -> None:
    _week(session)
    sweep_id = _store_fit(session)
    d1 = positions_report(session, window=WEEK).deployments[0]
    assert d1.fit is not None
    assert d1.fit.sweep_id == sweep_id
    assert d1.advice is not None
    assert d1.advice.basis is CostBasis.step_model
    # at concurrency 3 a verified token costs 0.006 s against a 0.026 s step: the fourth
    # position (20%) costs more tokens than it adds
    assert d1.advice.best_k == 3
    assert d1.advice.costs[3] > d1.advice.gains[3]
    read = positions_read(positions_report(session, window=WEEK)).deployments[0]
    assert (read.cost_basis, read.sweep_id) == (CostBasis.step_model, sweep_id)


def test_a_fit_of_another_method_is_not_used(session: Session) -> None:
    _week(session)
    _store_fit(session, method="draft_model")
    d1 = positions_report(session, window=WEEK).deployments[0]
    assert d1.fit is None
    assert d1.advice is not None
    assert d1.advice.basis is CostBasis.floor


def test_waste_flags_unpaid_positions_unless_low_acceptance_already_does(session: Session) -> None:
    _week(session)
    # d3: every request accepts 35% of its drafts (confidently low), positions 1-2 pay
    insert_usage(
        session.connection(),
        [_hist_record([4, 4, 12, 0, 0], deployment="d3", team="ops", arrived=at(7, day=4))
         for _ in range(10)],
    )  # fmt: skip

    def unpaid(team: str | None) -> list[Any]:
        report = find_waste(
            session, window=WEEK, team=team, thresholds=Thresholds(min_requests=5),
            now=WEEK.end, default_currency="USD",
        )  # fmt: skip
        low = {f.key for f in report.findings if f.kind is FindingKind.low_acceptance}
        assert ("d3" in low) == (team in (None, "ops"))
        return [f for f in report.findings if f.kind is FindingKind.unpaid_draft_positions]

    d1, d2 = unpaid(None)
    assert (d1.key, d2.key) == ("d1", "d2")  # d3's low-acceptance finding covers it
    assert d1.action == (
        "lower num_speculative_tokens from 4 to 3: position 4 costs more than it returns"
    )
    assert d1.metrics["rejected_unpaid_tokens"] == 600 - 120
    assert d2.metrics["suggested_k"] == 2
    assert d2.metrics["rejected_unpaid_tokens"] == 200  # positions 3-4 of the k=4 requests
    assert [f.key for f in unpaid("ads")] == ["d2"]
    assert unpaid("ops") == []


def _event(histogram: list[int] | None, event_id: str) -> UsageEvent:
    return UsageEvent(
        event_id=event_id, session_id="s", team="t", cost_center=None, tags={},
        deployment="d1", replica="r1", model="m", endpoint="completions", streamed=False,
        spec_method="ngram", spec_k=4, arrived_at=at(1), first_token_at=None,
        finished_at=at(1, 1), accepted_hist=None if histogram is None else tuple(histogram),
    )  # fmt: skip


def test_the_parquet_store_keeps_histograms_and_reads_old_files_as_null(tmp_path: Path) -> None:
    store = DatasetStore.at(str(tmp_path / "store"))
    write_usage(store, events_table([_event(D1_HIST, "e1"), _event(None, "e2")]))
    old = events_table([_event(None, "e0")]).drop_columns(["accepted_hist"])
    folder = tmp_path / "store" / USAGE_PREFIX / "month=2026-10" / "deployment=d1" / "hour=old"
    folder.mkdir(parents=True)
    pq.write_table(old.drop_columns(["deployment"]), folder / "old.parquet")
    table = usage_dataset(store).to_table(columns=["event_id", "accepted_hist"])
    assert table.schema.field("accepted_hist").type == pa.list_(pa.int64())
    assert dict(zip(*table.to_pydict().values(), strict=True)) == {
        "e0": None,
        "e1": D1_HIST,
        "e2": None,
    }


def test_a_month_kept_in_a_store_reads_as_the_database_does(
    session: Session, tmp_path: Path
) -> None:
    _ingest(
        session,
        tmp_path / "oct.csv",
        [focus_row(hour=h, cost="10.00") for h in range(2)],
        age_s=3600,
    )
    add_deployment(session, name="d1")
    add_replica(session, deployment="d1", name="r1", gpus=1)
    insert_usage(
        session.connection(),
        [_hist_record(D1_HIST, arrived=at(h % 2, 5 + h), gpu_ns=30 * 10**9, team="search")
         for h in range(12)],
    )  # fmt: skip
    month = TimeWindow(OCTOBER.start, OCTOBER.end)

    def both() -> tuple[Any, list[Any]]:
        report = positions_report(session, window=month)
        waste = find_waste(
            session, window=month, team=None, thresholds=Thresholds(min_requests=5),
            now=month.end, default_currency="USD",
        )  # fmt: skip
        return report.deployments, [
            f for f in waste.findings if f.kind is FindingKind.unpaid_draft_positions
        ]

    run_allocation(session, _window(), share_idle=False, tag_key=TAG)
    in_database = both()
    (finding,) = in_database[1]
    assert finding.window_cost_micros > 0
    parquet = DatasetStore.at(str(tmp_path / "store"))
    assert _copy_usage(session, parquet) == 12
    run_allocation(session, _window(), share_idle=False, tag_key=TAG, store=parquet)
    assert both() == in_database


def _app(db_url: str) -> Any:
    app = create_app(Settings(env="test", database_url=db_url))
    if not any(getattr(r, "path", "") == "/v1/speculation/positions" for r in app.routes):
        # until app.main mounts it
        app.include_router(speculation_router, prefix="/v1", dependencies=[Depends(get_principal)])
    return app


def test_api_scopes_team_keys_to_their_own_requests(engine: Engine, db_url: str) -> None:
    with Session(engine) as session, session.begin():
        _week(session)
        admin = create_key(session, team=None, admin=True).secret
        ads = create_key(session, team="ads", admin=False).secret
    with TestClient(_app(db_url)) as client:

        def get(secret: str, **query: str) -> Any:
            return client.get(
                "/v1/speculation/positions",
                params={"window": "2026-10", **query},
                headers={"Authorization": f"Bearer {secret}"},
            )

        everything = get(admin).json()
        assert [d["deployment"] for d in everything["deployments"]] == ["d1", "d2"]
        assert everything["deployments"][0]["advice"] == (
            "positions 1-3 pay; set num_speculative_tokens 3 (now 4)"
        )
        own = get(ads).json()
        assert own["team"] == "ads"
        assert [d["deployment"] for d in own["deployments"]] == ["d2"]
        assert get(ads, team="search").status_code == 403
        assert [d["deployment"] for d in get(admin, deployment="d1").json()["deployments"]] == [
            "d1"
        ]
        assert get(admin, window="nonsense").status_code == 422


def test_cli_prints_the_advice(engine: Engine, cli_env: str) -> None:
    with Session(engine) as session, session.begin():
        _week(session)
    app = typer.Typer()
    speculation_cli.register(app)
    runner = CliRunner()
    window = "2026-10-01T00:00:00Z,2026-10-08T00:00:00Z"
    text = runner.invoke(app, ["speculation", "positions", "--window", window])
    assert text.exit_code == 0, text.output
    assert "positions 1-3 pay; set num_speculative_tokens 3 (now 4)" in text.output
    assert "some steps drafted fewer than k" not in text.output
    as_json = runner.invoke(
        app, ["speculation", "positions", "--window", window, "--deployment", "d2", "--json"]
    )
    assert as_json.exit_code == 0, as_json.output
    (d2,) = json.loads(as_json.output)["deployments"]
    assert [p["drafted"] for p in d2["positions"]] == [200, 200, 100, 100]
    bad = runner.invoke(app, ["speculation", "positions", "--window", "whenever"])
    assert bad.exit_code == 2
    empty = runner.invoke(app, ["speculation", "positions", "--window", "2026-11"])
    assert "no speculative requests" in empty.output


def test_window_edges_are_half_open(session: Session) -> None:
    insert_usage(
        session.connection(),
        [_hist_record(D1_HIST, arrived=WEEK.end - timedelta(microseconds=1)),
         _hist_record(D1_HIST, arrived=WEEK.end)],
    )  # fmt: skip
    (found,) = positions_report(session, window=WEEK).deployments
    assert found.requests == 1
