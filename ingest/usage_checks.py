"""The usage record's rules (``app.usage.schemas.UsageEventIn``) as column checks: pure.

A JSONL file's lines, parsed by Arrow into :data:`LINE_SCHEMA`, are split into rows whose
every value these checks prove valid (returned as :data:`app.usage.columns.USAGE_COLUMNS`)
and rows left to the per-record path (``record_from_json``), which decides them, and names
the field of a bad one with the schema's own message. A row is left to it when:

- any check fails (the per-record path then words the error exactly as it always has);
- it is not a usage record (idle records are few: one per replica per metering window);
- a value is null where a JSON ``null`` would be an error but a missing key is fine (a
  default, or a key of the other record type): Arrow reads both as null, so the row's text
  must prove the key absent: it holds neither ``"key"`` nor a ``\\u`` escape (the only way
  to spell one of these ASCII keys otherwise);
- an instant is not in the plain form ``YYYY-MM-DDTHH:MM:SS[.ffffff](Z|+HH:MM)`` (the
  schema takes others: it decides them).

So the checks may send a valid row to the slow path, never let a bad row through.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.domain.usage import HISTOGRAM_MAX, MODEL_MAX, SESSION_ID_MAX
from app.kit.schemas import INTEGER_MAX, NAME_MAX
from app.usage.columns import USAGE_COLUMNS, UTC_US

_TEXT = pa.string()
LINE_SCHEMA = pa.schema(
    [
        ("record", _TEXT),
        ("event_id", _TEXT),
        ("session_id", _TEXT),
        ("team", _TEXT),
        ("cost_center", _TEXT),
        ("tags", pa.struct([])),  # keys inferred
        ("deployment", _TEXT),
        ("replica", _TEXT),
        ("model", _TEXT),
        ("endpoint", _TEXT),
        ("streamed", pa.bool_()),
        ("spec_method", _TEXT),
        ("spec_k", pa.int64()),
        ("arrived_at", _TEXT),
        ("first_token_at", _TEXT),
        ("finished_at", _TEXT),
        ("prompt_tokens", pa.int64()),
        ("cached_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("num_drafts", pa.int64()),
        ("draft_tokens", pa.int64()),
        ("accepted_tokens", pa.int64()),
        ("accepted_hist", pa.list_(pa.int64())),
        ("gpu_ns", pa.int64()),
        ("concurrency", pa.int64()),
        ("status", _TEXT),
        ("http_status", pa.int64()),
        ("error", _TEXT),
    ]
)
"""The keys of a usage record, typed for Arrow's JSON reader. An idle record's own keys
(:data:`IDLE_ONLY`) are read as inferred, so a block without them has no such column and
no usage row there needs its text searched for them; any other key is an error."""
IDLE_ONLY = ("start_at", "end_at")

_REQUIRED_TEXT = {
    "event_id": (1, 64),
    "session_id": (1, SESSION_ID_MAX),
    "deployment": (1, NAME_MAX),
    "replica": (1, NAME_MAX),
    "model": (1, MODEL_MAX),
}
_OPTIONAL_TEXT = {
    "team": (1, SESSION_ID_MAX),
    "cost_center": (1, SESSION_ID_MAX),
    "error": (0, 4000),
}
_DEFAULT_TEXT = {"endpoint": ("completions", 1, 32), "spec_method": ("none", 1, 32)}
_DEFAULT_INT = {
    "prompt_tokens": (0, 0, INTEGER_MAX),
    "cached_tokens": (0, 0, INTEGER_MAX),
    "completion_tokens": (0, 0, INTEGER_MAX),
    "num_drafts": (0, 0, INTEGER_MAX),
    "draft_tokens": (0, 0, INTEGER_MAX),
    "accepted_tokens": (0, 0, INTEGER_MAX),
    "gpu_ns": (0, 0, 2**62),
    "concurrency": (1, 1, INTEGER_MAX),
}
_OPTIONAL_INT = {"spec_k": (0, 64), "http_status": (100, 599)}
_TAGS_MAX = 64
_PLAIN_KEY = re.compile(r'^[^"\\/\x00-\x1f]*$')
_STATUSES = pa.array(["ok", "error", "cancelled"])
_PLAIN_INSTANT = (
    r"^([1-8]\d{3}|9[0-8]\d\d|99[0-8]\d|999[0-8])-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
    r"T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$"
)
"""The instants read as columns (the schema decides any other form); years to 9998, so
that no offset moves one past the calendar's end."""
_PLAIN_TAG = r"^[ !#-\[\]-~]*$"
"""Printable ASCII without quote or backslash: JSON text is the value in quotes."""


