"""``specledger anomalies``: cost anomalies per deployment and team, with their drivers."""

import json
from datetime import UTC, datetime
from typing import Annotated

import typer

from app.anomalies.granularity import Granularity
from app.cli._support import open_engine, user_errors


def anomalies(
    granularity: Annotated[
        Granularity, typer.Option(help="day (weekly season) or hour (daily season).")
    ] = Granularity.day,
    buckets: Annotated[
        int, typer.Option(min=1, max=400, help="How many recent complete buckets to judge.")
    ] = 14,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Cost anomalies per deployment and team, newest first, each with the drivers that
    moved it, in money (seasonal medians with a MAD threshold; see app/anomalies/rules/).
    Use `specledger alerts check` to alert on them."""
    from app.anomalies.router import anomaly_read
    from app.anomalies.service import find_anomalies
    from app.db import read_session
    from app.settings import get_settings

    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        reports = find_anomalies(
            session,
            end=datetime.now(UTC),
            granularity=granularity,
            buckets=buckets,
            currency=settings.default_currency,
        )
    rows = [anomaly_read(r) for r in reports]
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
        return
    if not rows:
        typer.echo(f"no anomalies in the last {buckets} {granularity}s")
    for row in rows:
        typer.echo(
            f"{row.bucket_start:%Y-%m-%d %H:%M}Z  {row.subject:<28} {row.direction:<5} "
            f"{row.actual} vs {row.expected} expected ({row.deviation:+} {row.currency}, "
            f"score {row.score:.1f})"
        )
        for driver in row.drivers[:3]:
            typer.echo(f"    {driver.effect:+} {driver.description}")


def register(app: typer.Typer) -> None:
    app.command("anomalies")(anomalies)
