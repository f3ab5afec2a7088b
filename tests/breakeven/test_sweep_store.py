"""Measured sweeps: CSV rows from levels, the file round trip, storage with or without a fit."""

import math
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.breakeven import repository, service
from app.breakeven.rules.model import baseline_tokens_per_s, speculative_tokens_per_s
from app.breakeven.sweep_file import SweepFileError, SweepRow, read_sweep_file, write_sweep_file
from app.breakeven.tier_catalog import TierCatalogError
from app.breakeven.tiers import TierError, TierQueryError
from app.cli.sweep import row_of
from app.domain.errors import Invalid, NotFound
from serving.engine.config import BatchSizeBand, EngineConfig, NgramSpeculation
from serving.load.loadgen import LevelStats
from serving.load.sweep import SweepTarget, target_for_engine
from tests.breakeven.helpers import CPU_STEP, NGRAM

NONE = SweepTarget(name="none", method="none", k=0)
NGRAM_K4 = SweepTarget(name="ngram-k4", method="ngram", k=4)


def _stats(level: int, rate: float, *, speculative: bool) -> LevelStats:
    return LevelStats(
        concurrency=level,
        requests=8,
        errors=0,
        window_s=10.0,
        output_tokens_per_s=rate,
        requests_per_s=rate / 100,
        ttft_s=(0.1, 0.2, 0.3),
        tpot_s=(level / rate, 0.05, 0.07),
        acceptance_rate=0.4 if speculative else math.nan,
        mean_acceptance_length=2.6 if speculative else math.nan,
        gpu_seconds_per_1k_tokens=1000 / rate,
    )


def _rows(levels: tuple[int, ...]) -> list[SweepRow]:
    rows = []
    for level in levels:
        plain = float(baseline_tokens_per_s(CPU_STEP, concurrency=level))
        fast = float(speculative_tokens_per_s(CPU_STEP, NGRAM, concurrency=level))
        rows.append(row_of(NONE, _stats(level, plain, speculative=False)))
        rows.append(row_of(NGRAM_K4, _stats(level, fast, speculative=True)))
    return rows


def test_rows_round_trip_through_the_csv(tmp_path: Path) -> None:
    rows = _rows((1, 2, 4, 8))
    dynamic = target_for_engine(
        EngineConfig(
            model="/m",
            speculation=NgramSpeculation(k=4),
            batch_size_schedule=(
                BatchSizeBand(start=1, end=4, k=4),
                BatchSizeBand(start=5, end=256, k=0),
            ),
        )
    )
    assert dynamic.name == "ngram-k4-dynamic"
    rows.append(row_of(dynamic, _stats(4, 100.0, speculative=True)))
    path = write_sweep_file(tmp_path / "sweep.csv", rows)
    read = read_sweep_file(path)
    assert [r.point for r in read.rows] == [r.point for r in rows[:-1]]
    assert read.rows[0].metrics["ttft_p90_s"] == 0.2
    assert read.rows[0].requests_per_s == pytest.approx(rows[0].requests_per_s)
    assert math.isnan(read.rows[0].point.acceptance_rate)
    assert [r.schedule for r in read.scheduled] == ["[[1, 4, 4], [5, 256, 0]]"]
    header = path.read_text().splitlines()[0].replace('"', "")
    assert header.startswith(
        "config,method,k,concurrency,output_tokens_per_s,tpot_p50_s,"
        "acceptance_rate,mean_acceptance_length"
    )


def test_measured_sweep_is_stored_and_fitted(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        sweep_id, outcome, problem = service.store_measured_sweep(
            session,
            name="cpu.csv",
            rows=_rows((1, 2, 4, 8, 16)),
            settings={"spec": "x"},
            bootstrap_samples=20,
        )
    assert problem is None
    assert outcome is not None
    assert outcome.fit.breakeven_concurrency is not None
    with Session(engine) as session:
        stored = repository.get_sweep(session, sweep_id)
        assert stored is not None
        assert stored.fit is not None
        assert stored.fit["sweep_id"] == sweep_id
        rows = repository.sweep_rows(session, sweep_id)
    assert len(rows) == 10
    assert rows[1].point.mean_acceptance_length == 2.6
    assert rows[1].metrics["tpot_p90_s"] == 0.05


def test_a_sweep_too_small_to_fit_is_stored_without_a_fit(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        sweep_id, outcome, problem = service.store_measured_sweep(
            session, name="tiny.csv", rows=_rows((1, 2)), settings={}
        )
    assert outcome is None
    assert problem is not None
    assert "needs at least 3 concurrency levels" in problem
    with Session(engine) as session:
        stored = repository.get_sweep(session, sweep_id)
        assert stored is not None
        assert stored.fit is None


def test_a_stored_fit_reads_back_typed(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        sweep_id, outcome, _ = service.store_measured_sweep(
            session, name="cpu.csv", rows=_rows((1, 2, 4, 8, 16)), settings={}
        )
    assert outcome is not None
    with Session(engine) as session:
        stored = repository.get_sweep(session, sweep_id)
        assert stored is not None
        fit = service.read_stored_fit(stored.fit, f"sweep {sweep_id}")
    assert fit.sweep_id == sweep_id
    assert fit.config == outcome.fit.primary_config
    assert fit.primary.k == 4
    assert fit.primary.alpha == pytest.approx(outcome.fit.primary.alpha)
    assert fit.bands == outcome.fit.schedule
    assert fit.breakeven_concurrency == pytest.approx(outcome.fit.breakeven_concurrency)
    assert fit.step_model is not None
    assert fit.step_model.model() == outcome.fit.step_model


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"config": "ngram"}, "schedule: Field required"),
        ({"config": "x", "schedule": [], "configs": []}, "config 'x' is not one of 'configs'"),
        ({"config": "x", "schedule": [[1, 2]], "configs": []}, "schedule.0"),
        ([], "Input should be a valid dictionary"),
    ],
)
def test_a_body_that_is_not_a_fit_is_named_once(body: object, problem: str) -> None:
    with pytest.raises(service.BreakevenError, match=r"fit\.json: not a breakeven fit") as caught:
        service.read_stored_fit(body, "fit.json")
    assert problem in str(caught.value)


def test_breakeven_errors_carry_their_status_and_code() -> None:
    for error in (SweepFileError, service.UnfittableSweep, service.BreakevenError):
        assert issubclass(error, Invalid)
        assert (error.status, error.code) == (422, "invalid_input")
    assert issubclass(TierCatalogError, Invalid)
    assert issubclass(TierError, Invalid)
    assert issubclass(service.SweepNotFound, NotFound)
    assert service.SweepNotFound.status == 404
    named = TierQueryError("no sweep 7")
    assert (named.status, named.code, named.fields) == (
        422,
        "invalid_parameter",
        (("query.sweep", "no sweep 7"),),
    )