@dataclass(frozen=True, slots=True)
class Checked:
    """A block's rows, split."""

    usage: pa.Table
    """The rows proved valid usage records, as USAGE_COLUMNS."""
    usage_rows: np.ndarray
    """Their row numbers in the block."""
    per_record: np.ndarray
    """Rows the per-record path decides (idle records, anything unproved)."""


def check_block(table: pa.Table, texts: pa.Array) -> Checked:
    """Split a block parsed into :data:`LINE_SCHEMA` (plus, at most, the inferred
    :data:`IDLE_ONLY` columns), given each row's line text."""
    n = table.num_rows

    def null(name: str) -> np.ndarray:
        return _np(pc.is_null(table[name]))

    def unproved(name: str, where: np.ndarray) -> np.ndarray:
        """Rows of ``where`` whose text may hold the key ``name``."""
        return _may_mention(texts, name, where)

    record = table["record"]
    record_null = null("record")
    is_usage = _np(pc.equal(record, "usage")) | (record_null & ~unproved("record", record_null))
    bad = np.zeros(n, dtype=bool)

    for name, (low, high) in _REQUIRED_TEXT.items():
        bad |= null(name) | _bad_text(table[name], low, high)
    for name, (low, high) in _OPTIONAL_TEXT.items():
        bad |= _bad_text(table[name], low, high)
    for name in (*_DEFAULT_TEXT, "status", "streamed", *_DEFAULT_INT, "tags"):
        missing = null(name)
        bad |= unproved(name, missing & ~bad)
    for name, (_, low, high) in _DEFAULT_TEXT.items():
        bad |= _bad_text(table[name], low, high)
    status = table["status"]
    bad |= _np(pc.invert(pc.is_in(status, value_set=_STATUSES)))
    for name, (_, low, high) in _DEFAULT_INT.items():
        bad |= _out_of_range(table[name], low, high)
    for name, (low, high) in _OPTIONAL_INT.items():
        bad |= _out_of_range(table[name], low, high)
    for name in IDLE_ONLY:
        if name in table.column_names:
            bad |= unproved(name, is_usage & ~bad)
    bad |= _bad_histogram(table["accepted_hist"])
    tags_bad, tags = _tags(table["tags"], lambda key, where: _may_mention(texts, key, where))
    bad |= tags_bad

    arrived, arrived_bad = _instants(table["arrived_at"])
    finished, finished_bad = _instants(table["finished_at"])
    first_token, first_bad = _instants(table["first_token_at"])
    bad |= null("arrived_at") | arrived_bad | null("finished_at") | finished_bad | first_bad
    bad |= _np(pc.less(finished, arrived))
    ints = {
        name: pc.fill_null(table[name], default) for name, (default, _, _) in _DEFAULT_INT.items()
    }
    bad |= _np(pc.greater(ints["accepted_tokens"], ints["draft_tokens"]))

    good = is_usage & ~bad
    rows = np.flatnonzero(good)
    mask = pa.array(good)
    texts_default = {
        name: pc.fill_null(table[name], default) for name, (default, _, _) in _DEFAULT_TEXT.items()
    }
    columns = {
        "event_id": table["event_id"],
        "session_id": table["session_id"],
        "team": table["team"],
        "cost_center": table["cost_center"],
        "tags": tags,
        "deployment": table["deployment"],
        "replica": table["replica"],
        "model": table["model"],
        "endpoint": texts_default["endpoint"],
        "streamed": pc.fill_null(table["streamed"], False),
        "spec_method": texts_default["spec_method"],
        "spec_k": table["spec_k"],
        "arrived_at": arrived,
        "first_token_at": first_token,
        "finished_at": finished,
        **{name: ints[name] for name in ("prompt_tokens", "cached_tokens", "completion_tokens",
                                         "num_drafts", "draft_tokens", "accepted_tokens")},
        "accepted_hist": table["accepted_hist"],
        "gpu_ns": ints["gpu_ns"],
        "concurrency": ints["concurrency"],
        "status": pc.fill_null(status, "ok"),
        "http_status": table["http_status"],
        "error": table["error"],
    }  # fmt: skip
    usage = pa.table(
        [pc.filter(_chunked(columns[f.name], n), mask) for f in USAGE_COLUMNS],
        schema=USAGE_COLUMNS,
    )
    return Checked(usage=usage, usage_rows=rows, per_record=np.flatnonzero(~good))


