"""A folder or an S3 prefix that holds hive-partitioned Parquet datasets, written append-only.

One class for both: pyarrow's file systems (local, or S3 over HTTP with an optional
endpoint, as moto's server or MinIO serve it), so the same code writes a usage hour or a
run's entries to ``./ledger-store`` and to ``s3://bucket/prefix``. Files are never
rewritten: each write adds files with a fresh name, and :meth:`DatasetStore.checksums`
hashes what a prefix holds, so a closed month can be proven unchanged.
"""

import hashlib
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from app.domain.errors import InvalidInput

ROWS_PER_FILE = 4_000_000
"""Most rows in one Parquet file: large enough to read fast, small enough to list and hash."""
_READ_CHUNK = 8 << 20


class StoreError(InvalidInput):
    """The store cannot be used: a bad address, or a folder or bucket that cannot be read or
    written (the message names the store, never a credential)."""


@contextmanager
def _named(uri: str, action: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise StoreError(f"store {uri}: cannot {action}: {exc}") from exc


@dataclass(frozen=True)
class DatasetStore:
    """Where usage records and ledger entries live when the database keeps only runs,
    closures and rollups."""

    uri: str
    """As the user gave it: a folder or ``s3://bucket/prefix``."""
    fs: pafs.FileSystem
    root: str
    """The store's path inside ``fs`` (no trailing slash)."""

    @classmethod
    def at(cls, uri: str, *, s3_endpoint_url: str | None = None) -> "DatasetStore":
        """The store a URI names. S3 credentials come from the usual AWS environment.

        Raises:
            StoreError: If an ``s3://`` URI names no bucket.
        """
        if uri.startswith("s3://"):
            bucket_and_prefix = uri.removeprefix("s3://").strip("/")
            if not bucket_and_prefix:
                raise StoreError(f"store {uri!r}: an s3:// store needs a bucket")
            options: dict[str, object] = {}
            if s3_endpoint_url:
                scheme, _, host = s3_endpoint_url.partition("://")
                options = {
                    "endpoint_override": host or scheme,
                    "scheme": scheme if host else "https",
                }
            return cls(uri, pafs.S3FileSystem(**options), bucket_and_prefix)
        if "://" in uri:
            raise StoreError(f"store {uri!r}: use a folder or an s3:// URI")
        path = Path(uri).expanduser().resolve()
        path.mkdir(parents=True, exist_ok=True)
        return cls(uri, pafs.LocalFileSystem(), path.as_posix())

    @classmethod
    def named(cls, uri: str | None, *, s3_endpoint_url: str | None = None) -> "DatasetStore | None":
        """The store a setting or option names, or None when it names none."""
        return cls.at(uri, s3_endpoint_url=s3_endpoint_url) if uri else None

    def path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def write(
        self,
        data: pa.Table | pa.RecordBatchReader,
        prefix: str,
        *,
        partitions: Sequence[str] = (),
    ) -> list[str]:
        """Add ``data`` under ``prefix`` as new Parquet files, hive-partitioned by the named
        columns (which leave the files). Returns the paths written, relative to the store."""
        written: list[str] = []
        schema = data.schema
        with _named(self.uri, f"write {prefix}"):
            ds.write_dataset(
                data,
                self.path(prefix),
                filesystem=self.fs,
                format="parquet",
                partitioning=ds.partitioning(
                    pa.schema([schema.field(p) for p in partitions]), flavor="hive"
                )
                if partitions
                else None,
                basename_template=f"part-{uuid.uuid4().hex}-{{i}}.parquet",
                existing_data_behavior="overwrite_or_ignore",
                max_rows_per_file=ROWS_PER_FILE,
                max_rows_per_group=min(ROWS_PER_FILE, 1 << 20),
                file_visitor=lambda f: written.append(f.path),
            )
        return sorted(self._relative(p) for p in written)

    def upload(self, local_dir: Path, prefix: str) -> list[str]:
        """Copy a local folder's files under ``prefix``; returns their store paths."""
        files = sorted(p for p in local_dir.rglob("*") if p.is_file())
        for file in files:
            target = self.path(prefix, file.relative_to(local_dir).as_posix())
            with (
                _named(self.uri, f"write {target}"),
                file.open("rb") as source,
            ):
                self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
                with self.fs.open_output_stream(target) as out:
                    while chunk := source.read(_READ_CHUNK):
                        out.write(chunk)
        return [f"{prefix}/{f.relative_to(local_dir).as_posix()}" for f in files]

    def dataset(
        self,
        prefix: str,
        partitions: Mapping[str, pa.DataType],
        schema: pa.Schema | None = None,
    ) -> ds.Dataset:
        """The Parquet files under ``prefix`` as one dataset, partition columns included
        (an empty dataset when there are none). With ``schema`` (partitions included), a
        column that older files lack reads as null."""
        base = self.path(prefix)
        with _named(self.uri, f"read {prefix}"):
            if self.fs.get_file_info(base).type == pafs.FileType.NotFound:
                return ds.dataset([], schema=pa.schema([]))
            return ds.dataset(
                base,
                filesystem=self.fs,
                format="parquet",
                partitioning=ds.partitioning(pa.schema(list(partitions.items())), flavor="hive"),
                schema=schema,
                exclude_invalid_files=False,
            )

    def files(self, prefix: str) -> list[str]:
        """Every file under ``prefix``, relative to the store, sorted."""
        selector = pafs.FileSelector(self.path(prefix), recursive=True, allow_not_found=True)
        with _named(self.uri, f"list {prefix}"):
            infos = self.fs.get_file_info(selector)
        return sorted(self._relative(i.path) for i in infos if i.type == pafs.FileType.File)

    def checksums(self, paths: Iterable[str]) -> dict[str, str]:
        """SHA-256 of each file (paths relative to the store); a missing file is an error.

        Raises:
            StoreError: If a file cannot be read.
        """
        sums = {}
        for path in paths:
            digest = hashlib.sha256()
            with (
                _named(self.uri, f"read {path}"),
                self.fs.open_input_stream(self.path(path)) as stream,
            ):
                while chunk := stream.read(_READ_CHUNK):
                    digest.update(chunk)
            sums[path] = digest.hexdigest()
        return sums

    def _relative(self, path: str) -> str:
        return path.removeprefix(self.root).lstrip("/")
