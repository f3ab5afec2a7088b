"""The FOCUS 1.3 allocation export: every allocated share of a source billing row as a FOCUS
row carrying the source row's columns, streamed in Arrow batches.

Columnar: the source rows (thousands) are one Arrow table; the entries (millions) are read
in batches of columns and turned into FOCUS columns by Arrow compute. A pooled row is split
across its pool's entries by an array form of the ledger's largest remainder, so each source
row's shares sum back to it exactly.

FOCUS 1.3 (data generator-calculated split cost allocation): each source row is an *origin
charge*, each of its shares an *allocated charge*. Dimensions and unit prices are the origin's;
every summable metric (the four costs, PricingQuantity, ConsumedQuantity) is split so that the
shares sum back to the origin exactly (largest remainder; quantities at
:data:`~app.domain.focus.QUANTITY_DIGITS` decimals or more); AllocatedMethodDetails is
``{"Elements": [{"AllocatedRatio": r, ...}], "x_...": ...}`` with the ratios of one origin's
shares summing to exactly 1 (fixed-point, largest remainder: :func:`~app.domain.focus.ratio_units`).
A row that matched no deployment is not split: its one share has no Allocated* columns.
"""

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from sqlalchemy import Select, String, func, select, type_coerce
from sqlalchemy.orm import Session

from app.domain.allocation import split_array_by_weight
from app.domain.focus import COLUMNS as FOCUS_COLUMNS
from app.domain.focus import (
    RATIO_DIGITS,
    SUMMABLE_DECIMALS,
    TYPED_COLUMNS,
    decimal_text,
    split_quantity_units,
    split_units_array,
    split_weights,
)
from app.domain.ledger import AllocationMethod, EntryKind
from app.domain.money import exact_picos, picos_to_decimal, residual_column
from app.domain.periods import Month
from app.models import BillingRow, LedgerEntry, LedgerPoolRow, LedgerRollup
from app.storage.entry_reader import EntryReader, entry_reader
from app.storage.run_repository import current_run_id

MONEY = pa.decimal128(38, 6)
FOCUS_MONEY = pa.decimal128(38, 12)
"""The export's costs: exact, at the bill's precision (``app.domain.money``)."""
FOCUS_OF_DB = {db: focus for focus, db in TYPED_COLUMNS.items()}
FOCUS_BATCH_ROWS = 50_000
"""FOCUS rows per batch: what the export holds in memory at once (plus one pool's shares)."""

_AMOUNTS = ("billed", "effective", "list_cost", "contracted")
"""A share's amounts, in the order of their FOCUS columns in :data:`_SHARE_COLUMNS`."""
_SHARE_COLUMNS = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "AllocatedMethodId",
    "AllocatedMethodDetails",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
    "x_SourceBillingRowId",
)
"""The columns a share adds to its source row's."""
_TWO_LEVEL_SUFFIX = ":hour,team"
"""The method of a row split in two levels (charge hour x team bucket, then requests)."""
_TWO_LEVEL = ', "x_Levels": ["charge hour x team", "request"]'


def focus_allocation_table(
    session: Session,
    month: Month,
    *,
    team: str | None = None,
    s3_endpoint_url: str | None = None,
) -> pa.Table:
    """The whole FOCUS 1.3 allocation of a month as one table (see :func:`focus_batches`);
    for tests and small months, the files stream (:func:`write_focus_allocation`)."""
    schema, batches = focus_batches(session, month, team=team, s3_endpoint_url=s3_endpoint_url)
    return pa.Table.from_batches(list(batches), schema=schema)


def write_focus_allocation(
    session: Session,
    month: Month,
    out: Path | pa.NativeFile,
    fmt: str,
    *,
    team: str | None,
    s3_endpoint_url: str | None = None,
) -> int:
    """Stream the month's FOCUS 1.3 allocation to ``out`` as CSV or Parquet; the rows written.

    Memory stays at one batch whatever the size of the month."""
    schema, batches = focus_batches(session, month, team=team, s3_endpoint_url=s3_endpoint_url)
    sink = str(out) if isinstance(out, Path) else out
    written = 0
    with (
        pq.ParquetWriter(sink, schema)
        if fmt == "parquet"
        else pacsv.CSVWriter(sink, schema) as writer
    ):
        for batch in batches:
            writer.write_batch(batch)
            written += batch.num_rows
    return written


