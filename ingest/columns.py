"""Vectorised normalisation of one FOCUS column, with repairs counted and bad rows located.

Each column is dictionary-encoded, each distinct value is parsed once (numbers that are
already canonical go through Arrow's decimal cast in bulk), and the results are mapped back
to the rows. That keeps a million-row file to a few seconds.
"""

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.domain.focus import FocusColumn, Kind
from ingest import cells

EXACT_TYPE = pa.decimal128(38, 12)
"""Money as read: exact to the pico (``app.domain.money``), split into micros and residual
when stored (:func:`micros_and_residuals`)."""
_LARGEST_EXACT = pa.scalar(Decimal(2**63 - 1).scaleb(-6), pa.decimal128(38, 12))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


@dataclass
class ColumnResult:
    """A normalised column: values (typed), JSON fragments for the JSON blobs, and findings."""

    values: pa.Array
    repairs: Counter[str] = field(default_factory=Counter)
    bad_rows: dict[int, tuple[str, str]] = field(default_factory=dict)
    """0-based row index -> (reason, raw value) for values that could not be repaired."""


def normalise_column(
    column: FocusColumn | None,
    raw: pa.Array,
    *,
    tags: bool = False,
    weights: np.ndarray | None = None,
) -> ColumnResult:
    """Normalise a raw column (strings from CSV, or typed from Parquet).

    ``column`` is None for provider ``x_`` columns, which are kept as text or flat JSON.
    ``weights`` says how many rows each value stands for (when ``raw`` holds a file's distinct
    values); repairs are counted in rows.
    """
    kind = column.kind if column else Kind.string
    if pa.types.is_timestamp(raw.type) and kind is Kind.datetime:
        return _typed_timestamps(raw)
    if pa.types.is_map(raw.type):
        raw = maps_to_json_text(raw)
    elif not (pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type)):
        return _typed_other(column, raw, weights)
    return _text_column(column, kind, raw, tags=tags, weights=weights)


def _text_column(
    column: FocusColumn | None,
    kind: Kind,
    raw: pa.Array,
    *,
    tags: bool,
    weights: np.ndarray | None = None,
) -> ColumnResult:
    if kind in (Kind.money, Kind.decimal):
        canonical = _canonical_number_column(kind, raw)
        if canonical is not None:
            return ColumnResult(values=canonical)
    encoded = pc.dictionary_encode(raw)
    dictionary: pa.Array = encoded.dictionary
    indices = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    valid = indices >= 0
    counts = np.bincount(
        indices[valid],
        weights=None if weights is None else weights[valid],
        minlength=len(dictionary),
    ).astype(np.int64)
    result = ColumnResult(values=pa.nulls(0))

    trimmed = pc.utf8_trim_whitespace(dictionary)
    blank = pc.equal(trimmed, "").to_numpy(zero_copy_only=False)
    literal = pc.is_in(pc.utf8_lower(trimmed), pa.array(sorted(cells.NULL_LITERALS)))
    literal = literal.to_numpy(zero_copy_only=False) & ~blank
    for repair, mask in (("empty_string_as_null", blank), ("null_literal_as_null", literal)):
        if mask.any():
            result.repairs[repair] += int(counts[mask].sum())
    is_null = blank | literal

    if kind is Kind.string and column is not None:
        parsed = pc.if_else(pa.array(is_null), pa.scalar(None, pa.string()), dictionary)
    else:
        parsed, errors = _parse_distinct(
            column, kind, dictionary, is_null, counts, result, tags=tags
        )
        for i, reason in errors.items():
            for row in np.flatnonzero(indices == i):
                result.bad_rows[int(row)] = (reason, dictionary[i].as_py())
    result.values = parsed.take(pa.array(indices, mask=indices < 0))
    return result


def _parse_distinct(
    column: FocusColumn | None,
    kind: Kind,
    dictionary: pa.Array,
    is_null: np.ndarray,
    counts: np.ndarray,
    result: ColumnResult,
    *,
    tags: bool,
) -> tuple[pa.Array, dict[int, str]]:
    """Parse each distinct value once: canonical numbers in bulk with Arrow, the rest in
    Python. Returns the parsed dictionary (null where null or unparseable) and the errors."""
    out_type = _output_type(kind)
    size = len(dictionary)
    parsed, done = _parse_canonical_numbers(kind, dictionary, ~is_null)
    if parsed is None:
        parsed = pa.nulls(size, out_type)
    remaining = np.flatnonzero(~is_null & ~done)
    if remaining.size == 0:
        return parsed, {}
    errors: dict[int, str] = {}
    parse = _parser_for(column, kind, tags=tags)
    slow: list[Any] = []
    for i, text in zip(remaining, dictionary.take(pa.array(remaining)).to_pylist(), strict=True):
        try:
            value, repair = parse(text)
        except ValueError as exc:
            errors[int(i)] = str(exc)
            value, repair = None, None
        slow.append(value)
        if repair:
            result.repairs[repair] += int(counts[i])
    # Slot i takes the slow result where one was computed, else the bulk one.
    positions = np.arange(size)
    positions[remaining] = size + np.arange(remaining.size)
    combined = pa.concat_arrays([parsed, pa.array(slow, type=out_type)])
    return combined.take(pa.array(positions)), errors


