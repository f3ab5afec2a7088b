"""What a billing source hands to ingest: batches of local files, one batch per delivery."""

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ingest.errors import IngestError, Problem

MANIFEST_PATH = re.compile(
    r"^(?P<export_path>(?:.*/)?(?P<export>[^/]+))/metadata/billing_period=(?P<period>\d{4}-\d{2})"
    r"/(?:.*/)?(?P<name>[^/]+)-manifest\.json$",
    re.IGNORECASE,
)
"""Where AWS Data Exports writes a manifest: ``<export>/metadata/BILLING_PERIOD=YYYY-MM/...
/<export>-Manifest.json`` (the ``name`` must equal the ``export``)."""


def manifest_entries(body: bytes, where: str) -> list[str]:
    """The data files a manifest lists (``s3://`` URIs or keys).

    Raises:
        IngestError: If the manifest is not a JSON object or lists no files.
    """
    try:
        parsed = json.loads(body)
        listed = parsed.get("dataFiles") or parsed.get("reportKeys") or []
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
        raise IngestError([Problem(where, "the manifest is not a JSON object")]) from None
    if not listed:
        raise IngestError([Problem(where, "the manifest lists no dataFiles")])
    return [str(entry) for entry in listed]


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
