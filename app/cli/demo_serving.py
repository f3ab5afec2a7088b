"""What the demo's stages share: a free port, a registered deployment, a metering proxy
(a child process of this CLI) in front of an engine, and a synthetic bill for a deployment."""

import hashlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.catalog import instance_prices
from app.deployments.service import add_deployment, add_replica
from app.domain.periods import Month
from app.models import Deployment
from ingest.service import IngestOptions, ingest_billing
from ingest.synth import SynthSpec, synth_rows, write_bill
from serving.engine.config import EngineConfig

INSTANCE = "g5.12xlarge"
"""The CPU box stands in for one g5.12xlarge (4 GPUs); the bill says SYNTHETIC."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def instance_gpus() -> int:
    return instance_prices()[INSTANCE].gpus


def register_deployment(engine: Engine, deployment: str) -> None:
    """The deployment with one replica ``r1`` of the instance's GPUs (kept across runs)."""
    with Session(engine) as session, session.begin():
        if session.scalar(select(Deployment).where(Deployment.name == deployment)):
            return
        add_deployment(session, name=deployment, tier="prototype")
        add_replica(session, deployment=deployment, name="r1", gpus=instance_gpus())


@contextmanager
def proxy(
    config: EngineConfig, data_dir: Path, *, deployment: str, spec: str, k: int | None
) -> Iterator[str]:
    """``specledger proxy`` in front of the engine, metering as replica r1 of
    ``deployment``; its URL while it runs (it flushes usage when it stops)."""
    port = free_port()
    replica = (
        f"{config.base_url},gpus={instance_gpus()},deployment={deployment},name=r1,"
        f"spec={spec},model={config.model_name}" + (f",k={k}" if k is not None else "")
    )
    log = (data_dir / f"{deployment}-proxy.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from app.cli import main; main()",
            "proxy",
            "--replica",
            replica,
            "--port",
            str(port),
            "--idle-window",
            "5",
            "--log-level",
            "warning",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the proxy did not start; see {log.name}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()  # the proxy flushes usage and idle time on shutdown
        process.wait(timeout=60)
        log.close()


def _sub_account(deployment: str) -> str:
    """A demo linked account of its own per deployment (12 digits, from the name)."""
    return f"{int(hashlib.sha256(deployment.encode()).hexdigest(), 16) % 10**12:012d}"


def bill(
    engine: Engine,
    data_dir: Path,
    deployment: str,
    started: datetime,
    finished: datetime,
    *,
    source: str | None = None,
) -> None:
    """A synthetic FOCUS bill of the instance for the hours ``deployment`` ran, ingested
    under its own source (default ``<deployment>-synthetic-bill``; a rerun replaces it)."""
    month = Month.of(started)
    first = started.replace(minute=0, second=0, microsecond=0)
    last = min(finished.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1), month.end)
    table = synth_rows(
        SynthSpec(
            instance_prices()[INSTANCE],
            first,
            last,
            month.start,
            month.end,
            {"specledger-deployment": deployment},
            sub_account_id=_sub_account(deployment),
        )
    )
    path = data_dir / f"{deployment}-bill-{month}.csv"
    write_bill(table, path)
    source = source or f"{deployment}-synthetic-bill"
    ingest_billing(engine, str(path), IngestOptions(source=source, force=True))
