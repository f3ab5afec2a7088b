"""What a billing source hands to ingest: batches of local files, one batch per delivery."""

import hashlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: Path
    """Local path to read (S3 objects are downloaded first)."""
    name: str
    """Name shown to the user: the path or the s3:// URI."""
    sha256: str
    modified_at: datetime


@dataclass(frozen=True, slots=True)
class SourceBatch:
    """Files that together form the latest delivery of one source."""

    source: str
    files: tuple[SourceFile, ...]
    delivered_at: datetime | None = None
    """The delivery's own time (an S3 manifest's); None means the newest file's mtime."""
    manifest: str | None = None
    """The AWS Data Exports manifest (``s3://...``) that listed the files."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
