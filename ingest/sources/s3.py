"""Billing from AWS Data Exports in S3 (FOCUS 1.0/1.2 tables), read through the manifests.

Layout: ``<prefix>/<export>/data/BILLING_PERIOD=YYYY-MM/...`` with
``<prefix>/<export>/metadata/BILLING_PERIOD=YYYY-MM/<export>-Manifest.json``. A partition
folder can hold several refreshes, so the folder is never globbed: only the files listed by
the newest manifest of each billing period are read.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from ingest.errors import IngestError, Problem
from ingest.sources.base import MANIFEST_PATH, SourceBatch, SourceFile, manifest_entries, sha256_of

_MANIFEST = MANIFEST_PATH


@dataclass(frozen=True, slots=True)
class _Manifest:
    key: str
    export_path: str
    period: str
    last_modified: datetime


def discover_s3(
    uri: str, download_dir: Path, *, endpoint_url: str | None = None, source: str | None = None
) -> list[SourceBatch]:
    """Download the files of the newest manifest of each export and billing period.

    Uses boto3's standard credential chain; ``endpoint_url`` points at an S3-compatible server.

    Raises:
        IngestError: If the bucket cannot be read, no manifest is found, or a listed file
            is missing.
    """
    parsed = urlparse(uri)
    bucket, prefix = parsed.netloc, parsed.path.lstrip("/")
    client = boto3.client("s3", endpoint_url=endpoint_url)
    try:
        newest = _newest_manifests(client, bucket, prefix)
        if not newest:
            raise IngestError(
                [
                    Problem(
                        uri,
                        "no AWS Data Exports manifest "
                        "(<export>/metadata/BILLING_PERIOD=YYYY-MM/"
                        "<export>-Manifest.json) under this prefix",
                    )
                ]
            )
        return [_download(client, bucket, m, download_dir, source) for m in newest]
    except (ClientError, BotoCoreError) as exc:
        raise IngestError([Problem(uri, f"S3 request failed: {exc}")]) from exc


def _newest_manifests(client: Any, bucket: str, prefix: str) -> list[_Manifest]:
    newest: dict[tuple[str, str], _Manifest] = {}
    for item in _list(client, bucket, prefix):
        match = _MANIFEST.match(item["Key"])
        if not match or match["name"].lower() != match["export"].lower():
            continue
        found = _Manifest(item["Key"], match["export_path"], match["period"], item["LastModified"])
        slot = (found.export_path, found.period)
        if slot not in newest or (found.last_modified, found.key) > (
            newest[slot].last_modified,
            newest[slot].key,
        ):
            newest[slot] = found
    return [newest[slot] for slot in sorted(newest)]


def _list(client: Any, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", [])


def _download(
    client: Any, bucket: str, manifest: _Manifest, download_dir: Path, source: str | None
) -> SourceBatch:
    manifest_uri = f"s3://{bucket}/{manifest.key}"
    body = client.get_object(Bucket=bucket, Key=manifest.key)["Body"].read()
    listed = manifest_entries(body, manifest_uri)
    files = []
    target = download_dir / manifest.export_path / manifest.period
    target.mkdir(parents=True, exist_ok=True)
    for index, entry in enumerate(listed):
        key = urlparse(entry).path.lstrip("/") if entry.startswith("s3://") else entry
        file_bucket = urlparse(entry).netloc if entry.startswith("s3://") else bucket
        local = target / f"{index:05d}-{Path(key).name}"
        try:
            client.download_file(file_bucket, key, str(local))
        except ClientError as exc:
            raise IngestError(
                [
                    Problem(
                        manifest_uri, f"listed file s3://{file_bucket}/{key} cannot be read: {exc}"
                    )
                ]
            ) from exc
        files.append(
            SourceFile(local, f"s3://{file_bucket}/{key}", sha256_of(local), manifest.last_modified)
        )
    return SourceBatch(
        source or f"s3://{bucket}/{manifest.export_path}",
        tuple(files),
        delivered_at=manifest.last_modified,
        manifest=manifest_uri,
    )
