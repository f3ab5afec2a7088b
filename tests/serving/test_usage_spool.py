"""The usage sink's durable spool: records wait on disk while the database is locked by
another process, are stored exactly once when it is back, and survive a SIGKILL of the
process that spooled them, `specledger proxy` itself included (the next proxy on the spool
replays them)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from sqlalchemy import func, select, text

from app import migrate
from app.db import make_engine
from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.models import UsageRecord
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from serving.proxy.sink import UsageSink
from serving.proxy.spool import Spool, SpoolInUse
from tests.factories import at, usage_record
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import bearer, free_port, proxy_key, serve

pytestmark = pytest.mark.xdist_group("usage-spool")


def _events(count: int, prefix: str = "e") -> list[UsageEvent]:
    return [
        UsageEvent(**{**usage_record(arrived=at(0, 1)), "event_id": f"{prefix}{n}"})
        for n in range(count)
    ]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite+pysqlite:///{tmp_path / 'usage.db'}"
    migrate.upgrade(url)
    return url


@pytest.fixture
def lock_database(tmp_path: Path) -> Iterator[Callable[[], Callable[[], None]]]:
    """Lock the SQLite file from another process (``BEGIN EXCLUSIVE``); the returned
    function releases it."""
    holders: list[subprocess.Popen[str]] = []

    def lock() -> Callable[[], None]:
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sqlite3, sys\n"
                f"c = sqlite3.connect({str(tmp_path / 'usage.db')!r}, isolation_level=None)\n"
                "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True)\n"
                "sys.stdin.readline(); c.execute('COMMIT')\n",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        holders.append(holder)
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"

        def release() -> None:
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.wait(30) == 0

        return release

    yield lock
    for holder in holders:
        holder.kill()


def _stored(url: str) -> tuple[int, int]:
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.scalar(select(func.count()).select_from(UsageRecord)) or 0
        distinct = conn.scalar(select(func.count(UsageRecord.event_id.distinct()))) or 0
    engine.dispose()
    return rows, distinct


def _id(record: UsageEvent | ReplicaIdleEvent) -> str:
    assert isinstance(record, UsageEvent)
    return record.event_id


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_spool_keeps_its_segments_for_the_next_proxy_and_is_one_proxy_s(
    tmp_path: Path,
) -> None:
    spool = Spool(tmp_path / "spool")
    spool.append(_events(2))
    spool.append(_events(1, prefix="f"))
    assert spool.depth == 3
    with pytest.raises(SpoolInUse, match="in use by another proxy"):
        Spool(tmp_path / "spool")
    spool.close()
    last = sorted((tmp_path / "spool").glob("*.jsonl"))[-1]
    with last.open("a") as stream:
        stream.write('{"record": "usage", "event_id": "cut')  # a kill mid-write
    again = Spool(tmp_path / "spool")
    first = again.oldest()
    assert first is not None
    assert (first.inherited, first.records) == (True, 2)
    assert [_id(e) for e in again.read(first)] == ["e0", "e1"]
    again.remove(first)
    second = again.oldest()
    assert second is not None
    assert [_id(e) for e in again.read(second)] == ["f0"]
    again.close()


def test_records_wait_in_the_spool_while_another_process_locks_the_database(
    sqlite_url: str, tmp_path: Path, lock_database: Callable[[], Callable[[], None]]
) -> None:
    release = lock_database()
    sink = UsageSink(
        engine=make_engine(sqlite_url),
        spool_dir=tmp_path / "spool",
        flush_interval_s=0.05,
        retry_max_s=0.2,
    )
    sink.start()
    events = _events(300)
    for event in events + events[:100]:  # a third sent twice, as retries would
        sink.submit(event)
    _wait_for(lambda: sink.backlog.depth == 400)
    assert sink.stats.inserted == 0
    assert sink.backlog.oldest_age_s() > 0
    assert len(list((tmp_path / "spool").glob("*.jsonl"))) >= 1
    release()
    assert sink.flush(timeout_s=60)
    sink.close()
    assert (sink.stats.inserted, sink.stats.duplicates) == (300, 100)
    assert _stored(sqlite_url) == (300, 300)
    assert list((tmp_path / "spool").glob("*.jsonl")) == []


_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from app.db import make_engine
    from serving.proxy.sink import UsageSink
    from tests.serving.test_usage_spool import _events

    url, spool = sys.argv[1], sys.argv[2]
    sink = UsageSink(engine=make_engine(url), spool_dir=Path(spool), flush_interval_s=0.05)
    sink.start()
    for event in _events(200):
        sink.submit(event)
    while sink.backlog.depth < 200:
        time.sleep(0.01)
    print("spooled", flush=True)
    sys.stdin.readline()
    for event in _events(50, prefix="late"):  # the kill follows at once
        sink.submit(event)
    print("submitted", flush=True)
    time.sleep(3600)
    """
)


