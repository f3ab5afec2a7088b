"""``specledger ingest billing`` and ``specledger billing synth``: FOCUS bills in and out."""

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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

if TYPE_CHECKING:
    from app.ledger.schemas import DeliveryRead

billing_app = typer.Typer(
    help="Billing utilities: deliveries, synthetic FOCUS bills.", no_args_is_help=True
)


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
    replace: Annotated[
        bool,
        typer.Option(
            help="Replace the deliveries of other sources that already hold the same "
            "charges (by charge identity), instead of refusing the input."
        ),
    ] = False,
) -> None:
    """Load FOCUS billing, idempotently: each source's billing period is replaced as a whole
    by a newer delivery, and loading the same files again changes nothing.

    Messy exports are repaired (NULL literals, empty strings, timestamp variants, enum case,
    byte-order marks, quoted or formatted numbers) and each repair is counted in the report.
    Anything that cannot be repaired rejects the input with the file, row and column, and
    nothing is written.

    Charges already loaded under another source (the same file under another name: same
    charge identity, whatever the file name or row order) refuse the input, naming the
    delivery that holds them; --replace replaces that delivery instead.
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
        replace=replace,
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


deliveries_app = typer.Typer(
    help="Billing deliveries: what each source delivered for each billing period.",
    no_args_is_help=True,
)


@deliveries_app.command("list")
def deliveries_list(
    month: Annotated[
        Month | None, typer.Option(help="Only this billing period, YYYY-MM.", parser=parse_month)
    ] = None,
    include_gone: Annotated[
        bool, typer.Option("--all", help="Also the replaced and removed deliveries.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the current billing deliveries: id, billing period, source, accounts, rows and
    totals per currency."""
    from app.db import read_session
    from app.ledger.deliveries import list_deliveries
    from app.ledger.schemas import DeliveryRead
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, read_session(engine) as session:
        deliveries = [
            DeliveryRead.of(d)
            for d in list_deliveries(session, month=month, include_gone=include_gone)
        ]
    if as_json:
        print(json.dumps([d.model_dump(mode="json") for d in deliveries], indent=2))
        return
    if not deliveries:
        typer.echo(
            "no billing deliveries"
            + (f" for {month}" if month else "")
            + " (load one with `specledger ingest billing PATH`)"
        )
        return
    for d in deliveries:
        typer.echo(_delivery_line(d))


def _delivery_line(d: "DeliveryRead") -> str:
    totals = ", ".join(f"{c} {t['billed']}" for c, t in d.totals.items()) or "no rows"
    accounts = ",".join(d.billing_accounts) or "-"
    gone = "" if d.status == "current" else f"  [{d.status}]"
    return (
        f"#{d.id}  {d.month}  {d.source}  accounts {accounts}  {d.row_count} rows  "
        f"billed {totals}{gone}"
    )


@deliveries_app.command("show")
def deliveries_show(
    delivery_id: Annotated[int, typer.Argument(help="The delivery's id (from `list`).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show one delivery: source, billing period, files (and the AWS manifest that listed
    them), accounts, rows, totals, and whether it was replaced or removed."""
    from app.db import read_session
    from app.ledger.deliveries import get_delivery
    from app.ledger.schemas import DeliveryRead
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, read_session(engine) as session:
        d = DeliveryRead.of(get_delivery(session, delivery_id))
    if as_json:
        print(json.dumps(d.model_dump(mode="json"), indent=2))
        return
    typer.echo(f"delivery #{d.id} ({d.status})")
    typer.echo(f"  source          {d.source}")
    typer.echo(
        f"  billing period  {d.billing_period_start:%Y-%m-%dT%H:%MZ} .. "
        f"{d.billing_period_end:%Y-%m-%dT%H:%MZ}"
    )
    typer.echo(f"  accounts        {', '.join(d.billing_accounts) or '-'}")
    typer.echo(f"  rows            {d.row_count}  (FOCUS {d.focus_version})")
    for currency, t in d.totals.items():
        typer.echo(f"  {currency:<15} billed {t['billed']}  effective {t['effective']}")
    if d.manifest:
        typer.echo(f"  manifest        {d.manifest}")
    for name in d.files:
        typer.echo(f"  file            {name}")
    typer.echo(f"  delivered       {d.delivered_at:%Y-%m-%dT%H:%M:%SZ}")
    typer.echo(f"  ingested        {d.ingested_at:%Y-%m-%dT%H:%M:%SZ}")
    if d.removed_at:
        typer.echo(f"  removed         {d.removed_at:%Y-%m-%dT%H:%M:%SZ}")
    elif d.superseded_at:
        by = f" by delivery #{d.superseded_by}" if d.superseded_by else ""
        typer.echo(f"  replaced        {d.superseded_at:%Y-%m-%dT%H:%M:%SZ}{by}")


@deliveries_app.command("remove")
def deliveries_remove(
    delivery_id: Annotated[int, typer.Argument(help="The delivery's id (from `list`).")],
    restate: Annotated[
        bool,
        typer.Option(
            help="Needed for a delivery of a closed month: remove it as a restated bill, "
            "booked as adjustments in the first open month when that month is allocated."
        ),
    ] = False,
) -> None:
    """Remove a delivery loaded by mistake: its rows are deleted and it is kept, marked
    removed. In an open month, allocate the month again afterwards; a closed month's
    delivery is refused unless --restate."""
    from datetime import UTC
    from datetime import datetime as clock

    from app.db import unit_of_work
    from app.ledger.deliveries import remove_delivery
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, unit_of_work(engine) as session:
        removal = remove_delivery(session, delivery_id, restate=restate, now=clock.now(UTC))
        rows, source = removal.delivery.row_count, removal.delivery.source
    typer.echo(f"removed delivery #{delivery_id} ({source}, {removal.month}, {rows} rows)")
    if removal.booked_in is not None:
        typer.echo(
            f"{removal.month} is closed: the removal is booked as adjustments correcting "
            f"{removal.month} when `specledger allocate --month {removal.booked_in}` runs"
        )
    else:
        typer.echo(f"allocate again: `specledger allocate --month {removal.month}`")


def register(app: typer.Typer, *, ingest_app: typer.Typer) -> None:
    ingest_app.command("billing")(ingest_billing)
    billing_app.add_typer(deliveries_app, name="deliveries")
    app.add_typer(billing_app, name="billing")
