"""The sweep CSV: one row per (speculation config, concurrency level).

Required columns are :data:`REQUIRED_COLUMNS`; the sweep command writes more (requests/s,
TTFT and TPOT percentiles, GPU-seconds per 1K tokens), which are kept as measured metrics.
Rows are checked one by one, and a problem names the file, the data row (1-based, header not
counted), the column and the value, so a sweep measured elsewhere can be fixed by hand.

A row whose ``schedule`` column holds a batch-size schedule was measured with vLLM's dynamic
speculation: it is kept for comparison but not fitted (the fit needs one k per config).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv

from app.breakeven.rules.model import BASELINE_METHOD
from app.breakeven.rules.sweep import MIN_CONCURRENCY_LEVELS, SweepPoint
from app.domain.errors import Invalid

REQUIRED_COLUMNS = (
    "config", "method", "k", "concurrency", "output_tokens_per_s", "tpot_p50_s",
    "acceptance_rate", "mean_acceptance_length",
)  # fmt: skip
SCHEDULE_COLUMN = "schedule"
"""Optional: vLLM ``num_speculative_tokens_per_batch_size`` JSON the row was measured with."""
METRIC_COLUMNS = (
    "requests", "requests_per_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p90_s",
    "tpot_p99_s", "gpu_seconds_per_1k_tokens", "window_s", "errors", "other_servers",
)  # fmt: skip
"""Optional measured columns, in the order the sweep command writes them."""
CSV_COLUMNS = (*REQUIRED_COLUMNS, *METRIC_COLUMNS, SCHEDULE_COLUMN)


class SweepFileError(Invalid):
    """A sweep file that cannot be read or fitted; the message says where and why."""

    def __init__(
        self,
        path: Path | str,
        reason: str,
        *,
        row: int | None = None,
        column: str | None = None,
        value: object = None,
    ) -> None:
        where = [str(path)]
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column}")
        shown = f" (value {value!r})" if value is not None else ""
        super().__init__(f"{', '.join(where)}: {reason}{shown}")
        self.path, self.row, self.column = str(path), row, column


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepRow:
    """One row of a sweep file: the fitted point plus what else was measured."""

    point: SweepPoint
    requests_per_s: float | None = None
    metrics: dict[str, float | str | None] = field(default_factory=dict)
    """Optional columns (TTFT/TPOT percentiles, GPU-seconds per 1K tokens, ...)."""
    schedule: str | None = None

    def as_csv_row(self) -> dict[str, object]:
        """The row as the sweep CSV holds it (NaN and None become empty cells)."""
        p = self.point
        row: dict[str, object] = {
            "config": p.config, "method": p.method, "k": p.k, "concurrency": p.concurrency,
            "output_tokens_per_s": p.output_tokens_per_s, "tpot_p50_s": p.tpot_p50_s,
            "acceptance_rate": p.acceptance_rate,
            "mean_acceptance_length": p.mean_acceptance_length,
            "requests_per_s": self.requests_per_s,
        }  # fmt: skip
        for name in METRIC_COLUMNS:
            row.setdefault(name, self.metrics.get(name))
        row[SCHEDULE_COLUMN] = self.schedule
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepFile:
    """A read sweep: rows to fit, and rows measured with a dynamic schedule."""

    path: Path
    rows: tuple[SweepRow, ...]
    scheduled: tuple[SweepRow, ...]

    @property
    def points(self) -> list[SweepPoint]:
        """The rows the fit uses."""
        return [row.point for row in self.rows]


def _number(path: Path, row: int, column: str, raw: Any, *, required: bool) -> float:
    """A cell as a float; NaN when empty and not required."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        if required:
            raise SweepFileError(path, "value is missing", row=row, column=column)
        return math.nan
    if isinstance(raw, bool):
        raise SweepFileError(path, "expected a number", row=row, column=column, value=raw)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SweepFileError(path, "expected a number", row=row, column=column, value=raw) from None
    if math.isnan(value):
        if required:
            raise SweepFileError(path, "value is NaN", row=row, column=column)
        return math.nan
    if not math.isfinite(value):
        raise SweepFileError(path, "value is infinite", row=row, column=column, value=raw)
    return value