def focus_batches(
    session: Session,
    month: Month,
    *,
    team: str | None = None,
    s3_endpoint_url: str | None = None,
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """FOCUS 1.3 rows, one per share of a source billing row in the month's run, in batches.

    Each row keeps its source row's FOCUS and ``x_`` columns and carries its share of
    BilledCost, EffectiveCost, ListCost and ContractedCost. A row split on its own has its
    entries' shares, as the plan computed them in every basis. A row of a pool of several
    rows is split across the pool's entries by their weights (largest remainder), so each
    source row's shares sum back to it exactly. Adjustments for a closed month (they have no
    source row) become ``Correction`` rows of their own. ``team`` keeps one team's shares.

    The schema comes first, from the source rows (thousands, not millions); the entries are
    read in batches, never all at once, from the database or the Parquet store that holds
    them. Entries are taken in an order of their own data (source row, kind, request, team,
    session), so the same month gives the same file from either store and on every run.
    """
    run_id = current_run_id(session, month) or 0
    sources = _source_rows(session, run_id)
    source_table = _source_table(sources)
    with entry_reader(session, run_id, s3_endpoint_url=s3_endpoint_url) as reader:
        adjustments = reader.mappings(_adjustments(run_id, team))
    payer = _payer_of(session, run_id, sources)
    adjustment_rows = [_adjustment_row(entry, month, payer) for entry in adjustments]
    names = list(source_table.column_names[1:])
    if sources:
        names += [n for n in _SHARE_COLUMNS if n not in names]
    # Every FOCUS 1.3 column, null where the source rows had none: a FOCUS column the
    # source file had but left null throughout is not stored, and must not vanish.
    names += [c.name for c in FOCUS_COLUMNS if c.name not in names]
    for record in adjustment_rows[:1]:
        names += [n for n in record if n not in names]
    schema = _focus_schema(names)
    shares = _ShareBatches(source_table, schema, run_id)

    def batches() -> Iterator[pa.RecordBatch]:
        with entry_reader(session, run_id, s3_endpoint_url=s3_endpoint_url) as reader:
            yield from _share_batches(reader)
        if adjustment_rows:
            yield _record_batch(adjustment_rows, schema)

    def _share_batches(reader: EntryReader) -> Iterator[pa.RecordBatch]:
        # A source row's shares are read whole (the ratios and quantities need all of them),
        # then ``team``'s kept.
        pending: list[_Shares] = []
        held = 0
        for query, pooled in ((_single_entries(run_id), False), (_pooled_entries(run_id), True)):
            for row_id, entries in _by_source_row(reader, query):
                part = _origin_shares(sources[row_id], entries, pooled=pooled, team=team)
                if part.entries.num_rows:
                    pending.append(part)
                    held += part.entries.num_rows
                if held >= FOCUS_BATCH_ROWS:
                    yield shares.of_many(pending)
                    pending, held = [], 0
        if pending:
            yield shares.of_many(pending)

    return schema, batches()


# Reading: the source rows whole, the entries as batches of columns.

_ENTRY_COLUMNS = {
    "kind": type_coerce(LedgerEntry.kind, String),
    "method": type_coerce(LedgerEntry.method, String),
    "pool_id": LedgerEntry.pool_id,
    "gpu_ns": LedgerEntry.gpu_ns,
    "event_id": LedgerEntry.event_id,
    "session_id": LedgerEntry.session_id,
    "team": LedgerEntry.team,
    "deployment": LedgerEntry.deployment,
    "billed_micros": LedgerEntry.billed_cost_micros,
    "effective_micros": LedgerEntry.effective_cost_micros,
    "list_cost_micros": func.coalesce(LedgerEntry.list_cost_micros, 0),
    "contracted_micros": func.coalesce(LedgerEntry.contracted_cost_micros, 0),
    "billed_residual_picos": LedgerEntry.billed_cost_residual_picos,
    "effective_residual_picos": LedgerEntry.effective_cost_residual_picos,
    "list_cost_residual_picos": LedgerEntry.list_cost_residual_picos,
    "contracted_residual_picos": LedgerEntry.contracted_cost_residual_picos,
}
_ENTRY_TYPES = {
    "row_id": pa.int64(),
    "pool_id": pa.int64(),
    "gpu_ns": pa.int64(),
    **{f"{name}_micros": pa.int64() for name in _AMOUNTS},
    **{residual_column(name): pa.int64() for name in _AMOUNTS},
}


def _source_rows(session: Session, run_id: int) -> dict[int, BillingRow]:
    """The billing rows the run split, alone or in a pool, by id (from the run's rollups and
    pool rows, in the database whichever store holds the entries)."""
    single_ids = select(LedgerRollup.billing_row_id).where(
        LedgerRollup.run_id == run_id, LedgerRollup.billing_row_id.is_not(None)
    )
    pooled_ids = select(LedgerPoolRow.billing_row_id).where(LedgerPoolRow.run_id == run_id)
    rows = session.scalars(
        select(BillingRow)
        .where(BillingRow.id.in_(single_ids.union(pooled_ids).scalar_subquery()))
        .order_by(BillingRow.id)
    )
    return {row.id: row for row in rows}


def _source_table(sources: dict[int, BillingRow]) -> pa.Table:
    """One row per source row: ``row_id``, then its FOCUS and ``x_`` columns as text."""
    records = [_source_columns(row) for row in sources.values()]
    names: list[str] = []
    for record in records:
        names += [n for n in record if n not in names]
    columns = {"row_id": pa.array(list(sources), pa.int64())}
    for name in names:
        values = [r.get(name) for r in records]
        columns[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
    return pa.table(columns)


def _single_entries(run_id: int) -> Select[Any]:
    return (
        select(LedgerEntry.billing_row_id.label("row_id"), *_labelled())
        .where(LedgerEntry.run_id == run_id, LedgerEntry.billing_row_id.is_not(None))
        .order_by(LedgerEntry.billing_row_id, *_ENTRY_ORDER)
    )


def _pooled_entries(run_id: int) -> Select[Any]:
    """Every pool's entries once per source row of the pool, by source row."""
    return (
        select(LedgerPoolRow.billing_row_id.label("row_id"), *_labelled())
        .join(
            LedgerPoolRow,
            (LedgerPoolRow.run_id == LedgerEntry.run_id)
            & (LedgerPoolRow.pool_id == LedgerEntry.pool_id),
        )
        .where(LedgerEntry.run_id == run_id, LedgerEntry.billing_row_id.is_(None))
        .order_by(LedgerPoolRow.billing_row_id, *_ENTRY_ORDER)
    )


_ENTRY_ORDER = (LedgerEntry.kind, LedgerEntry.event_id, LedgerEntry.team, LedgerEntry.session_id)
"""Within a source row, entries in an order of their data: one entry per (kind, request) or
(kind, team), so the order is total and the same from either store (ids are not: the
plan's output order is not fixed)."""


def _adjustments(run_id: int, team: str | None) -> Select[*tuple[Any, ...]]:
    """The run's adjustments (no source row, no pool), in an order of their data."""
    return (
        select(
            type_coerce(LedgerEntry.method, String).label("method"),
            LedgerEntry.charge_period_start,
            LedgerEntry.charge_period_end,
            LedgerEntry.corrects_month,
            LedgerEntry.currency,
            LedgerEntry.billed_cost_micros,
            LedgerEntry.effective_cost_micros,
            LedgerEntry.billed_cost_residual_picos,
            LedgerEntry.effective_cost_residual_picos,
            LedgerEntry.deployment,
            LedgerEntry.team,
            LedgerEntry.session_id,
        )
        .where(
            LedgerEntry.run_id == run_id,
            LedgerEntry.billing_row_id.is_(None),
            LedgerEntry.pool_id.is_(None),
            *([LedgerEntry.team == team] if team is not None else []),
        )
        .order_by(
            LedgerEntry.corrects_month,
            LedgerEntry.method,
            LedgerEntry.currency,
            LedgerEntry.deployment,
            LedgerEntry.team,
            LedgerEntry.session_id,
        )
    )


def _labelled() -> list[Any]:
    return [column.label(name) for name, column in _ENTRY_COLUMNS.items()]


def _entry_batches(reader: EntryReader, query: Select[Any]) -> Iterator[pa.Table]:
    """The query's rows as Arrow tables of up to FOCUS_BATCH_ROWS rows."""
    return reader.batches(query, FOCUS_BATCH_ROWS, _ENTRY_TYPES)


def _by_source_row(reader: EntryReader, query: Select[Any]) -> Iterator[tuple[int, pa.Table]]:
    """The entries of each source row (the query is ordered by it), row by row."""
    held: list[pa.Table] = []
    for batch in _entry_batches(reader, query):
        row_ids = batch["row_id"].to_numpy()
        bounds = np.flatnonzero(np.diff(row_ids)) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), len(row_ids)]
        for start, end in zip(starts, ends, strict=True):
            piece = batch.slice(start, end - start)
            if held and held[0]["row_id"][0].as_py() != row_ids[start]:
                yield held[0]["row_id"][0].as_py(), pa.concat_tables(held)
                held = []
            held.append(piece)
    if held:
        yield held[0]["row_id"][0].as_py(), pa.concat_tables(held)


