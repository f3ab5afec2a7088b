"""Billing from local files: one file, or every billing file in a folder (recursively). A
folder that holds a copy of an AWS Data Export (``aws s3 sync``) is read like the bucket: only
the files listed by the newest manifest of each export and billing period."""

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

from ingest.errors import IngestError, Problem
from ingest.readers import is_billing_file
from ingest.sources.base import (
    MANIFEST_PATH,
    SourceBatch,
    SourceFile,
    manifest_entries,
    sha256_of,
)


@dataclass(frozen=True, slots=True)
class LocalExport:
    """What the manifests of a folder decide: one batch per export and billing period, and
    the billing files no newest manifest lists (older refreshes, strays), which are skipped."""

    batches: list[SourceBatch]
    skipped: list[Path]


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
    files = tuple(_source_file(p) for p in paths)
    return SourceBatch(source or f"file:{path.resolve()}", files)


def discover_local_export(path: Path, *, source: str | None = None) -> LocalExport | None:
    """The newest manifest's files of each export and billing period under the folder
    ``path``, or None when it holds no AWS Data Exports manifest. Newest: the latest
    modification time (``aws s3 sync`` keeps the object's), then the path.

    Raises:
        IngestError: If a manifest cannot be read or lists a file the folder lacks.
    """
    if not path.is_dir():
        return None
    newest: dict[tuple[str, str], tuple[float, str, Path]] = {}
    for candidate in path.rglob("*"):
        relative = candidate.relative_to(path).as_posix()
        match = MANIFEST_PATH.match(relative)
        if not candidate.is_file() or not match or match["name"].lower() != match["export"].lower():
            continue
        slot = (match["export_path"], match["period"])
        found = (candidate.stat().st_mtime, relative, candidate)
        if slot not in newest or found[:2] > newest[slot][:2]:
            newest[slot] = found
    if not newest:
        return None
    batches, listed = [], set()
    for (export_path, _), (mtime, _, manifest) in sorted(newest.items()):
        export = export_path.rsplit("/", 1)[-1]
        files = []
        for entry in manifest_entries(manifest.read_bytes(), str(manifest)):
            local = _local_copy(path / export_path, export, entry)
            if local is None or not local.is_file():
                raise IngestError(
                    [Problem(str(manifest), f"listed file {entry} is not in the folder")]
                )
            files.append(_source_file(local))
            listed.add(local.resolve())
        batches.append(
            SourceBatch(
                source or f"file:{(path / export_path).resolve()}",
                tuple(files),
                delivered_at=datetime.fromtimestamp(mtime, UTC),
                manifest=str(manifest),
            )
        )
    skipped = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and is_billing_file(p) and p.resolve() not in listed
    )
    return LocalExport(batches, skipped)


def _local_copy(export_root: Path, export: str, entry: str) -> Path | None:
    """Where a listed ``s3://bucket/.../<export>/data/...`` file is in the local copy."""
    key = urlparse(entry).path.lstrip("/") if entry.startswith("s3://") else entry
    marker = f"{export}/data/"
    if key.startswith(marker):
        at = 0
    else:
        at = key.find(f"/{marker}") + 1
        if at == 0:
            return None
    return export_root / key[at + len(export) + 1 :]


def _source_file(path: Path) -> SourceFile:
    return SourceFile(
        path, str(path), sha256_of(path), datetime.fromtimestamp(path.stat().st_mtime, UTC)
    )
