"""Plain typed builders for test data (no factory_boy)."""

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, insert

from app.models import UsageRecord

_counter = itertools.count(1)


def usage_record(
    *,
    deployment: str = "d1",
    replica: str = "r1",
    session_id: str = "s1",
    team: str | None = "search",
    arrived: datetime,
    seconds: float = 2.0,
    gpu_ns: int = 1_000_000_000,
    **overrides: Any,
) -> dict[str, Any]:
    """A usage_records row as the proxy writes it."""
    row: dict[str, Any] = {
        "event_id": f"evt-{next(_counter)}",
        "session_id": session_id,
        "team": team,
        "cost_center": None,
        "tags": {"app": "chat"},
        "deployment": deployment,
        "replica": replica,
        "model": "smollm2-135m",
        "endpoint": "completions",
        "streamed": False,
        "spec_method": "ngram",
        "spec_k": 4,
        "arrived_at": arrived,
        "first_token_at": arrived + timedelta(seconds=0.2),
        "finished_at": arrived + timedelta(seconds=seconds),
        "prompt_tokens": 100,
        "cached_tokens": 0,
        "completion_tokens": 50,
        "num_drafts": 20,
        "draft_tokens": 80,
        "accepted_tokens": 40,
        "gpu_ns": gpu_ns,
        "concurrency": 1,
        "status": "ok",
        "http_status": 200,
        "error": None,
    }
    row.update(overrides)
    return row


def insert_usage(bind: Engine | Connection, rows: list[dict[str, Any]]) -> None:
    """Store usage rows: in a transaction of their own (an engine) or the caller's."""
    if isinstance(bind, Connection):
        bind.execute(insert(UsageRecord), rows)
        return
    with bind.begin() as conn:
        conn.execute(insert(UsageRecord), rows)


def at(hour: int, minute: int = 0, second: float = 0, *, day: int = 1, month: int = 10) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC) + timedelta(seconds=second)