@dataclass(frozen=True, slots=True)
class _Shares:
    """The shares of one origin charge: entries, amounts (in :data:`_AMOUNTS` order), and the
    columns computed per origin (AllocatedRatio text, the split quantities)."""

    entries: pa.Table
    amounts: list[pa.Array]
    computed: dict[str, pa.Array]


def _origin_shares(
    row: BillingRow, entries: pa.Table, *, pooled: bool, team: str | None
) -> _Shares:
    """One source row's shares: a pooled row split across its pool's entries in every basis
    by the entries' GPU-ns (evenly when none has any), a row split alone with the amounts the
    plan gave its entries; then its quantities split and its ratios computed by the same
    weights, and ``team``'s shares kept."""
    gpu_ns = entries["gpu_ns"].to_numpy(zero_copy_only=False).astype(np.int64)
    if pooled:
        weights = gpu_ns if gpu_ns.any() else np.ones(len(gpu_ns), np.int64)
        # Micros and residual split alike by the same weights: the shares' exact amounts
        # sum to the row's exactly.
        amounts = [
            _exact_money(
                pa.array(split_array_by_weight(micros or 0, weights)),
                pa.array(split_array_by_weight(residual, weights)),
            )
            for micros, residual in (
                (row.billed_cost_micros, row.billed_cost_residual_picos),
                (row.effective_cost_micros, row.effective_cost_residual_picos),
                (row.list_cost_micros, row.list_cost_residual_picos),
                (row.contracted_cost_micros, row.contracted_cost_residual_picos),
            )
        ]
    else:
        micros = [_flat(entries[f"{name}_micros"]) for name in _AMOUNTS]
        amounts = [
            _exact_money(m, _flat(entries[residual_column(name)]))
            for m, name in zip(micros, _AMOUNTS, strict=True)
        ]
        by_basis = [micros[i].fill_null(0).to_numpy(zero_copy_only=False) for i in (1, 0, 2, 3)]
        weights = split_weights(by_basis, gpu_ns)
    computed = {
        "x_AllocatedRatio": units_text(split_units_array(10**RATIO_DIGITS, weights), RATIO_DIGITS)
    }
    source = _source_columns(row)
    for name in SUMMABLE_DECIMALS:
        total = source.get(name)
        computed[name] = (
            pa.nulls(len(weights), pa.string())
            if total is None
            else units_text(*split_quantity_units(Decimal(total), weights))
        )
    if team is not None:
        keep = pc.fill_null(pc.equal(entries["team"], team), False).combine_chunks()
        entries = entries.filter(keep)
        amounts = [amount.filter(keep) for amount in amounts]
        computed = {name: column.filter(keep) for name, column in computed.items()}
    return _Shares(entries, amounts, computed)


