"""``specledger ingest billing`` and ``specledger billing synth``: FOCUS bills in and out."""

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from app.cli._support import (
    UserError,
    as_utc,
    err,
    open_engine,
    out,
    parse_month,
    progress_bar,
    user_errors,
)
from app.domain.periods import Month

billing_app = typer.Typer(help="Billing utilities (synthetic FOCUS bills).", no_args_is_help=True)


def ingest_billing(
    path: Annotated[
        str,
        typer.Argument(
            help="A FOCUS file (.csv, .csv.gz, .parquet), a folder "
            "of them, or s3://bucket/prefix of an AWS Data Export."
        ),
    ],
    source: Annotated[
        str | None,
        typer.Option(
            help="Name of the billing source; re-ingesting "
            "a source replaces its billing periods. Default: "
            "the path or the S3 export."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    lenient: Annotated[
        bool,
        typer.Option(
            help="Skip rows that cannot be repaired and list "
            "them in the report, instead of rejecting the "
            "input."
        ),
    ] = False,
    allow_missing_columns: Annotated[
        bool,
        typer.Option(
            help="Read missing mandatory FOCUS columns as null; never BilledCost, "
            "EffectiveCost or BillingCurrency, whose absence always rejects the file."
        ),
    ] = False,
    focus_version: Annotated[
        str | None,
        typer.Option(
            help="Validate against this FOCUS "
            "version (1.0-1.3); default: detected "
            "from the columns."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Replace stored billing periods even with an older delivery.")
    ] = False,
) -> None:
    """Load FOCUS billing, idempotently: each source's billing period is replaced as a whole
    by a newer delivery, and loading the same files again changes nothing.

    Messy exports are repaired (NULL literals, empty strings, timestamp variants, enum case,
    byte-order marks, quoted or formatted numbers) and each repair is counted in the report.
    Anything that cannot be repaired rejects the input with the file, row and column, and
    nothing is written.
    """
    from app.settings import get_settings
    from ingest.normalize import NormaliseOptions
    from ingest.service import IngestOptions
    from ingest.service import ingest_billing as run

    settings = get_settings()
    if focus_version is not None and focus_version not in ("1.0", "1.1", "1.2", "1.3"):
        err.print("[bold red]error:[/] --focus-version must be one of 1.0, 1.1, 1.2, 1.3")
        raise typer.Exit(2)
    options = IngestOptions(
        normalise=NormaliseOptions(
            focus_version=focus_version,
            allow_missing_columns=allow_missing_columns,
            lenient=lenient,
        ),
        source=source,
        force=force,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    with (
        user_errors(),
        open_engine(settings) as engine,
        progress_bar(sys.stdout.isatty() and not as_json) as hook,
    ):
        report = run(engine, path, options, progress=hook)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        typer.echo(report.to_text())


@billing_app.command("synth")
def billing_synth(
    out_path: Annotated[
        Path, typer.Option("--out", help="Output file: .csv, .csv.gz or .parquet.")
    ],
    month: Annotated[Month, typer.Option(help="Billing period, YYYY-MM.", parser=parse_month)],
    tag: Annotated[
        list[str],
        typer.Option(
            help="KEY=VALUE tag on every row (repeatable), e.g. specledger-deployment=demo."
        ),
    ],
    instance_type: Annotated[
        str, typer.Option(help="Instance type from the price catalog.")
    ] = "g5.12xlarge",
    instances: Annotated[int, typer.Option(min=1, help="Number of instances.")] = 1,
    start: Annotated[
        datetime | None, typer.Option(help="First charge hour (UTC); default: the month's start.")
    ] = None,
    end: Annotated[
        datetime | None,
        typer.Option(
            help="End of the last charge hour (UTC, exclusive); default: the month's end."
        ),
    ] = None,
) -> None:
    """Write a conformant FOCUS 1.2 bill for GPU instance-hours priced from the catalog, with a
    daily networking line. Every row says SYNTHETIC in ChargeDescription."""
    from app.catalog import instance_prices
    from ingest.synth import SynthSpec, synth_rows, write_bill

    with user_errors():
        prices = instance_prices()
        if instance_type not in prices:
            raise UserError(
                f"unknown --instance-type {instance_type!r}; the catalog has "
                f"{', '.join(sorted(prices))}"
            )
        period_start, period_end = month.start, month.end
        tags = dict(_split_tag(t) for t in tag)
        window_start = as_utc(start) if start else period_start
        window_end = as_utc(end) if end else period_end
        if not period_start <= window_start < window_end <= period_end:
            raise UserError("--start/--end must lie inside --month, start before end")
        table = synth_rows(
            SynthSpec(
                prices[instance_type],
                window_start,
                window_end,
                period_start,
                period_end,
                tags,
                instances=instances,
            )
        )
        write_bill(table, out_path)
    out.print(f"wrote {table.num_rows} synthetic FOCUS 1.2 rows to {out_path}")


def _split_tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UserError(f"--tag must be KEY=VALUE, got {text!r}")
    return key, value


def register(app: typer.Typer, *, ingest_app: typer.Typer) -> None:
    ingest_app.command("billing")(ingest_billing)
    app.add_typer(billing_app, name="billing")
