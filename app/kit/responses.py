"""Response helpers: CSV bodies and file downloads."""

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from fastapi.responses import Response


class Format(StrEnum):
    json = "json"
    csv = "csv"


def csv_text(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(
        out, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def download(content: bytes | str, *, filename: str, media_type: str) -> Response:
    """A body the browser saves as ``filename``."""
    return Response(
        content,
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def csv_download(
    columns: Sequence[str], rows: Iterable[Mapping[str, Any]], *, filename: str
) -> Response:
    return download(csv_text(columns, rows), filename=filename, media_type="text/csv")
