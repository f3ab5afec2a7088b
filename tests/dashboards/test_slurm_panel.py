"""The cost page's Slurm panel: GPU-hours and cost by account and partition, on SQLite and
PostgreSQL, for an administrator and for a team, and absent where no Slurm job ran.

The dashboards' month (:mod:`tests.dashboards.seed`) gets a one-node Slurm cluster beside its
cloud deployments: the node's derived bill, sacct output of four GPU jobs of two teams on two
partitions, and the month allocated again over both.
"""

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import uvicorn
from fastapi.testclient import TestClient
from playwright.sync_api import BrowserContext, sync_playwright
from sqlalchemy import Engine, func, select

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.db import read_session, unit_of_work
from app.domain.periods import Month
from app.domain.windows import TimeWindow
from app.models import BillingRow
from app.slurm.cluster import register_cluster
from app.slurm.ingest import ingest_sacct_text
from app.slurm.report import slurm_usage
from app.slurm.rules.cluster_cost import cost_model_from_dict
from dashboards import data, figures
from dashboards.figures import money_2dp
from ingest.cluster_bill import write_derived_bill
from ingest.service import IngestOptions, ingest_billing
from tests.dashboards.conftest import Keys, dashboards_app
from tests.dashboards.seed import MONTH, seed_month
from tests.dashboards.test_browser import CHROMIUM, CHROMIUM_FLAGS, _load
from tests.prereq import require
from tests.slurm.test_ingest_sacct import HEADER, MODEL, line

OCTOBER = Month.parse(MONTH)
CLUSTER_SOURCE = "cluster-bill"
SACCT = [
    # (job, account, partition, start, end, elapsed s, GPUs)
    ("2", "search", "debug", "2026-10-01T00:00:00", "2026-10-01T01:00:00", 3600, 2),
    ("3", "search", "long", "2026-10-01T02:00:00", "2026-10-01T04:00:00", 7200, 1),
    ("4", "ads-platform", "debug", "2026-10-01T01:00:00", "2026-10-01T01:30:00", 1800, 1),
    ("5", "ads-platform", "long", "2026-10-01T05:00:00", "2026-10-01T06:00:00", 3600, 2),
]
GPU_SECONDS = {
    ("search", "debug"): 7200,
    ("search", "long"): 7200,
    ("ads-platform", "debug"): 1800,
    ("ads-platform", "long"): 7200,
}


@dataclass(frozen=True)
class SlurmMonth:
    cluster_bill_micros: int
    """The cluster's derived bill for the month: what its lines' cost adds up to."""


def seed_slurm_month(engine: Engine, folder: Path) -> SlurmMonth:
    """The dashboards' month, plus a Slurm cluster's bill and jobs, allocated together."""
    model = cost_model_from_dict(MODEL, source="cluster.toml")
    with unit_of_work(engine) as session:
        register_cluster(session, model)
    bill = folder / "derived.csv"
    write_derived_bill(model, OCTOBER.start, OCTOBER.end, bill)
    ingest_billing(engine, str(bill), IngestOptions(source=CLUSTER_SOURCE))
    with read_session(engine) as session:
        cluster_bill = session.scalar(select(func.sum(BillingRow.effective_cost_micros)))
    assert cluster_bill
    seed_month(engine, folder)  # its bill and usage, allocated once without the jobs
    text = "\n".join(
        [
            HEADER,
            *(
                line(
                    job,
                    account,
                    "COMPLETED",
                    start,
                    end,
                    elapsed,
                    f"billing=1,cpu=1,gres/gpu={gpus},node=1",
                    partition=partition,
                )
                for job, account, partition, start, end, elapsed, gpus in SACCT
            ),
        ]
    )
    with unit_of_work(engine) as session:
        ingest_sacct_text(
            session,
            text + "\n",
            source="sacct.txt",
            cluster="specledger",
            window=(OCTOBER.start, OCTOBER.end),
            now=OCTOBER.end,
        )
    with unit_of_work(engine) as session:
        run_allocation(
            session, Window.of_month(OCTOBER), share_idle=False, tag_key="specledger-deployment"
        )
    return SlurmMonth(cluster_bill_micros=int(cluster_bill))


