"""Run the proxy app on a real port (uvicorn in a thread) and check what it recorded."""

import itertools
import socket
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.auth.service import ProxyKeyOptions, create_key
from app.models import ReplicaIdle, UsageRecord
from bench.common import serve

__all__ = [
    "assert_gpu_time_conserved",
    "bearer",
    "free_port",
    "proxy_key",
    "serve",
    "team_keys",
    "usage_rows",
]

ONE_US = timedelta(microseconds=1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def proxy_key(engine: Engine, team: str, **options: Any) -> str:
    """Create a proxy key for ``team`` (options as :class:`ProxyKeyOptions`); its secret."""
    with Session(engine) as session, session.begin():
        return create_key(session, team=team, admin=False, proxy=ProxyKeyOptions(**options)).secret


def team_keys(engine: Engine, *teams: str) -> dict[str, str]:
    """One proxy key per team: team -> secret."""
    return {team: proxy_key(engine, team) for team in teams}


def bearer(secret: str, **headers: str) -> dict[str, str]:
    """Request headers presenting a proxy key, plus ``headers`` (``X_Session_Id`` style names
    become ``X-Session-Id``)."""
    return {"Authorization": f"Bearer {secret}"} | {
        name.replace("_", "-"): value for name, value in headers.items()
    }


def usage_rows(engine: Engine) -> list[dict[str, Any]]:
    """Every usage record, oldest first, as dicts."""
    with engine.connect() as conn:
        query = select(UsageRecord.__table__).order_by(UsageRecord.arrived_at)
        return [dict(row) for row in conn.execute(query).mappings()]


def assert_gpu_time_conserved(engine: Engine, *, replica: str, gpus: int) -> int:
    """Σ request GPU-ns + Σ idle GPU-ns == gpus x metered wall time, exactly, and the idle
    windows tile the wall time without gaps. Returns the wall time in ns."""
    with engine.connect() as conn:
        requests = conn.execute(
            select(func.coalesce(func.sum(UsageRecord.gpu_ns), 0)).where(
                UsageRecord.replica == replica
            )
        ).scalar_one()
        windows = conn.execute(
            select(ReplicaIdle.start_at, ReplicaIdle.end_at, ReplicaIdle.gpu_ns)
            .where(ReplicaIdle.replica == replica)
            .order_by(ReplicaIdle.start_at)
        ).all()
    assert windows, "no idle record: the meter was not closed"
    for (_, before_end, _), (after_start, _, _) in itertools.pairwise(windows):
        assert before_end == after_start
    wall_ns = sum((end_at - start_at) // ONE_US for start_at, end_at, _ in windows) * 1000
    assert int(requests) + sum(gpu_ns for _, _, gpu_ns in windows) == gpus * wall_ns
    return wall_ns
