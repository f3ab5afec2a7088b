"""``specledger proxy --workers N`` and proxies on two "hosts" sharing one meter service, as
real processes in front of a fake vLLM on a real port, writing to SQLite and PostgreSQL:
every request metered once, with exact tokens, and each replica's GPU time conserved
(Σ request GPU-ns + idle == GPUs x wall)."""

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.common import serve
from tests.serving.fake_vllm import FakeVllm
from tests.serving.fake_vllm_server import FakeVllmServer
from tests.serving.proxy_helpers import (
    assert_gpu_time_conserved,
    bearer,
    free_port,
    proxy_key,
    usage_rows,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def replica_url() -> Iterator[str]:
    with serve(FakeVllmServer(FakeVllm())) as url:
        yield url


def start_proxy(
    db_url: str, data_dir: Path, replica_url: str, port: int, *args: str
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SPECLEDGER_DATABASE_URL": db_url, "SPECLEDGER_DATA_DIR": str(data_dir),
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    command = [sys.executable, "-c", "from app.cli import main; main()", "proxy", "--replica",
               f"{replica_url},name=a,deployment=smol,gpus=2,spec=ngram,k=4", "--port", str(port),
               "--log-level", "warning", *args]  # fmt: skip
    process = subprocess.Popen(command, env=env, cwd=ROOT)
    deadline = time.monotonic() + 120
    while True:
        assert process.poll() is None, "the proxy exited at start"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 401:
                return process
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the proxy did not start"
        time.sleep(0.2)


def stop_proxy(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM: a graceful stop (uvicorn re-raises the signal once it has shut down)."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(120) in (0, -signal.SIGTERM)


def calls(keys: dict[str, str], count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """Streamed chats of two teams, and some whole completions."""
    made = []
    for i in range(count):
        team = "ab"[i % 2]
        if i % 5 == 4:
            body = {"model": "fake-model", "prompt": "one two three", "max_tokens": 4 + i % 7}
            made.append((keys[team], "/v1/completions", body))
        else:
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "say it"}],
                    "max_tokens": 8 + i % 9, "stream": True}  # fmt: skip
            made.append((keys[team], "/v1/chat/completions", body))
    return made


async def _send(
    client: httpx.AsyncClient, base: str, key: str, path: str, body: dict[str, Any]
) -> str:
    if not body.get("stream"):
        response = await client.post(base + path, json=body, headers=bearer(key))
        assert response.status_code == 200, response.text
        return response.headers["x-event-id"]
    async with client.stream("POST", base + path, json=body, headers=bearer(key)) as response:
        assert response.status_code == 200
        raw = await response.aread()
    assert raw.endswith(b"data: [DONE]\n\n")
    return response.headers["x-event-id"]


def send_all(bases: list[str], made: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    async def main() -> list[str]:
        limits = httpx.Limits(max_connections=len(made), max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            return await asyncio.gather(*(
                _send(client, bases[i % len(bases)], *call) for i, call in enumerate(made)
            ))  # fmt: skip

    return asyncio.run(main())


def check_records(
    engine: Any, made: list[tuple[str, str, dict[str, Any]]], event_ids: list[str]
) -> None:
    rows = usage_rows(engine)
    assert sorted(row["event_id"] for row in rows) == sorted(event_ids)  # each once
    assert all(row["status"] == "ok" for row in rows)
    by_id = {row["event_id"]: row for row in rows}
    for (_, _, body), event_id in zip(made, event_ids, strict=True):
        assert by_id[event_id]["completion_tokens"] == body["max_tokens"]
        assert by_id[event_id]["gpu_ns"] > 0
    assert Counter(row["team"] for row in rows) == {"a": len(made) // 2, "b": len(made) // 2}
    assert_gpu_time_conserved(engine, replica="a", gpus=2)


def test_workers_on_one_port_meter_every_request_once_and_conserve_gpu_time(
    engine, db_url, tmp_path, replica_url
):
    keys = {"a": proxy_key(engine, "a"), "b": proxy_key(engine, "b")}
    port, metrics_port = free_port(), free_port()
    proxy = start_proxy(db_url, tmp_path, replica_url, port, "--workers", "3",
                        "--meter-metrics-port", str(metrics_port))  # fmt: skip
    try:
        made = calls(keys, 60)
        event_ids = send_all([f"http://127.0.0.1:{port}"], made)
        more = calls(keys, 20)
        event_ids += send_all([f"http://127.0.0.1:{port}"], more)
        time.sleep(1.5)  # a tick: the meter settles what it holds
        page = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    finally:
        stop_proxy(proxy)
    check_records(engine, made + more, event_ids)
    finished = [
        line for line in page.splitlines() if line.startswith("specledger_proxy_requests_total{")
    ]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in finished) == len(event_ids)


def test_two_proxy_hosts_share_one_meter_and_conserve_gpu_time(  # B: 2 workers, no meters
    engine, db_url, tmp_path, replica_url, monkeypatch
):
    monkeypatch.setenv("SPECLEDGER_METER_TOKEN", "shared-" + uuid.uuid4().hex)
    keys = {"a": proxy_key(engine, "a"), "b": proxy_key(engine, "b")}
    port_a, port_b, meter_port = free_port(), free_port(), free_port()
    meter = f"tcp://127.0.0.1:{meter_port}"
    host_a = start_proxy(db_url, tmp_path / "a", replica_url, port_a, "--meter-listen", meter)
    try:
        host_b = start_proxy(
            db_url, tmp_path / "b", replica_url, port_b, "--meter-url", meter, "--workers", "2"
        )
        try:
            made = calls(keys, 40)
            event_ids = send_all([f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"], made)
        finally:
            stop_proxy(host_b)
    finally:
        stop_proxy(host_a)
    check_records(engine, made, event_ids)
