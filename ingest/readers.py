"""Read one billing file (CSV, CSV.gz or Parquet) into an Arrow table, without type guessing.

CSV cells arrive as text exactly as written, so that money never passes through a float.
"""

import gzip
import zlib
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
    except (OSError, pa.ArrowInvalid, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        reason = "cannot be read (truncated or corrupt"
        reason += " gzip" if path.name.lower().endswith(".gz") else " file"
        raise IngestError([Problem(name, f"{reason}): {exc}")]) from exc
    if raw.table.num_rows == 0:
        raise IngestError([Problem(name, "the file has no data rows")])
    return raw


def _read_csv(path: Path, name: str) -> RawFile:
    source: Path | pa.Buffer = path
    if path.name.lower().endswith(".gz"):
        # Arrow stops quietly at the end of a truncated gzip stream; Python's gzip raises
        # (EOFError / BadGzipFile), so decompress with it and let Arrow parse the bytes.
        with gzip.open(path, "rb") as handle:
            source = pa.py_buffer(handle.read())
    with pa.input_stream(source) as stream:
        had_bom = stream.read(3) == _BOM
    names = _header(source)
    if len(set(names)) != len(names):
        duplicated = sorted({n for n in names if names.count(n) > 1})
        raise IngestError([Problem(name, f"duplicate column names: {', '.join(duplicated)}")])
    table = pacsv.read_csv(
        pa.BufferReader(source) if isinstance(source, pa.Buffer) else source,
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


def _header(source: Path | pa.Buffer) -> list[str]:
    reader = pacsv.open_csv(
        pa.BufferReader(source) if isinstance(source, pa.Buffer) else source,
        read_options=pacsv.ReadOptions(block_size=1 << 16),
        convert_options=pacsv.ConvertOptions(strings_can_be_null=False, null_values=[]),
    )
    try:
        return list(reader.schema.names)
    finally:
        reader.close()