def _parse_canonical_numbers(
    kind: Kind, dictionary: pa.Array, wanted: np.ndarray
) -> tuple[pa.Array | None, np.ndarray]:
    """Money and decimal values already written canonically, parsed without Python: the
    parsed dictionary (or None) and the mask of slots it settled."""
    none = np.zeros(len(dictionary), dtype=bool)
    if kind not in (Kind.money, Kind.decimal):
        return None, none
    canonical = pc.match_substring_regex(dictionary, f"^{cells.CANONICAL_NUMBER.pattern}$")
    done = wanted & pc.fill_null(canonical, False).to_numpy(zero_copy_only=False)
    if kind is Kind.decimal:  # canonical decimal text is kept as written
        return pc.if_else(pa.array(done), dictionary, pa.scalar(None, pa.string())), done
    exact = _canonical_exact(dictionary.filter(pa.array(done)))
    if exact is None:
        return None, none
    positions = np.full(len(dictionary), -1, dtype=np.int64)
    positions[done] = np.arange(int(done.sum()))
    return exact.take(pa.array(positions, mask=~done)), done


def _canonical_number_column(kind: Kind, raw: pa.Array) -> pa.Array | None:
    """A number column whose every value is null or canonical, converted without looking at
    distinct values (most amounts are distinct, so that would only cost a hash table);
    None when any value needs the general path."""
    canonical = pc.match_substring_regex(raw, f"^{cells.CANONICAL_NUMBER.pattern}$")
    if not pc.all(pc.fill_null(canonical, True)).as_py():
        return None
    if kind is Kind.decimal:
        return raw.cast(pa.string())
    return _canonical_exact(raw)


def _canonical_exact(texts: pa.Array) -> pa.Array | None:
    """Exact amounts of canonical decimal text via Arrow's decimal cast (nulls kept).

    Returns None when Arrow cannot represent a value exactly at 12 places (more digits) or
    a value is beyond int64 micros; the caller then parses those values one by one with
    Decimal, which rounds or reports them.
    """
    try:
        exact = pc.cast(texts, EXACT_TYPE)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if pc.any(pc.greater(pc.abs(exact), _LARGEST_EXACT)).as_py():
        return None
    return exact


def micros_and_residuals(exact: pa.Array) -> tuple[pa.Array, pa.Array]:
    """An exact money column as stored: int64 micros rounded half to even, and the int64
    residual in picos beyond them (0 where the amount is null)."""
    # Amounts are below 2**63 micros (19 digits and 12 places): one digit to spare for
    # the difference, which Arrow types one digit wider than its operands.
    narrow = pa.decimal128(37, 12)
    rounded = pc.round(exact, ndigits=6, round_mode="half_to_even").cast(narrow)
    residual = pc.subtract(exact.cast(narrow), rounded).cast(EXACT_TYPE)
    return _unscaled(rounded.cast(pa.decimal128(38, 6))), pc.fill_null(_unscaled(residual), 0)