def _integer(path: Path, row: int, column: str, raw: Any, *, minimum: int) -> int:
    value = _number(path, row, column, raw, required=True)
    if value != int(value):
        raise SweepFileError(path, "expected a whole number", row=row, column=column, value=raw)
    if value < minimum:
        raise SweepFileError(path, f"must be >= {minimum}", row=row, column=column, value=raw)
    return int(value)


def _positive(path: Path, row: int, column: str, raw: Any) -> float:
    value = _number(path, row, column, raw, required=True)
    if value <= 0:
        reason = "is zero" if value == 0 else "is negative"
        raise SweepFileError(path, f"must be > 0 but {reason}", row=row, column=column, value=raw)
    return value


def _text(path: Path, row: int, column: str, raw: Any) -> str:
    if raw is None or not str(raw).strip():
        raise SweepFileError(path, "value is missing", row=row, column=column)
    return str(raw).strip()


def _acceptance(
    path: Path, row: int, cells: dict[str, Any], *, k: int, baseline: bool, optional: bool = False
) -> tuple[float, float]:
    rate = _number(path, row, "acceptance_rate", cells["acceptance_rate"], required=False)
    length = _number(
        path, row, "mean_acceptance_length", cells["mean_acceptance_length"], required=False
    )
    if baseline:
        return math.nan, math.nan  # a baseline drafts nothing; whatever is there is ignored
    if math.isnan(rate) and math.isnan(length) and not optional:
        raise SweepFileError(
            path,
            "a speculative row needs mean_acceptance_length or "
            "acceptance_rate; both are missing or NaN",
            row=row,
            column="mean_acceptance_length",
        )
    if not math.isnan(rate) and not 0.0 <= rate <= 1.0:
        raise SweepFileError(
            path,
            "must lie in [0, 1] (accepted / drafted tokens)",
            row=row,
            column="acceptance_rate",
            value=cells["acceptance_rate"],
        )
    if not math.isnan(length) and not 1.0 <= length <= k + 1 + 1e-6:
        raise SweepFileError(
            path,
            f"must lie in [1, k+1] = [1, {k + 1}] (tokens per step, bonus token included)",
            row=row,
            column="mean_acceptance_length",
            value=cells["mean_acceptance_length"],
        )
    return rate, length


def _parse_row(path: Path, row: int, cells: dict[str, Any], extra: Sequence[str]) -> SweepRow:
    config = _text(path, row, "config", cells["config"])
    method = _text(path, row, "method", cells["method"]).lower()
    baseline = method == BASELINE_METHOD
    k = _integer(path, row, "k", cells["k"], minimum=0)
    if not baseline and k < 1:
        raise SweepFileError(
            path,
            f"method {method!r} speculates, so k must be >= 1",
            row=row,
            column="k",
            value=cells["k"],
        )
    concurrency = _integer(path, row, "concurrency", cells["concurrency"], minimum=1)
    rate = _positive(path, row, "output_tokens_per_s", cells["output_tokens_per_s"])
    tpot = _positive(path, row, "tpot_p50_s", cells["tpot_p50_s"])
    schedule_raw = cells.get(SCHEDULE_COLUMN)
    schedule = str(schedule_raw).strip() if schedule_raw not in (None, "") else None
    # A scheduled row is compared, not fitted: it may have drafted nothing (k=0 at its load,
    # or every request routed to a plain replica).
    acceptance_rate, length = _acceptance(
        path, row, cells, k=k, baseline=baseline, optional=schedule is not None
    )
    metrics: dict[str, float | str | None] = {}
    requests_per_s = None
    for name in extra:
        raw = cells.get(name)
        if name == SCHEDULE_COLUMN:
            continue
        try:
            value = _number(path, row, name, raw, required=False)
        except SweepFileError:
            metrics[name] = str(raw)
            continue
        if name == "requests_per_s":
            requests_per_s = None if math.isnan(value) else value
        else:
            metrics[name] = None if math.isnan(value) else value
    point = SweepPoint(
        config=config,
        method=method,
        k=k,
        concurrency=concurrency,
        output_tokens_per_s=rate,
        tpot_p50_s=tpot,
        acceptance_rate=acceptance_rate,
        mean_acceptance_length=length,
    )
    return SweepRow(
        point=point, requests_per_s=requests_per_s, metrics=metrics, schedule=schedule or None
    )


