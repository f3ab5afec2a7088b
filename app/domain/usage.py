"""The usage record of DESIGN.md as a frozen dataclass, and its JSON form: pure, no I/O.

:class:`UsageEvent` mirrors ``usage_records`` (one per request) and :class:`ReplicaIdleEvent`
mirrors ``replica_idle``. Their JSON form, one object per line of the proxy's JSONL log, has
only integers, strings, booleans and ISO 8601 UTC instants (no floats). Reading it back, from
a JSONL line or an HTTP body, is validated by one schema: ``app.usage.schemas``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

__all__ = ["ReplicaIdleEvent", "UsageEvent", "UsageStatus"]

SESSION_ID_MAX = 128
"""Longest session id, team, cost center or tag the usage record stores."""
MODEL_MAX = 256
HISTOGRAM_MAX = 65
"""Most entries of a request's acceptance histogram: ``k + 1`` for k up to 64."""


class UsageStatus(StrEnum):
    """How a request ended."""

    ok = "ok"
    error = "error"
    cancelled = "cancelled"
    """The client went away before the response was complete."""


@dataclass(frozen=True, slots=True)
class UsageEvent:
    """One request through the proxy: the usage record of DESIGN.md (``usage_records``)."""

    event_id: str
    """Idempotency key: writing the same event twice keeps the first."""
    session_id: str
    team: str | None
    cost_center: str | None
    tags: Mapping[str, str]
    deployment: str
    replica: str
    model: str
    endpoint: str
    """``completions`` or ``chat.completions``."""
    streamed: bool
    spec_method: str
    spec_k: int | None
    arrived_at: datetime
    """Aware UTC; when the proxy received the request."""
    first_token_at: datetime | None
    finished_at: datetime
    """When the last byte went to the client, or the request failed or was cancelled."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    num_drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_hist: tuple[int, ...] | None = None
    """vLLM's ``acceptance_histogram`` of the request: ``k + 1`` counts, entry ``j`` the
    verification steps that accepted exactly ``j`` drafted tokens (see
    :mod:`app.speculation.rules.positions`); None when the server did not report one."""
    gpu_ns: int = 0
    """GPU-nanoseconds allocated by the replica's meter."""
    concurrency: int = 1
    """Requests in flight on the replica when this one arrived, itself included."""
    status: str = UsageStatus.ok
    http_status: int | None = None
    error: str | None = None

    def to_row(self) -> dict[str, Any]:
        """Column values for ``usage_records``."""
        row = {name: getattr(self, name) for name in _USAGE_FIELDS}
        row["tags"] = dict(self.tags)
        row["status"] = str(self.status)
        row["accepted_hist"] = None if self.accepted_hist is None else list(self.accepted_hist)
        return row

    def to_json(self) -> dict[str, Any]:
        """A JSON object for the JSONL log: integers, strings, ISO 8601 UTC instants."""
        row = self.to_row()
        for name in _USAGE_TIMES:
            row[name] = _iso(row[name])
        return {"record": "usage", **row}


@dataclass(frozen=True, slots=True)
class ReplicaIdleEvent:
    """GPU time of a replica with no request in flight, over one metering window
    (``replica_idle``)."""

    deployment: str
    replica: str
    start_at: datetime
    end_at: datetime
    gpu_ns: int

    def to_row(self) -> dict[str, Any]:
        """Column values for ``replica_idle``."""
        return {name: getattr(self, name) for name in _IDLE_FIELDS}

    def to_json(self) -> dict[str, Any]:
        """A JSON object for the JSONL log."""
        row = self.to_row()
        row["start_at"], row["end_at"] = _iso(self.start_at), _iso(self.end_at)
        return {"record": "replica_idle", **row}


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


_USAGE_FIELDS = tuple(f.name for f in fields(UsageEvent))
_USAGE_TIMES = ("arrived_at", "first_token_at", "finished_at")
_IDLE_FIELDS = tuple(f.name for f in fields(ReplicaIdleEvent))
