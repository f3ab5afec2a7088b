"""Turn a raw billing file into rows shaped like the stored billing rows: per-row values,
and the distinct combinations of everything else (see ``app.models.billing``).

Validates the FOCUS header (mandatory columns for the file's version), normalises every
cell (each distinct attribute combination once), counts repairs in rows, and either rejects
the file (strict) or drops the bad rows (lenient).
"""

import difflib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.domain.focus import (
    BY_LOWER_NAME,
    BY_NAME,
    CONFORMANCE_NOT_NULL,
    CONFORMANCE_NOT_NULL_ON_USAGE,
    MANDATORY,
    NEVER_DEFAULTED,
    NOT_NULL,
    ROW_VALUE_FOCUS_COLUMNS,
    TYPED_COLUMNS,
    Kind,
    detect_version,
)
from app.domain.money import residual_column
from ingest.attributes import distinct_rows
from ingest.columns import (
    EXACT_TYPE,
    ColumnResult,
    json_fragments,
    json_objects,
    maps_to_json_text,
    micros_and_residuals,
    normalise_column,
)
from ingest.errors import IngestError, Problem
from ingest.readers import RawFile
from ingest.report import FIRST_ROWS, ConformanceWarning


@dataclass(frozen=True, slots=True)
class NormaliseOptions:
    focus_version: str | None = None
    """Validate against this FOCUS version; None detects it from the columns present."""
    allow_missing_columns: bool = False
    lenient: bool = False


@dataclass
class NormalisedFile:
    name: str
    focus_version: str
    values: pa.Table
    """``VALUE_COLUMNS`` and ``attributes_index`` (a row of ``attributes``); one row per kept
    input row."""
    attributes: pa.Table
    """``ATTRIBUTE_COLUMNS``: the distinct combinations of the rows' other columns."""
    repairs: Counter[str] = field(default_factory=Counter)
    rejected: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    conformance: list[ConformanceWarning] = field(default_factory=list)


def normalise_file(
    raw: RawFile, options: NormaliseOptions, *, first_row: int = 1, count_header: bool = True
) -> NormalisedFile:
    """Validate and normalise one raw file, or a slice of its rows that starts at data row
    ``first_row`` (row numbers in the output and in problems count from there). What the
    header itself needed (BOM, column-name case, warnings) is counted if ``count_header``.

    Raises:
        IngestError: On a header problem, or (strict mode) on any cell that cannot be repaired.
    """
    out = NormalisedFile(raw.name, "", pa.table({}), pa.table({}))
    if raw.had_bom:
        out.repairs["byte_order_mark"] += 1
    focus, provider = _map_header(raw, out)
    if not count_header:
        out.repairs.clear()
        out.warnings.clear()
    out.focus_version = options.focus_version or detect_version(set(focus))
    _check_mandatory(raw.name, set(focus), out.focus_version, options, provider)

    length = raw.table.num_rows
    value_names = [name for name in focus if name in ROW_VALUE_FOCUS_COLUMNS]
    attribute_names = [name for name in focus if name not in ROW_VALUE_FOCUS_COLUMNS]
    distinct, attribute_index = distinct_rows(
        _maps_as_json(raw.table.select([focus[name] for name in attribute_names] + provider))
    )
    weights = np.bincount(attribute_index, minlength=distinct.num_rows)

    values = {
        name: normalise_column(BY_NAME[name], _array(raw.table, focus[name]))
        for name in value_names
    }
    attributes = {
        name: normalise_column(
            BY_NAME[name],
            _array(distinct, focus[name]),
            tags=name == "Tags",
            weights=weights,
        )
        for name in attribute_names
    }
    provider_results = {
        name: normalise_column(None, _array(distinct, name), weights=weights) for name in provider
    }

    rows_of = _RowsOf(attribute_index)
    problems = _cell_problems(raw.name, values, None) + _row_problems(raw.name, values, None)
    problems += _cell_problems(raw.name, attributes | provider_results, rows_of)
    problems += _row_problems(raw.name, attributes, rows_of)
    if first_row != 1:
        problems = [
            replace(p, row=None if p.row is None else p.row + first_row - 1) for p in problems
        ]
    out.conformance = _conformance(raw.name, values, attributes, rows_of, first_row)
    for result in (*values.values(), *attributes.values(), *provider_results.values()):
        out.repairs.update(result.repairs)
    bad = np.zeros(length, dtype=bool)
    if problems:
        problems.sort(key=lambda p: (p.row or 0, p.column or ""))
        if not options.lenient:
            raise IngestError(problems)
        out.rejected = problems
        bad[[p.row - first_row for p in problems if p.row is not None]] = True

    out.values = _value_table(values, length, first_row).append_column(
        "attributes_index", pa.array(attribute_index)
    )
    if bad.any():
        out.values = out.values.filter(pa.array(~bad))
    out.attributes = _attribute_table(attributes, provider_results, distinct.num_rows)
    return out