@pytest.fixture
def slurm_month(engine: Engine, tmp_path: Path) -> SlurmMonth:
    return seed_slurm_month(engine, tmp_path)


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    with TestClient(dashboards_app(engine), raise_server_exceptions=False) as test_client:
        yield test_client


def _by_key(frame: pd.DataFrame) -> dict[tuple[str, str], dict[Any, Any]]:
    return {(str(r["account"]), str(r["partition"])): r for r in frame.to_dict("records")}


def _bars(fig: dict[str, Any], axis: str) -> list[dict[str, Any]]:
    return [t for t in fig["data"] if t.get("xaxis", "x") == axis]


def test_the_frame_is_the_slurm_report_and_adds_up_to_the_cluster_bill(
    slurm_month: SlurmMonth, engine: Engine
) -> None:
    frame = data.slurm_usage_frame(engine, month=MONTH)
    assert list(frame.columns) == data.SLURM_COLUMNS
    with read_session(engine) as session:
        report = slurm_usage(session, TimeWindow(OCTOBER.start, OCTOBER.end))
    assert [tuple(r.values()) for r in frame.to_dict("records")] == [
        (x.cluster, x.account, x.partition, x.jobs, x.gpu_seconds, x.cost_micros, x.currency)
        for x in report
    ]
    rows = _by_key(frame)
    for key, seconds in GPU_SECONDS.items():
        assert (rows[key]["jobs"], rows[key]["gpu_seconds"]) == (1, seconds)
        assert rows[key]["cost_micros"] > 0
    assert rows[("(idle)", "(idle)")]["gpu_seconds"] == 0
    assert int(frame["cost_micros"].sum()) == slurm_month.cluster_bill_micros
    assert set(frame["cluster"]) == {"specledger"}
    assert set(frame["currency"]) == {"USD"}
    assert figures.has_slurm_jobs(frame)


def test_the_figure_carries_the_frame_exactly(slurm_month: SlurmMonth, engine: Engine) -> None:
    frame = data.slurm_usage_frame(engine, month=MONTH)
    fig = figures.slurm_usage_figure(frame).to_dict()
    hours, cost = _bars(fig, "x"), _bars(fig, "x2")
    assert {t["name"] for t in hours} == {"debug", "long"}  # idle has no GPU-hours
    assert {t["name"] for t in cost} == {"debug", "long", "(idle)"}
    drawn = {
        (account, t["name"]): round(y * 3600)
        for t in hours
        for account, y in zip(t["x"], t["y"], strict=True)
    }
    assert drawn == GPU_SECONDS
    exact = sum(
        round(float(custom[1]) * 10**6) for t in cost for custom in t["customdata"]
    )  # the exact decimal amount in each bar's hover
    assert exact == slurm_month.cluster_bill_micros
    assert fig["layout"]["barmode"] == "relative"
    texts = [a["text"] for a in fig["layout"]["annotations"]]
    assert f"Cost (USD, total {money_2dp(slurm_month.cluster_bill_micros)})" in texts
    per_account = frame.groupby("account")["cost_micros"].sum()
    for account, micros in per_account.items():
        assert money_2dp(int(micros)) in texts, account
    assert "4.00 h" in texts  # search: 2 GPUs x 1 h + 1 GPU x 2 h
    assert "2.50 h" in texts  # ads-platform: 1 GPU x 0.5 h + 2 GPUs x 1 h
    # The accounts' axis: teams first, then the idle bucket.
    assert fig["layout"]["xaxis2"]["categoryarray"] == ["ads-platform", "search", "(idle)"]


def test_a_team_sees_only_its_own_account(slurm_month: SlurmMonth, engine: Engine) -> None:
    admin = _by_key(data.slurm_usage_frame(engine, month=MONTH))
    frame = data.slurm_usage_frame(engine, month=MONTH, team="search")
    assert set(frame["account"]) == {"search"}
    assert _by_key(frame) == {k: v for k, v in admin.items() if k[0] == "search"}
    fig = figures.slurm_usage_figure(frame).to_dict()
    accounts = {x for t in fig["data"] for x in t["x"]}
    assert accounts == {"search"}
    assert "ads-platform" not in str(fig)
    assert "(idle)" not in str(fig)
    # A team without Slurm jobs gets no frame, so no panel.
    assert data.slurm_usage_frame(engine, month=MONTH, team="research-lab").empty