def _unscaled(values: pa.Array) -> pa.Array:
    """The unscaled integers of a decimal128 array whose values fit int64 (micros of a
    decimal128(38, 6), picos of a decimal128(38, 12)), nulls kept."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    words = np.frombuffer(values.buffers()[1], dtype=np.int64).reshape(-1, 2)
    words = words[values.offset : values.offset + len(values)]
    return pa.array(words[:, 0].copy(), mask=pc.is_null(values).to_numpy(zero_copy_only=False))


def _parser_for(
    column: FocusColumn | None, kind: Kind, *, tags: bool
) -> Callable[[str], tuple[Any, str | None]]:
    if kind is Kind.money:
        return cells.parse_money_exact
    if kind is Kind.decimal:
        return _decimal_text
    if kind is Kind.datetime:
        return cells.parse_timestamp
    if kind is Kind.enum and column is not None:
        allowed = column.allowed
        return lambda text: cells.parse_enum(text, allowed)
    if kind is Kind.open_enum and column is not None:
        allowed = column.allowed
        return lambda text: _open_enum(text, allowed)
    if kind is Kind.json:
        return lambda text: cells.parse_json_object(text, tags=tags)
    if kind is Kind.json_object:
        return cells.check_nested_json_object
    if column is None:
        return _provider_value
    return lambda text: (text, None)


def _decimal_text(text: str) -> tuple[str, str | None]:
    value, repair = cells.parse_number(text)
    return (text if repair is None else str(value)), repair


def _open_enum(text: str, allowed: tuple[str, ...]) -> tuple[str, str | None]:
    try:
        return cells.parse_enum(text, allowed)
    except ValueError:
        return text, "nonstandard_value_kept"


def _provider_value(text: str) -> tuple[str, str | None]:
    """x_ columns: JSON objects (AWS writes maps such as x_Discounts that way) stay JSON."""
    if text.startswith("{"):
        try:
            return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")), None
        except json.JSONDecodeError:
            pass
    return json.dumps(text, ensure_ascii=False), None


def _output_type(kind: Kind) -> pa.DataType:
    if kind is Kind.money:
        return EXACT_TYPE
    if kind is Kind.datetime:
        return TIMESTAMP_TYPE
    return pa.string()


def _typed_timestamps(raw: pa.Array) -> ColumnResult:
    """Parquet timestamps: a zone-less one is read as UTC (AWS writes UTC)."""
    unit_fixed = raw.cast(pa.timestamp("us", tz=raw.type.tz))
    if raw.type.tz is None:
        unit_fixed = pc.assume_timezone(unit_fixed, "UTC")
    return ColumnResult(values=unit_fixed.cast(TIMESTAMP_TYPE))


def _typed_other(
    column: FocusColumn | None, raw: pa.Array, weights: np.ndarray | None
) -> ColumnResult:
    """Parquet numbers (decimal, double, int): decimals convert exactly; doubles via their
    shortest repr, which is the value the provider wrote."""
    if pa.types.is_decimal(raw.type) or pa.types.is_integer(raw.type):
        text = raw.cast(pa.string())
    elif pa.types.is_floating(raw.type):
        text = pa.array([None if v is None else repr(v) for v in raw.to_pylist()], pa.string())
    elif pa.types.is_timestamp(raw.type):
        as_utc = _typed_timestamps(raw).values
        text = pc.strftime(as_utc, format="%Y-%m-%dT%H:%M:%SZ")
    else:
        text = raw.cast(pa.string())
    kind = column.kind if column else Kind.string
    return _text_column(column, kind, text, tags=False, weights=weights)


def maps_to_json_text(raw: pa.Array) -> pa.Array:
    values = [None if m is None else json.dumps(dict(m)) for m in raw.to_pylist()]
    return pa.array(values, pa.string())


_NEEDS_JSON_ESCAPE = r'["\\\x00-\x1f]'
"""A quote, a backslash or a control character: JSON must escape these inside a string."""


def json_fragments(kind: Kind, values: pa.Array) -> pa.Array:
    """Each value as a JSON fragment (a quoted string, or an object for JSON columns).

    Values that need escaping are rare in billing data, so only they go through ``json.dumps``.
    """
    if kind in (Kind.json, Kind.json_object):
        return values
    if pa.types.is_timestamp(values.type):
        values = pc.strftime(values, format="%Y-%m-%dT%H:%M:%SZ")
    elif not pa.types.is_string(values.type):
        values = values.cast(pa.string())
    quoted = pc.binary_join_element_wise('"', values, '"', "")
    needs_escape = pc.fill_null(pc.match_substring_regex(values, _NEEDS_JSON_ESCAPE), False)
    if not pc.any(needs_escape).as_py():
        return quoted
    escaped = [json.dumps(v, ensure_ascii=False) for v in values.filter(needs_escape).to_pylist()]
    return pc.replace_with_mask(quoted, needs_escape, pa.array(escaped, pa.string()))


def json_objects(named_fragments: list[tuple[str, pa.Array]], length: int) -> pa.Array:
    """Build one compact JSON object per row from per-column fragments; nulls are left out."""
    if not named_fragments:
        return pa.array(["{}"] * length, pa.string())
    parts = []
    for name, fragment in named_fragments:
        prefix = "," + json.dumps(name) + ":"
        joined = pc.binary_join_element_wise(prefix, fragment, "")
        parts.append(pc.if_else(pc.is_null(fragment), "", joined))
    body = pc.utf8_ltrim(pc.binary_join_element_wise(*parts, ""), characters=",")
    return pc.binary_join_element_wise("{", body, "}", "")


def utc_now() -> datetime:
    return datetime.now(UTC)