class _RowsOf:
    """The file rows (0-based) that share each distinct attribute combination."""

    def __init__(self, attribute_index: np.ndarray) -> None:
        self._index = attribute_index
        self._order: np.ndarray | None = None
        self._starts: np.ndarray | None = None

    def __call__(self, combination: int) -> np.ndarray:
        if self._order is None or self._starts is None:  # built on the first problem only
            self._order = np.argsort(self._index, kind="stable")
            self._starts = np.searchsorted(
                self._index[self._order], np.arange(int(self._index.max(initial=0)) + 2)
            )
        return self._order[self._starts[combination] : self._starts[combination + 1]]


def _maps_as_json(table: pa.Table) -> pa.Table:
    """Parquet map columns (AWS writes Tags that way) as JSON text, which can be compared."""
    for index, column in enumerate(table.columns):
        if pa.types.is_map(column.type):
            table = table.set_column(
                index, table.field(index).name, maps_to_json_text(column.combine_chunks())
            )
    return table


def _array(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _map_header(raw: RawFile, out: NormalisedFile) -> tuple[dict[str, str], list[str]]:
    """FOCUS name -> name in the file, and the provider (``x_`` or unknown) columns."""
    focus: dict[str, str] = {}
    provider: list[str] = []
    for name in raw.table.column_names:
        column = BY_NAME.get(name) or BY_LOWER_NAME.get(name.lower())
        if column is None:
            provider.append(name)
            if not name.startswith("x_"):
                out.warnings.append(
                    f"{raw.name}: column {name!r} is not FOCUS and has no x_ "
                    "prefix; kept with the provider columns"
                )
            continue
        if column.name in focus:
            raise IngestError(
                [
                    Problem(
                        raw.name,
                        "column appears twice (names differ only in case)",
                        column=column.name,
                    )
                ]
            )
        if column.name != name:
            out.repairs["column_name_case"] += 1
        focus[column.name] = name
    return focus, provider


def _check_mandatory(
    name: str,
    present: set[str],
    version: str,
    options: NormaliseOptions,
    others: list[str],
) -> None:
    mandatory = set(MANDATORY[version])
    if version == "1.3" and "ProviderName" in present:
        mandatory -= {"ServiceProviderName"}  # the deprecated 1.2 name still serves
    missing = sorted(mandatory - present)
    if "BillingPeriodStart" in missing:
        raise IngestError(
            [
                Problem(
                    name,
                    "missing mandatory column; it is needed to group rows by billing period",
                    column="BillingPeriodStart",
                )
            ]
        )
    never_null = [column for column in NEVER_DEFAULTED if column in missing]
    if missing and not options.allow_missing_columns:
        others_missing = [column for column in missing if column not in never_null]
        hints = [_never_defaulted_fix(column, others) for column in never_null]
        if others_missing:
            hints.append(
                "use --allow-missing-columns to read "
                + ("the others" if never_null else "them")
                + " as null"
            )
        raise IngestError(
            [
                Problem(
                    name,
                    f"missing mandatory FOCUS {version} columns: {', '.join(missing)} "
                    f"({'; '.join(hints)})",
                )
            ]
        )
    if never_null:
        raise IngestError(
            [
                Problem(
                    name,
                    "missing mandatory column, which --allow-missing-columns does not read as "
                    f"null: {_never_defaulted_fix(column, others)}",
                    column=column,
                )
                for column in never_null
            ]
        )


def _never_defaulted_fix(column: str, others: list[str]) -> str:
    """What to do about a missing cost or currency column, which is never defaulted."""
    what = (
        "the currency of every cost" if column == "BillingCurrency" else "a cost the ledger splits"
    )
    lowered = {other.lower(): other for other in others}
    close = difflib.get_close_matches(column.lower(), list(lowered), n=1, cutoff=0.75)
    fix = (
        f"rename the file's column {lowered[close[0]]!r} to {column}"
        if close
        else f"add a {column} column to the file"
    )
    return f"{column} holds {what} and is never read as null or 0: {fix}"


def _file_rows(positions: Iterable[int], rows_of: _RowsOf | None) -> Iterator[int]:
    """1-based file rows of result positions (rows, or distinct combinations)."""
    for position in positions:
        if rows_of is None:
            yield int(position) + 1
        else:
            yield from (int(row) + 1 for row in rows_of(int(position)))


def _cell_problems(
    file: str, results: dict[str, ColumnResult], rows_of: _RowsOf | None
) -> list[Problem]:
    return [
        Problem(file, reason, row=row, column=name, value=value)
        for name, result in results.items()
        for position, (reason, value) in result.bad_rows.items()
        for row in _file_rows([position], rows_of)
    ]


def _row_problems(
    file: str, results: dict[str, ColumnResult], rows_of: _RowsOf | None
) -> list[Problem]:
    problems = []
    for name in NOT_NULL:
        if name in results:
            already_bad = set(results[name].bad_rows)
            nulls = np.flatnonzero(pc.is_null(results[name].values).to_numpy(zero_copy_only=False))
            problems += [
                Problem(file, "must not be null", row=row, column=name)
                for row in _file_rows([int(r) for r in nulls if int(r) not in already_bad], rows_of)
            ]
    for start, end in (
        ("ChargePeriodStart", "ChargePeriodEnd"),
        ("BillingPeriodStart", "BillingPeriodEnd"),
    ):
        if start in results and end in results:
            backwards = pc.less_equal(results[end].values, results[start].values)
            positions = np.flatnonzero(
                pc.fill_null(backwards, False).to_numpy(zero_copy_only=False)
            )
            problems += [
                Problem(
                    file,
                    f"{end} must be after {start} (periods are half-open)",
                    row=row,
                    column=end,
                )
                for row in _file_rows(positions, rows_of)
            ]
    return problems


def _conformance(
    file: str,
    values: dict[str, ColumnResult],
    attributes: dict[str, ColumnResult],
    rows_of: _RowsOf,
    first_row: int,
) -> list[ConformanceWarning]:
    """Nulls the FOCUS text forbids in columns the ledger does not split: per column, how
    many rows and the first ones (file data rows, 1-based)."""
    found = []

    def warn(name: str, rule: str, rows: list[int]) -> None:
        if rows:
            rows = sorted(r + first_row - 1 for r in rows)
            found.append(ConformanceWarning(file, name, rule, len(rows), rows[:FIRST_ROWS]))

    for name in CONFORMANCE_NOT_NULL:
        if name in values:
            nulls = _nulls(values[name].values)
            warn(name, "must not be null", [int(r) + 1 for r in nulls])
        elif name in attributes:
            nulls = _nulls(attributes[name].values)
            warn(name, "must not be null", list(_file_rows(nulls, rows_of)))
    if "ChargeCategory" in attributes:
        category = attributes["ChargeCategory"].values
        usage = pc.is_in(category, pa.array(["Usage", "Purchase"]))
        if "ChargeClass" in attributes:
            usage = pc.and_(usage, pc.is_null(attributes["ChargeClass"].values))
        for name in CONFORMANCE_NOT_NULL_ON_USAGE:
            if name in attributes:
                bad = pc.and_(pc.fill_null(usage, False), pc.is_null(attributes[name].values))
                warn(
                    name,
                    "must not be null on a Usage or Purchase charge that is not a Correction",
                    list(_file_rows(np.flatnonzero(bad.to_numpy(zero_copy_only=False)), rows_of)),
                )
    return found


def _nulls(values: pa.Array) -> np.ndarray:
    return np.flatnonzero(pc.is_null(values).to_numpy(zero_copy_only=False))


def _value_table(results: dict[str, ColumnResult], length: int, first_row: int) -> pa.Table:
    columns: dict[str, pa.Array] = {
        "source_row": pa.array(np.arange(first_row, first_row + length, dtype=np.int32)),
    }
    for focus_name in ROW_VALUE_FOCUS_COLUMNS:
        name, values = TYPED_COLUMNS[focus_name], _typed(focus_name, results, length)
        if BY_NAME[focus_name].kind is Kind.money:
            columns[name], columns[residual_column(name)] = micros_and_residuals(values)
        else:
            columns[name] = values
    return pa.table(columns)


def _attribute_table(
    results: dict[str, ColumnResult], provider: dict[str, ColumnResult], length: int
) -> pa.Table:
    columns = {
        TYPED_COLUMNS[name]: _typed(name, results, length)
        for name in TYPED_COLUMNS
        if name not in ROW_VALUE_FOCUS_COLUMNS
    }
    if "ProviderName" not in results and "ServiceProviderName" in results:
        columns["provider_name"] = results["ServiceProviderName"].values
    extra = [
        (name, json_fragments(BY_NAME[name].kind, result.values))
        for name, result in results.items()
        if name not in TYPED_COLUMNS
    ]
    columns["focus_columns"] = json_objects(extra, length)
    columns["provider_columns"] = json_objects(
        [(name, result.values) for name, result in provider.items()], length
    )
    return pa.table(columns)


def _typed(focus_name: str, results: dict[str, ColumnResult], length: int) -> pa.Array:
    if focus_name in results:
        return results[focus_name].values
    return pa.nulls(length, _null_type(BY_NAME[focus_name].kind))


def _null_type(kind: Kind) -> pa.DataType:
    if kind is Kind.money:
        return EXACT_TYPE
    if kind is Kind.datetime:
        return pa.timestamp("us", tz="UTC")
    return pa.string()