def _np(values: pa.Array | pa.ChunkedArray, valid_only: object = None) -> np.ndarray:
    """A boolean column as numpy, null as False."""
    filled = pc.fill_null(values, False)
    if isinstance(filled, pa.ChunkedArray):
        filled = filled.combine_chunks()
    result: np.ndarray = filled.to_numpy(zero_copy_only=False)
    return result


def _chunked(values: pa.Array | pa.ChunkedArray, n: int) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks else pa.nulls(n)
    return values


def _may_mention(texts: pa.Array, key: str, where: np.ndarray) -> np.ndarray:
    """Rows of ``where`` whose text holds ``"key"`` or a ``\\u`` escape (which could spell
    it): those the text cannot prove without the key."""
    found = np.zeros(len(where), dtype=bool)
    if where.any():
        rows = np.flatnonzero(where)
        subset = texts.take(pa.array(rows))
        # A key is spelled as json.dumps writes it, or with escapes: \\uXXXX for any
        # character, or \\", \\\\, \\/ and the like for some.
        escapes = "\\u" if _PLAIN_KEY.match(key) else "\\"
        spelled = json.dumps(key, ensure_ascii=False)
        hit = pc.or_(pc.match_substring(subset, spelled), pc.match_substring(subset, escapes))
        found[rows] = _np(hit)
    return found


def _bad_text(values: pa.ChunkedArray, low: int, high: int) -> np.ndarray:
    """Non-null values of the wrong length (in characters) or holding a NUL."""
    length = pc.utf8_length(values)
    wrong = pc.or_(
        pc.or_(pc.less(length, low), pc.greater(length, high)),
        pc.match_substring(values, "\x00"),
    )
    return _np(wrong)


def _out_of_range(values: pa.ChunkedArray, low: int, high: int) -> np.ndarray:
    return _np(pc.or_(pc.less(values, low), pc.greater(values, high)))


def _bad_histogram(values: pa.ChunkedArray) -> np.ndarray:
    """Non-null lists with 0 or too many entries, a null entry or one out of range."""
    values = _chunked(values, len(values))
    if values.null_count == len(values):
        return np.zeros(len(values), dtype=bool)
    length = pc.list_value_length(values)
    bad = _np(pc.or_(pc.less(length, 1), pc.greater(length, HISTOGRAM_MAX)))
    flat = values.flatten()
    if len(flat):
        entry_bad = _np(pc.or_(pc.less(flat, 0), pc.greater(flat, INTEGER_MAX))) | _np(
            pc.is_null(flat)
        )
        if entry_bad.any():
            parents = pc.list_parent_indices(values).to_numpy()
            bad[np.unique(parents[entry_bad])] = True
    return bad


def _tags(
    values: pa.ChunkedArray, may_mention: Callable[[str, np.ndarray], np.ndarray]
) -> tuple[np.ndarray, pa.Array]:
    """Rows whose tags are not provably a map of text, and each row's tags as stored JSON
    text (keys sorted). A missing ``tags`` or a key missing from a row's tags reads as null:
    fine where the row's text proves it absent, else the row goes to the per-record path."""
    struct = _chunked(values, len(values))
    n = len(struct)
    given = _np(pc.is_valid(struct))
    bad = may_mention("tags", ~given)
    if not isinstance(struct.type, pa.StructType) or struct.type.num_fields == 0:
        return bad, pa.array(["{}"] * n, pa.string())
    names = sorted(struct.type.field(i).name for i in range(struct.type.num_fields))
    present = [_np(pc.is_valid(struct.field(name))) for name in names]
    if len(names) > _TAGS_MAX:
        bad |= np.sum(present, axis=0) > _TAGS_MAX
    pieces = []
    for name, has in zip(names, present, strict=True):
        child = struct.field(name)
        if not pa.types.is_string(child.type) or "\x00" in name:
            bad |= has
            child = pa.nulls(n, pa.string())
        bad |= may_mention(name, given & ~has & ~bad)
        bad |= has & ~_np(pc.match_substring_regex(child, _PLAIN_TAG))
        key = "," + json.dumps(name) + ':"'
        piece = pc.binary_join_element_wise(key, child, '"', "", null_handling="emit_null")
        pieces.append(pc.fill_null(piece, ""))
    # Each piece starts with a comma; no nulls (null_handling="skip" drops trailing rows).
    joined = pc.utf8_slice_codeunits(pc.binary_join_element_wise(*pieces, ""), 1)
    return bad, pc.binary_join_element_wise("{", joined, "}", "")


