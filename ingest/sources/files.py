"""Billing from local files: one file, or every billing file in a folder (recursively)."""

from datetime import UTC, datetime
from pathlib import Path

from ingest.errors import IngestError, Problem
from ingest.readers import is_billing_file
from ingest.sources.base import SourceBatch, SourceFile, sha256_of


def discover_files(path: Path, *, source: str | None = None) -> SourceBatch:
    """All billing files at ``path``; the default source name is ``file:<absolute path>``.

    Raises:
        IngestError: If the path does not exist or holds no billing files.
    """
    if not path.exists():
        raise IngestError([Problem(str(path), "no such file or folder")])
    if path.is_dir():
        paths = sorted(p for p in path.rglob("*") if p.is_file() and is_billing_file(p))
        if not paths:
            raise IngestError(
                [Problem(str(path), "the folder holds no .csv, .csv.gz or .parquet files")]
            )
    else:
        paths = [path]
    files = tuple(
        SourceFile(p, str(p), sha256_of(p), datetime.fromtimestamp(p.stat().st_mtime, UTC))
        for p in paths
    )
    return SourceBatch(source or f"file:{path.resolve()}", files)