def test_no_slurm_jobs_no_frame(engine: Engine, tmp_path: Path) -> None:
    seed_month(engine, tmp_path)
    frame = data.slurm_usage_frame(engine, month=MONTH)
    assert frame.empty
    assert list(frame.columns) == data.SLURM_COLUMNS
    assert not figures.has_slurm_jobs(frame)
    assert "No data yet" in str(figures.slurm_usage_figure(frame).to_dict())


def test_the_cost_page_shows_the_panel_only_with_slurm_jobs(
    client: TestClient, keys: Keys, engine: Engine, tmp_path: Path
) -> None:
    seed_month(engine, tmp_path)
    page = client.get("/dashboards/cost", headers={"X-API-Key": keys.admin})
    assert page.status_code == 200
    assert 'id="slurm-usage"' not in page.text
    assert "Slurm" not in page.text


def test_the_cost_page_panel_for_an_admin_and_for_teams(
    slurm_month: SlurmMonth, client: TestClient, keys: Keys
) -> None:
    admin = client.get("/dashboards/cost", headers={"X-API-Key": keys.admin}).text
    assert 'id="slurm-usage"' in admin
    assert money_2dp(slurm_month.cluster_bill_micros) in admin
    search = client.get("/dashboards/cost", headers={"X-API-Key": keys.search}).text
    assert 'id="slurm-usage"' in search
    assert "ads-platform" not in search
    chosen = client.get(
        "/dashboards/cost", params={"team": "research-lab"}, headers={"X-API-Key": keys.admin}
    ).text
    assert 'id="slurm-usage"' not in chosen  # research-lab runs no Slurm job


# ------------------------------------------------------------------------------- browser


@pytest.fixture
def server(engine: Engine, slurm_month: SlurmMonth) -> Iterator[str]:
    """The dashboards on 127.0.0.1 (as in test_browser), over the month with Slurm jobs."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(dashboards_app(engine), log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started:
        assert thread.is_alive(), "uvicorn stopped while starting"
        assert time.monotonic() < deadline, "uvicorn did not start within 20 s"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    uv.should_exit = True
    thread.join(timeout=20)
    sock.close()


@pytest.fixture
def browser() -> Iterator[BrowserContext]:
    require(CHROMIUM.exists(), f"needs Debian's chromium at {CHROMIUM}: scripts/ensure_chromium.sh")
    profile = tempfile.mkdtemp(prefix="specledger-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 900},
            )
            yield context
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.xdist_group("browser")  # one Chromium at a time on a small machine
def test_the_panel_renders_in_chromium_for_an_admin_and_a_team(
    server: str, browser: BrowserContext, keys: Keys, slurm_month: SlurmMonth
) -> None:
    page, plots, problems = _load(browser, f"{server}/dashboards/cost?key={keys.admin}")
    assert problems.items == []
    panel = {plot["id"]: plot for plot in plots}["slurm-usage"]
    assert panel["svg"] >= 1
    assert panel["traces"] >= 5  # debug and long in both panels, idle in the cost one
    for text in ("search", "ads-platform", "(idle)", "GPU-hours", "4.00 h", "2.50 h"):
        assert text in panel["text"], text
    assert money_2dp(slurm_month.cluster_bill_micros) in panel["text"]
    page.close()
    browser.clear_cookies()
    page, plots, problems = _load(browser, f"{server}/dashboards/cost?key={keys.search}")
    assert problems.items == []
    panel = {plot["id"]: plot for plot in plots}["slurm-usage"]
    assert panel["traces"] >= 2
    assert "search" in panel["text"]
    assert "4.00 h" in panel["text"]
    for other in ("ads-platform", "(idle)", "2.50 h"):
        assert other not in panel["text"], other
    assert "ads-platform" not in page.content()
    page.close()
