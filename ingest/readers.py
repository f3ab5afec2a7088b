"""Read one billing file (CSV, CSV.gz or Parquet) into an Arrow table, without type guessing.

CSV cells arrive as text exactly as written, so that money never passes through a float.
"""

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ingest.errors import IngestError, Problem

_BOM = b"\xef\xbb\xbf"
BILLING_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".snappy.parquet", ".gz.parquet")


@dataclass(frozen=True, slots=True)
class RawFile:
    """A file's cells as Arrow columns, with what the reader itself had to repair."""

    name: str
    table: pa.Table
    had_bom: bool


def is_billing_file(path: Path) -> bool:
    """Whether a file name looks like billing data this reader understands."""
    name = path.name.lower()
    return any(name.endswith(s) for s in BILLING_SUFFIXES)


def read_billing_file(path: Path, *, display_name: str | None = None) -> RawFile:
    """Read a billing file.

    Raises:
        IngestError: If the file is empty, truncated, corrupt or has no data rows.
    """
    name = display_name or str(path)
    if path.stat().st_size == 0:
        raise IngestError([Problem(name, "the file is empty")])
    try:
        if path.name.lower().endswith(".parquet"):
            raw = RawFile(name, pq.read_table(path), had_bom=False)
        else:
            raw = _read_csv(path, name)
    except (OSError, pa.ArrowInvalid) as exc:
        reason = "cannot be read (truncated or corrupt"
        reason += " gzip" if path.name.lower().endswith(".gz") else " file"
        raise IngestError([Problem(name, f"{reason}): {exc}")]) from exc
    if raw.table.num_rows == 0:
        raise IngestError([Problem(name, "the file has no data rows")])
    return raw


def _read_csv(path: Path, name: str) -> RawFile:
    # Arrow decompresses while it parses; it raises on a truncated or corrupt gzip stream
    # (pyarrow >= 26, which pyproject.toml requires; older releases stopped quietly).
    compression = "gzip" if path.name.lower().endswith(".gz") else None

    def stream() -> pa.NativeFile:
        return pa.input_stream(path, compression=compression)

    with stream() as head:
        had_bom = head.read(3) == _BOM
    names = _header(stream())
    if len(set(names)) != len(names):
        duplicated = sorted({n for n in names if names.count(n) > 1})
        raise IngestError([Problem(name, f"duplicate column names: {', '.join(duplicated)}")])
    table = pacsv.read_csv(
        stream(),
        read_options=pacsv.ReadOptions(block_size=1 << 24),
        convert_options=pacsv.ConvertOptions(
            column_types={n: pa.string() for n in names},
            # An unquoted empty field is CSV's null; a quoted "" is an empty string, which
            # FOCUS forbids, so it stays text and is counted as a repair later.
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            null_values=[""],
        ),
    )
    table = table.rename_columns([n.removeprefix("\ufeff").strip() for n in table.column_names])
    return RawFile(name, table, had_bom=had_bom)


def _header(source: pa.NativeFile) -> list[str]:
    reader = pacsv.open_csv(
        source,
        read_options=pacsv.ReadOptions(block_size=1 << 16),
        convert_options=pacsv.ConvertOptions(strings_can_be_null=False, null_values=[]),
    )
    try:
        return list(reader.schema.names)
    finally:
        reader.close()
        source.close()