def units_text(units: np.ndarray, digits: int) -> pa.Array:
    """Integers in units of ``10**-digits`` as FOCUS numeric text with exactly ``digits``
    decimals (``decimal_text(Decimal(u).scaleb(-digits))``), by Arrow compute, not a Python
    step per value; integers beyond int64 take the Decimal path."""
    if units.dtype != np.int64 or (units == np.iinfo(np.int64).min).any():
        with localcontext() as exact:  # the default 28 significant digits would round
            exact.prec = 200
            texts = [decimal_text(Decimal(int(u)).scaleb(-digits)) for u in units]
        return pa.array(texts, pa.string())
    magnitude = np.abs(units)
    if digits == 0:
        text = pc.cast(pa.array(magnitude), pa.string())
    else:
        scale = 10**digits
        whole = pc.cast(pa.array(magnitude // scale), pa.string())
        fraction = pc.utf8_lpad(pc.cast(pa.array(magnitude % scale), pa.string()), digits, "0")
        text = pc.binary_join_element_wise(whole, fraction, ".")
    return pc.if_else(pa.array(units < 0), pc.binary_join_element_wise("-", text, ""), text)


# Writing: a batch of entries and their amounts as FOCUS columns.


class _ShareBatches:
    """Turns entries (with their source row ids) and amounts into FOCUS record batches."""

    def __init__(self, source_table: pa.Table, schema: pa.Schema, run_id: int) -> None:
        self.sources = source_table
        self.schema = schema
        self.run_id = run_id

    def of_many(self, parts: Sequence[_Shares]) -> pa.RecordBatch:
        """One batch of the shares of several origin charges."""
        entries = pa.concat_tables([part.entries for part in parts])
        amounts = [pa.concat_arrays([p.amounts[i] for p in parts]) for i in range(len(_AMOUNTS))]
        per_origin = {
            name: pa.concat_arrays([p.computed[name] for p in parts]) for name in parts[0].computed
        }
        return self.of(entries, amounts, per_origin)

    def of(
        self,
        entries: pa.Table,
        amounts: Sequence[pa.Array | pa.ChunkedArray],
        per_origin: dict[str, pa.Array],
    ) -> pa.RecordBatch:
        positions = pc.index_in(entries["row_id"], value_set=self.sources["row_id"])
        source = self.sources.take(positions)
        computed = {
            **dict(zip(_SHARE_COLUMNS[:4], amounts, strict=True)),
            **_allocation_columns(entries, self.run_id, per_origin["x_AllocatedRatio"]),
            **{name: per_origin[name] for name in SUMMABLE_DECIMALS},
            "x_SourceBillingRowId": entries["row_id"],
        }
        n = entries.num_rows
        columns = []
        for field in self.schema:
            if field.name in computed:
                column = computed[field.name]
            elif field.name in source.column_names:
                column = source[field.name]
            else:
                column = pa.nulls(n, field.type)
            columns.append(_flat(column).cast(field.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _allocation_columns(entries: pa.Table, run_id: int, ratios: pa.Array) -> dict[str, pa.Array]:
    """AllocatedMethodId / Details / ResourceId / ResourceName / Tags of each entry; all null
    on an unallocated row's share (not a split: the row as billed).

    The details and tags are the JSON that ``json.dumps`` writes (same keys, order and
    separators), built by concatenation: entry kinds and methods are plain identifiers and
    the text values are JSON-quoted once per distinct value. ``ratios`` are the entries'
    AllocatedRatio as decimal text; a GPU-seconds method's element also names the unit and
    quantity its ratio came from (the share's GPU-seconds)."""
    kind, method = entries["kind"], entries["method"]
    allocated = pc.not_equal(kind, EntryKind.unallocated.value)
    method_id = pc.binary_join_element_wise(
        "specledger:",
        pc.replace_substring(pc.replace_substring(method, "_", "-"), ":", "/"),
        "",
    )
    levels = pc.if_else(pc.ends_with(method, _TWO_LEVEL_SUFFIX), _TWO_LEVEL, "")
    by_gpu_seconds = pc.or_(
        pc.starts_with(method, "gpu_seconds"), pc.starts_with(method, "proportional")
    )
    usage = pc.if_else(
        by_gpu_seconds,
        pc.binary_join_element_wise(
            ', "UsageUnit": "GPU-Seconds", "UsageQuantity": ', _seconds_text(entries["gpu_ns"]), ""
        ),
        "",
    )
    details = pc.binary_join_element_wise(
        '{"Elements": [{"AllocatedRatio": ',
        ratios,
        usage,
        '}], "x_Kind": "',
        kind,
        '", "x_BasisGpuNanoseconds": ',
        pc.cast(entries["gpu_ns"], pa.string()),
        f', "x_AllocationRunId": {run_id}, "x_PoolId": ',
        pc.fill_null(pc.cast(entries["pool_id"], pa.string()), "null"),
        levels,
        "}",
        "",
    )
    idle = pc.binary_join_element_wise("idle:", pc.fill_null(entries["deployment"], "None"), "")
    resource = pc.coalesce(
        entries["event_id"], pc.if_else(pc.equal(kind, EntryKind.idle.value), idle, None)
    )
    no_text = pa.scalar(None, pa.string())
    return {
        "AllocatedMethodId": pc.if_else(allocated, method_id, no_text),
        "AllocatedMethodDetails": pc.if_else(allocated, details, no_text),
        "AllocatedResourceId": pc.if_else(allocated, resource, no_text),
        "AllocatedResourceName": pc.if_else(allocated, entries["session_id"], no_text),
        "AllocatedTags": pc.if_else(allocated, _tags_json(entries), no_text),
    }


def _seconds_text(nanoseconds: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Non-negative integer nanoseconds as exact decimal seconds text (``12.000000345``)."""
    digits = pc.utf8_lpad(pc.cast(_flat(nanoseconds).fill_null(0), pa.string()), 10, "0")
    whole = pc.utf8_slice_codeunits(digits, 0, -9)
    return pc.binary_join_element_wise(whole, pc.utf8_slice_codeunits(digits, -9), ".")


def _tags_json(entries: pa.Table) -> pa.Array:
    """``{"team": .., "session": .., "deployment": ..}`` without the keys whose value is
    null, as ``json.dumps`` writes it."""
    pieces = []
    for key, column in (("team", "team"), ("session", "session_id"), ("deployment", "deployment")):
        quoted = _json_strings(entries[column])
        pieces.append(pc.fill_null(pc.binary_join_element_wise(f'"{key}": ', quoted, ", ", ""), ""))
    body = pc.utf8_rtrim(pc.binary_join_element_wise(*pieces, ""), characters=", ")
    return pc.binary_join_element_wise("{", body, "}", "")


def _json_strings(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each text value as a JSON string literal (``json.dumps``), computed per distinct
    value; null stays null."""
    encoded = pc.dictionary_encode(_flat(column))
    literals = pa.array([json.dumps(v) for v in encoded.dictionary.to_pylist()], pa.string())
    return pc.take(literals, encoded.indices)


def _flat(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _money(micros: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Integer micros as exact decimal128(38, 6): the micros are the unscaled value, written
    as the low word with its sign extended into the high word."""
    values = _flat(micros).cast(pa.int64()).fill_null(0).to_numpy()
    words = np.empty(2 * len(values), np.int64)
    words[0::2] = values
    words[1::2] = values >> 63
    return pa.Array.from_buffers(MONEY, len(values), [None, pa.py_buffer(words)])


def _exact_money(
    micros: pa.Array | pa.ChunkedArray, residual: pa.Array | pa.ChunkedArray
) -> pa.Array:
    """Micros and residual picos as one exact decimal128(38, 12) (nulls as 0)."""
    values = _flat(residual).cast(pa.int64()).fill_null(0).to_numpy()
    words = np.empty(2 * len(values), np.int64)
    words[0::2] = values
    words[1::2] = values >> 63
    # Amounts are below 2**63 micros: 37 digits leave Arrow the one it adds to a sum.
    narrow = pa.decimal128(37, 12)
    picos = pa.Array.from_buffers(narrow, len(values), [None, pa.py_buffer(words)])
    return pc.add(_money(micros).cast(narrow), picos).cast(FOCUS_MONEY)


def _payer_of(session: Session, run_id: int, sources: dict[int, BillingRow]) -> dict[str, Any]:
    """The payer columns for adjustment rows: those of the first source row split alone, else
    of the first pooled one."""
    first_single = session.scalar(
        select(func.min(LedgerRollup.billing_row_id)).where(LedgerRollup.run_id == run_id)
    )
    row = sources.get(first_single or 0) or next(iter(sources.values()), None)
    return _payer_columns(row) if row is not None else {}


def _focus_time(value: datetime) -> str:
    return f"{value:%Y-%m-%dT%H:%M:%SZ}"


def _allocated_tags(entry: Mapping[str, Any]) -> str:
    return json.dumps(
        {
            k: v
            for k, v in {
                "team": entry["team"],
                "session": entry["session_id"],
                "deployment": entry["deployment"],
            }.items()
            if v is not None
        }
    )


_PAYER_COLUMNS = (
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "InvoiceIssuerName",
    "ProviderName",
    "PublisherName",
    "ServiceProviderName",
    "HostProviderName",
)


def _payer_columns(row: BillingRow) -> dict[str, Any]:
    source = _source_columns(row)
    return {name: source.get(name) for name in _PAYER_COLUMNS if source.get(name) is not None}


def _adjustment_row(
    entry: Mapping[str, Any], month: Month, payer: dict[str, Any]
) -> dict[str, Any]:
    """A restatement booked in ``month`` (an adjustment entry's columns): the change to a
    closed month's allocation after its billing was re-delivered. List and contracted cost
    are not restated (zero)."""
    start, end = month.start, month.end
    adjusted_kind = AllocationMethod(entry["method"]).restated_kind
    charge_start, charge_end = entry["charge_period_start"], entry["charge_period_end"]
    return {
        **payer,
        "BillingPeriodStart": _focus_time(start),
        "BillingPeriodEnd": _focus_time(end),
        "ChargePeriodStart": _focus_time(charge_start) if charge_start else None,
        "ChargePeriodEnd": _focus_time(charge_end) if charge_end else None,
        "ChargeCategory": "Adjustment",
        "ChargeClass": "Correction",
        "ChargeDescription": f"SpecLedger restatement of {entry['corrects_month']} "
        f"({adjusted_kind} share) after its billing was re-delivered",
        "BillingCurrency": entry["currency"],
        "BilledCost": picos_to_decimal(
            exact_picos(entry["billed_cost_micros"], entry["billed_cost_residual_picos"])
        ),
        "EffectiveCost": picos_to_decimal(
            exact_picos(entry["effective_cost_micros"], entry["effective_cost_residual_picos"])
        ),
        "ListCost": Decimal(0),
        "ContractedCost": Decimal(0),
        "AllocatedMethodId": "specledger:restatement",
        # Not a share of an origin charge in this file (it corrects shares of a closed
        # month's), so it has no AllocatedRatio: the details are null (the text's SHOULD
        # NOT), the kind is in ChargeDescription and the month in x_CorrectsMonth.
        "AllocatedMethodDetails": None,
        "AllocatedResourceId": f"idle:{entry['deployment']}"
        if adjusted_kind is EntryKind.idle
        else None,
        "AllocatedResourceName": entry["session_id"],
        "AllocatedTags": _allocated_tags(entry),
        "x_CorrectsMonth": entry["corrects_month"],
    }


def _source_columns(row: BillingRow) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for db_name, focus_name in FOCUS_OF_DB.items():
        value = getattr(row, db_name)
        if isinstance(value, datetime):
            value = _focus_time(value)
        elif focus_name == "Tags":
            value = json.dumps(value) if value is not None else None
        record[focus_name] = value
    for name, value in {**row.focus_columns, **row.provider_columns}.items():
        record[name] = value if isinstance(value, str) or value is None else json.dumps(value)
    provider = record.get("ProviderName")
    record.setdefault("ServiceProviderName", provider)
    record.setdefault("HostProviderName", provider)
    # 1.3 keeps the deprecated PublisherName mandatory; its successor is ServiceProviderName.
    if record.get("PublisherName") is None:
        record["PublisherName"] = record["ServiceProviderName"]
    return record


def _focus_schema(names: list[str]) -> pa.Schema:
    """FOCUS columns first, then ``x_`` ones, each by name; money as exact decimals."""
    money = {"BilledCost", "EffectiveCost", "ListCost", "ContractedCost"}

    def type_of(name: str) -> pa.DataType:
        if name in money:
            return FOCUS_MONEY
        return pa.int64() if name == "x_SourceBillingRowId" else pa.string()

    ordered = sorted(names, key=lambda n: (n.startswith("x_"), n))
    return pa.schema([(name, type_of(name)) for name in ordered])


def _record_batch(records: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    columns = []
    for field in schema:
        values = [r.get(field.name) for r in records]
        if pa.types.is_string(field.type):
            values = [None if v is None else str(v) for v in values]
        columns.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