def test_a_proxy_killed_with_sigkill_loses_only_what_it_had_not_spooled(
    sqlite_url: str, tmp_path: Path, lock_database: Callable[[], Callable[[], None]]
) -> None:
    release = lock_database()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, sqlite_url, str(tmp_path / "spool")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().strip() == "spooled"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "submitted"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        child.kill()
    release()
    sink = UsageSink(engine=make_engine(sqlite_url), spool_dir=tmp_path / "spool")
    sink.start()
    _wait_for(lambda: sink.backlog.oldest() is None)
    sink.close()
    rows, distinct = _stored(sqlite_url)
    engine = make_engine(sqlite_url)
    with engine.connect() as conn:
        early = conn.scalar(text("SELECT count(*) FROM usage_records WHERE event_id LIKE 'e%'"))
    engine.dispose()
    # Every record spooled before the kill is stored, once; of the 50 submitted just
    # before it, at most those not yet spooled (one flush interval) are lost.
    assert early == 200
    assert rows == distinct
    assert 200 <= rows <= 250
    assert sink.stats.replayed == rows


def test_requests_through_a_proxy_are_stored_once_after_the_database_was_locked(
    sqlite_url: str, tmp_path: Path, lock_database: Callable[[], Callable[[], None]]
) -> None:
    """The running proxy (in front of a fake vLLM) while another process locks the SQLite
    file: requests are answered, their records wait in the spool (its depth and age on
    /metrics), and all are stored once when the lock goes."""
    fake = FakeVllm()
    config = ProxyConfig(
        replicas=(ReplicaSpec(url="http://fake:8000", deployment="smol", name="a", gpus=1),),
        database_url=sqlite_url,
        spool_dir=tmp_path / "spool",
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        allow_anonymous=True,  # the database is locked before the proxy starts
    )
    release = lock_database()
    with (
        serve(create_proxy_app(config, transport=fake.transport())) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        for n in range(30):
            body = {"model": "fake-model", "prompt": f"p{n}", "max_tokens": 4}
            headers = {"X-Session-Id": f"s{n % 3}"}
            assert client.post("/v1/completions", json=body, headers=headers).status_code == 200
        _wait_for(lambda: _sink_state(client)["spooled"] >= 30)
        metrics = client.get("/metrics").text
        assert 'specledger_usage_sink_records{state="spooled"}' in metrics
        assert "specledger_usage_sink_oldest_backlog_age_seconds" in metrics
        release()
        _wait_for(lambda: _sink_state(client)["spooled"] == 0)
    rows, distinct = _stored(sqlite_url)
    assert rows == distinct == 30


def _sink_state(client: httpx.Client) -> dict[str, int]:
    sink: dict[str, int] = client.get("/healthz").json()["usage_sink"]
    return sink


def _fake_vllm_server(fake: FakeVllm) -> FastAPI:
    """The fake vLLM as a real HTTP server, for a proxy running in its own process."""
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def relay(path: str, request: Request) -> Response:
        upstream = await fake.handle(
            httpx.Request(
                request.method,
                str(request.url),
                headers=request.headers.raw,
                content=await request.body(),
            )
        )
        body = await upstream.aread()
        media = upstream.headers.get("content-type", "application/json")
        return Response(body, status_code=upstream.status_code, media_type=media)

    return app


def _start_proxy(
    url: str, replica: str, spool: Path, port: int, tmp_path: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SPECLEDGER_DATABASE_URL": url,
        "SPECLEDGER_DATA_DIR": str(tmp_path / "data"),
    }
    proxy = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("specledger")),  # the venv's console script
            "proxy",
            "--replica",
            f"{replica},name=a,deployment=smol",
            "--port",
            str(port),
            "--spool",
            str(spool),
            "--log-level",
            "warning",
        ],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proxy
        except httpx.TransportError:
            pass
        assert proxy.poll() is None, "the proxy exited"
        assert time.monotonic() < deadline, "the proxy did not start"
        time.sleep(0.2)


def test_a_proxy_killed_with_sigkill_leaves_its_spool_to_the_next_proxy(
    sqlite_url: str, tmp_path: Path, lock_database: Callable[[], Callable[[], None]]
) -> None:
    """`specledger proxy` in its own process, the database locked by a third: 40 requests
    answered and spooled, the proxy killed with SIGKILL, the lock released, a new proxy on
    the same spool stores all 40, once. The requests present a proxy key, checked from the
    proxy's memory while the database is locked."""
    spool, port = tmp_path / "spool", free_port()
    engine = make_engine(sqlite_url)
    key = proxy_key(engine, "search")
    engine.dispose()
    with serve(_fake_vllm_server(FakeVllm())) as replica:
        proxy = _start_proxy(sqlite_url, replica, spool, port, tmp_path)
        try:
            release = lock_database()
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, timeout=30) as client:
                for n in range(40):
                    body = {"model": "fake-model", "prompt": f"p{n}", "max_tokens": 4}
                    response = client.post("/v1/completions", json=body, headers=bearer(key))
                    assert response.status_code == 200
                _wait_for(lambda: _sink_state(client)["spooled"] >= 40)
            proxy.send_signal(signal.SIGKILL)
            proxy.wait(30)
        finally:
            proxy.kill()
        release()
        assert _stored(sqlite_url)[0] == 0
        again = _start_proxy(sqlite_url, replica, spool, port, tmp_path)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                _wait_for(lambda: _sink_state(client)["replayed"] >= 40)
        finally:
            again.terminate()
            again.wait(60)
    assert _stored(sqlite_url) == (40, 40)
    with make_engine(sqlite_url).connect() as conn:
        teams = conn.execute(select(UsageRecord.team).distinct()).scalars().all()
    assert teams == ["search"]