def _read_table(path: Path) -> pa.Table:
    if not path.is_file():
        raise SweepFileError(path, "no such file")
    try:
        return pa_csv.read_csv(
            path, convert_options=pa_csv.ConvertOptions(strings_can_be_null=True, null_values=[""])
        )
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as exc:
        raise SweepFileError(path, f"not a readable CSV file: {exc}") from None


def _check_sweep_shape(path: Path, rows: Sequence[SweepRow]) -> None:
    """The two sweep-level problems with a precise column: no baseline, too few levels."""
    if not rows:
        raise SweepFileError(path, "the file has no sweep rows to fit")
    if not any(r.point.method == BASELINE_METHOD for r in rows):
        configs = sorted({r.point.config for r in rows})
        raise SweepFileError(
            path,
            f"missing baseline: no row has method "
            f"{BASELINE_METHOD!r} (configs: {', '.join(configs)})",
            column="method",
        )
    by_config: dict[str, list[int]] = {}
    levels: dict[str, set[int]] = {}
    for number, r in enumerate(rows, start=1):
        by_config.setdefault(r.point.config, []).append(number)
        levels.setdefault(r.point.config, set()).add(r.point.concurrency)
    for config, seen in levels.items():
        if len(seen) < MIN_CONCURRENCY_LEVELS:
            numbers = ", ".join(str(n) for n in by_config[config])
            raise SweepFileError(
                path,
                f"config {config!r} (rows {numbers}) has {len(seen)} concurrency "
                f"level(s) ({', '.join(str(c) for c in sorted(seen))}); at least "
                f"{MIN_CONCURRENCY_LEVELS} are needed to fit a curve",
                column="concurrency",
            )


def read_sweep_file(path: Path) -> SweepFile:
    """Read and check a sweep CSV.

    Args:
        path: The CSV file.

    Returns:
        The rows to fit and the rows measured with a dynamic schedule.

    Raises:
        SweepFileError: If the file is missing or unreadable, a required column is absent, or a
            value is missing, NaN, infinite, zero or negative where it must be positive, or out
            of range; if there is no baseline or a config has fewer than three levels.
    """
    table = _read_table(path)
    names = table.column_names
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise SweepFileError(
            path,
            f"missing required column(s): {', '.join(missing)} "
            f"(required: {', '.join(REQUIRED_COLUMNS)})",
        )
    extra = [c for c in names if c not in REQUIRED_COLUMNS]
    columns = {name: table.column(name).to_pylist() for name in names}
    fitted: list[SweepRow] = []
    scheduled: list[SweepRow] = []
    for index in range(table.num_rows):
        cells = {name: values[index] for name, values in columns.items()}
        parsed = _parse_row(path, index + 1, cells, extra)
        (scheduled if parsed.schedule else fitted).append(parsed)
    _check_sweep_shape(path, fitted)
    return SweepFile(path=path, rows=tuple(fitted), scheduled=tuple(scheduled))


def write_sweep_file(path: Path, rows: Sequence[SweepRow]) -> Path:
    """Write sweep rows as CSV with :data:`CSV_COLUMNS` (empty cells for unmeasured values).

    Returns:
        The path written.
    """
    data = [row.as_csv_row() for row in rows]
    types = {name: pa.float64() for name in CSV_COLUMNS}
    types.update(
        config=pa.string(),
        method=pa.string(),
        k=pa.int64(),
        concurrency=pa.int64(),
        schedule=pa.string(),
    )
    table = pa.table(
        {name: pa.array([d.get(name) for d in data], type=types[name]) for name in CSV_COLUMNS}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pa_csv.write_csv(table, path, write_options=pa_csv.WriteOptions(quoting_style="needed"))
    return path
