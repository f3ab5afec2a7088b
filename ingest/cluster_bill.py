"""The I/O side of a Slurm cluster's cost model: read the TOML file, write the derived FOCUS
bill that ``ingest.service.ingest_billing`` reads like any other (see
``app.slurm.rules.cluster_cost`` for the model, the rounding rule and the columns).
"""

import csv
import gzip
import io
import os
import tempfile
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO

from app.slurm.rules.cluster_cost import (
    FOCUS_COLUMNS,
    ClusterCostModel,
    CostModelError,
    CostWindowError,
    cost_model_from_dict,
    iter_derived_rows,
)


def load_cost_model(path: Path) -> ClusterCostModel:
    """Read and validate a cost model file. TOML numbers are read as exact decimals, so
    ``pue = 1.3`` means 1.3; the rows name the file by its base name.

    Raises:
        CostModelError: If the file cannot be read, is not TOML or is not a valid model; the
            message starts with the file's path.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CostModelError("", f"cannot be read: {exc}", file=str(path)) from None
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise CostModelError("", f"not valid TOML: {exc}", file=str(path)) from None
    try:
        return cost_model_from_dict(data, source=path.name)
    except CostModelError as exc:
        raise CostModelError(exc.path, exc.reason, file=str(path)) from None


def write_derived_bill(model: ClusterCostModel, start: datetime, end: datetime, out: Path) -> int:
    """Write the derived FOCUS 1.2 bill of ``[start, end)`` (whole UTC hours) as CSV, gzipped
    when ``out`` ends with ``.gz``; returns the rows written. Rows are streamed, not held.

    The file appears whole or not at all (written aside, then renamed), and the same model
    and window always give the same bytes (the gzip header carries no time or name), so
    ingesting it again is recognised as unchanged. Ingest replaces a source's billing period
    as a whole: write whole months.

    Raises:
        CostWindowError: If the window is not whole UTC hours, or no node of the model is in
            service in it (the ingest refuses a file without rows); then no file is written.
    """
    rows = iter_derived_rows(model, start, end)
    first = next(rows, None)
    if first is None:
        raise CostWindowError(
            f"cluster {model.cluster}: no on-premises node is in service between "
            f"{start.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ} and "
            f"{end.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}; nothing to bill"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        os.fchmod(handle, 0o644)  # mkstemp's 0600 would hide the bill from other readers
        with os.fdopen(handle, "wb") as file:
            count = _write_csv(file, first, rows, gzipped=out.name.lower().endswith(".gz"))
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return count


def _write_csv(
    file: BinaryIO, first: dict[str, str], rest: Iterator[dict[str, str]], *, gzipped: bool
) -> int:
    if not gzipped:
        return _write_rows(file, first, rest)
    with gzip.GzipFile(filename="", mode="wb", fileobj=file, mtime=0) as zipped:
        return _write_rows(zipped, first, rest)


def _write_rows(
    binary: BinaryIO | gzip.GzipFile, first: dict[str, str], rest: Iterator[dict[str, str]]
) -> int:
    text = io.TextIOWrapper(binary, encoding="utf-8", newline="")
    try:
        writer = csv.DictWriter(text, fieldnames=FOCUS_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerow(first)
        count = 1
        for row in rest:
            writer.writerow(row)
            count += 1
        text.flush()
        return count
    finally:
        text.detach()  # the caller closes the binary stream