def _instants(values: pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """Instants in the plain ISO form as UTC microseconds; ``bad`` marks non-null values not
    proved valid (another form, or no such date or time). Arrow's cast parses what the
    pattern lets through unless a day is past its month's end: then the fields are read
    one by one."""
    text = _chunked(values, len(values))
    matched = pc.match_substring_regex(text, _PLAIN_INSTANT)
    try:
        instants = pc.cast(pc.if_else(matched, text, pa.scalar(None, pa.string())), UTC_US)
    except pa.ArrowInvalid:
        return _instants_by_field(text)
    return instants, _np(pc.and_(pc.is_valid(text), pc.invert(matched)))


def _instants_by_field(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    n = len(text)
    fields = pc.extract_regex(
        text,
        r"^(?P<y>[1-9]\d{3})-(?P<mo>\d\d)-(?P<d>\d\d)T(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
        r"(?:\.(?P<f>\d{1,6}))?(?P<z>Z|(?P<sign>[+-])(?P<zh>\d\d):(?P<zm>\d\d))$",
    )
    matched = _np(pc.is_valid(fields))
    bad = _np(pc.is_valid(text)) & ~matched

    def number(name: str) -> np.ndarray:
        digits = pc.struct_field(fields, name)
        as_int = pc.cast(pc.if_else(pc.equal(digits, ""), "0", digits), pa.int64())
        result: np.ndarray = as_int.to_numpy(zero_copy_only=False)
        return result

    if not matched.any():
        return pa.nulls(n, UTC_US), bad
    keep = pa.array(matched)
    fields = pc.if_else(keep, fields, pa.scalar(None, fields.type))
    fields = pc.fill_null(fields, pa.scalar(_ZERO, fields.type))
    year, month, day = number("y"), number("mo"), number("d")
    hour, minute, second = number("h"), number("mi"), number("s")
    frac = pc.struct_field(fields, "f")
    micros = pc.cast(
        pc.utf8_rpad(pc.if_else(pc.equal(frac, ""), "0", frac), 6, "0"), pa.int64()
    ).to_numpy(zero_copy_only=False)
    sign = np.where(_np(pc.equal(pc.struct_field(fields, "sign"), "-")), -1, 1)
    zone_hour, zone_minute = number("zh"), number("zm")
    month_ok = (month >= 1) & (month <= 12)
    safe_month = np.where(month_ok, month, 1)
    ok = (
        month_ok
        & (day >= 1)
        & (day <= _days_in_month(year, safe_month))
        & (hour <= 23)
        & (minute <= 59)
        & (second <= 59)
        & (zone_hour <= 23)
        & (zone_minute <= 59)
        & (year <= 9998)
    )
    bad |= matched & ~ok
    days = _days_from_civil(year, safe_month, np.where(ok, day, 1))
    offset_s = sign * (zone_hour * 3600 + zone_minute * 60)
    us = ((days * 86400 + hour * 3600 + minute * 60 + second - offset_s) * 1_000_000) + micros
    valid = matched & ok
    return pa.array(us, pa.int64(), mask=~valid).cast(UTC_US), bad


_ZERO = {"y": "1000", "mo": "01", "d": "01", "h": "00", "mi": "00", "s": "00", "f": "",
         "z": "Z", "sign": "", "zh": "00", "zm": "00"}  # fmt: skip


def _days_in_month(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    lengths = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
    result: np.ndarray = lengths[month] + ((month == 2) & leap)
    return result


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y = year - (month <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    result: np.ndarray = era * 146097 + doe - 719468
    return result
