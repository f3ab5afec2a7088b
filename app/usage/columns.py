"""Usage records as Arrow columns: the one in-memory form that bulk writers take.

:data:`USAGE_COLUMNS` names the columns of ``usage_records`` (without ``id``) with the Arrow
type each holds: instants as UTC microseconds, ``tags`` as its JSON text (keys sorted,
compact, ASCII, the text :func:`app.storage.usage_store.tags_json` gives), ``accepted_hist`` as a
list. :func:`events_columns` builds them from domain events (the per-record path);
:mod:`ingest.usage_checks` builds them straight from a JSONL file's columns.
"""

import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from app.domain.usage import UsageEvent

UTC_US = pa.timestamp("us", tz="UTC")
USAGE_COLUMNS = pa.schema(
    [
        ("event_id", pa.string()),
        ("session_id", pa.string()),
        ("team", pa.string()),
        ("cost_center", pa.string()),
        ("tags", pa.string()),
        ("deployment", pa.string()),
        ("replica", pa.string()),
        ("model", pa.string()),
        ("endpoint", pa.string()),
        ("streamed", pa.bool_()),
        ("spec_method", pa.string()),
        ("spec_k", pa.int64()),
        ("arrived_at", UTC_US),
        ("first_token_at", UTC_US),
        ("finished_at", UTC_US),
        ("prompt_tokens", pa.int64()),
        ("cached_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("num_drafts", pa.int64()),
        ("draft_tokens", pa.int64()),
        ("accepted_tokens", pa.int64()),
        ("accepted_hist", pa.list_(pa.int64())),
        ("gpu_ns", pa.int64()),
        ("concurrency", pa.int64()),
        ("status", pa.string()),
        ("http_status", pa.int64()),
        ("error", pa.string()),
    ]
)
"""The columns of ``usage_records`` a load writes, in table order."""


def tags_text(tags: dict[str, str] | None) -> str:
    """A record's tags as stored: JSON, keys sorted, compact, ASCII."""
    return json.dumps(dict(tags or {}), sort_keys=True, separators=(",", ":"))


def events_columns(events: Sequence[UsageEvent]) -> pa.Table:
    """Usage events as :data:`USAGE_COLUMNS` (one Python pass; for the few records the
    columnar reader leaves to the per-record path)."""
    columns: dict[str, list[object]] = {name: [] for name in USAGE_COLUMNS.names}
    for event in events:
        row = event.to_row()
        row["tags"] = tags_text(row["tags"])
        for name, values in columns.items():
            values.append(row[name])
    return pa.table(columns, schema=USAGE_COLUMNS)


def empty_usage() -> pa.Table:
    return USAGE_COLUMNS.empty_table()


def json_list_text(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A list<int64> column as JSON text (``[1,2]``); null stays null."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    as_text = pc.cast(values, pa.list_(pa.string()))
    joined = pc.binary_join(as_text, ",")
    return pc.binary_join_element_wise("[", joined, "]", "", null_handling="emit_null")
