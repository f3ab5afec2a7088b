"""The usage record of DESIGN.md as a frozen dataclass, and its JSON form: pure, no I/O.

:class:`UsageEvent` mirrors ``usage_records`` (one per request) and :class:`ReplicaIdleEvent`
mirrors ``replica_idle``. Their JSON form, one object per line of the proxy's JSONL log, has
only integers, strings, booleans and ISO 8601 UTC instants (no floats); :func:`record_from_json`
reads it back and names the first bad field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

__all__ = ["ReplicaIdleEvent", "UsageEvent", "UsageStatus", "record_from_json"]

SESSION_ID_MAX = 128
"""Longest session id, team, cost center or tag the usage record stores."""
MODEL_MAX = 256


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
        return row

    def to_json(self) -> dict[str, Any]:
        """A JSON object for the JSONL log: integers, strings, ISO 8601 UTC instants."""
        row = self.to_row()
        for name in _USAGE_TIMES:
            row[name] = _iso(row[name])
        return {"record": "usage", **row}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> UsageEvent:
        """Rebuild an event from :meth:`to_json` output.

        Raises:
            ValueError: Naming the first field that is missing or has the wrong type.
        """
        return cls(**_json_values(obj, _USAGE_SPEC))


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
        return {name: getattr(self, name) for name in _IDLE_SPEC}

    def to_json(self) -> dict[str, Any]:
        """A JSON object for the JSONL log."""
        row = self.to_row()
        row["start_at"], row["end_at"] = _iso(self.start_at), _iso(self.end_at)
        return {"record": "replica_idle", **row}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ReplicaIdleEvent:
        """Rebuild an idle record from :meth:`to_json` output.

        Raises:
            ValueError: Naming the first field that is missing or has the wrong type.
        """
        return cls(**_json_values(obj, _IDLE_SPEC))


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class _Field:
    kind: str
    """``str``, ``int``, ``bool``, ``time``, ``tags``."""
    optional: bool = False
    max_length: int | None = None


_USAGE_SPEC: dict[str, _Field] = {
    "event_id": _Field("str", max_length=64),
    "session_id": _Field("str", max_length=SESSION_ID_MAX),
    "team": _Field("str", optional=True, max_length=SESSION_ID_MAX),
    "cost_center": _Field("str", optional=True, max_length=SESSION_ID_MAX),
    "tags": _Field("tags"),
    "deployment": _Field("str", max_length=128),
    "replica": _Field("str", max_length=128),
    "model": _Field("str", max_length=MODEL_MAX),
    "endpoint": _Field("str", max_length=32),
    "streamed": _Field("bool"),
    "spec_method": _Field("str", max_length=32),
    "spec_k": _Field("int", optional=True),
    "arrived_at": _Field("time"),
    "first_token_at": _Field("time", optional=True),
    "finished_at": _Field("time"),
    "prompt_tokens": _Field("int"),
    "cached_tokens": _Field("int"),
    "completion_tokens": _Field("int"),
    "num_drafts": _Field("int"),
    "draft_tokens": _Field("int"),
    "accepted_tokens": _Field("int"),
    "gpu_ns": _Field("int"),
    "concurrency": _Field("int"),
    "status": _Field("status"),
    "http_status": _Field("int", optional=True),
    "error": _Field("str", optional=True),
}
_USAGE_FIELDS = tuple(_USAGE_SPEC)
_USAGE_TIMES = ("arrived_at", "first_token_at", "finished_at")
_IDLE_SPEC: dict[str, _Field] = {
    "deployment": _Field("str", max_length=128),
    "replica": _Field("str", max_length=128),
    "start_at": _Field("time"),
    "end_at": _Field("time"),
    "gpu_ns": _Field("int"),
}


def _json_values(obj: Mapping[str, Any], spec: Mapping[str, _Field]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, kind in spec.items():
        if name not in obj:
            if kind.optional:
                values[name] = None
                continue
            raise ValueError(f"field {name!r} is missing")
        values[name] = _field_value(name, obj[name], kind)
    return values


def _field_value(name: str, value: Any, spec: _Field) -> Any:
    if value is None and spec.optional:
        return None
    kind = spec.kind
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"field {name!r} must be a non-negative integer, got {value!r}")
    elif kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"field {name!r} must be true or false, got {value!r}")
    elif kind in ("str", "status"):
        if not isinstance(value, str) or (not value and not spec.optional):
            raise ValueError(f"field {name!r} must be a non-empty string, got {value!r}")
        if spec.max_length is not None and len(value) > spec.max_length:
            raise ValueError(f"field {name!r} is longer than {spec.max_length} characters")
        if kind == "status" and value not in UsageStatus.__members__:
            raise ValueError(f"field {name!r} must be ok, error or cancelled, got {value!r}")
    elif kind == "time":
        return _parse_time(name, value)
    elif kind == "tags":
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValueError(f"field {name!r} must be an object of strings, got {value!r}")
        return dict(value)
    return value


def _parse_time(name: str, value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"field {name!r} must be an ISO 8601 instant, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"field {name!r} is not an ISO 8601 instant: {value!r}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"field {name!r} has no UTC offset: {value!r}")
    return parsed.astimezone(UTC)


def record_from_json(obj: Any) -> UsageEvent | ReplicaIdleEvent:
    """Decode one JSONL line's object: a usage record (``"record": "usage"``, the default)
    or an idle record (``"record": "replica_idle"``).

    Raises:
        ValueError: If the object is not a valid record; the message names the field.
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("record", "usage")
    if kind == "usage":
        return UsageEvent.from_json(obj)
    if kind == "replica_idle":
        return ReplicaIdleEvent.from_json(obj)
    raise ValueError(f"unknown record type {kind!r} (expected usage or replica_idle)")
