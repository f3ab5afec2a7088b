"""CLI commands for alerts: webhooks, test alerts, sending what is due, the delivery log
(mounted by app.cli)."""

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli._support import err, open_engine, user_errors
from app.domain.alerts import (
    DEFAULT_TIMEOUT_SECONDS,
    PRODUCER_KINDS,
    AlertKind,
    DeliveryStatus,
    WebhookFormat,
)

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.alerts import delivery, service

alerts_app = typer.Typer(
    help="Alerts as signed webhooks (budget thresholds, forecast crossings, anomalies, waste "
    "findings, acceptance drift): where they go, sending them, and the delivery log.",
    no_args_is_help=True,
)
webhooks_app = typer.Typer(
    help="Add, list and disable the webhooks alerts are sent to.", no_args_is_help=True
)
alerts_app.add_typer(webhooks_app, name="webhooks")

_KINDS = ", ".join(PRODUCER_KINDS)
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
TimeoutOption = Annotated[
    float, typer.Option(min=0.1, help="Seconds each request may take (connect, send, read).")
]


def _iso(moment: datetime | None) -> str | None:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}" if moment else None


def _webhook_row(hook: "service.WebhookInfo") -> dict[str, Any]:
    return {
        "id": hook.id,
        "name": hook.name,
        "url": hook.url,
        "format": hook.format.value,
        "kinds": hook.kinds,
        "created_at": _iso(hook.created_at),
        "disabled_at": _iso(hook.disabled_at),
    }


@webhooks_app.command("add")
def webhooks_add(
    name: Annotated[str, typer.Argument(help="A unique name, e.g. finops-slack.")],
    url: Annotated[
        str,
        typer.Argument(
            help="Where to POST alerts (http:// or https://). Shown redacted from now on, as "
            "scheme://host/…, because such URLs can be secrets themselves."
        ),
    ],
    fmt: Annotated[
        WebhookFormat,
        typer.Option(
            "--format",
            help="json: SpecLedger's JSON body; slack: a Slack incoming-webhook body "
            "({text, blocks}).",
        ),
    ] = WebhookFormat.json,
    kinds: Annotated[
        list[str] | None,
        typer.Option(
            "--kinds",
            help=f"Only these alert kinds (repeat, or separate with commas): {_KINDS}. "
            "Default: all.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Add a webhook and print its signing secret. The secret is shown this once: receivers
    check each request's X-SpecLedger-Signature header with it (HMAC-SHA256)."""
    from app.alerts import service
    from app.db import unit_of_work
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, unit_of_work(engine) as session:
        created = service.add_webhook(
            session, name=name, url=url, format=fmt, kinds=kinds, now=datetime.now(UTC)
        )
    row = _webhook_row(created.webhook)
    if as_json:
        typer.echo(json.dumps({**row, "secret": created.secret}, indent=2))
        return
    kinds_text = ", ".join(row["kinds"]) if row["kinds"] else "all kinds"
    typer.echo(f"added webhook {row['name']} ({row['format']}, {kinds_text}) -> {row['url']}")
    typer.echo("signing secret; store it now, it is not shown again:")
    typer.echo(created.secret)


@webhooks_app.command("list")
def webhooks_list(
    include_disabled: Annotated[
        bool, typer.Option("--all", help="Include disabled webhooks.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List webhooks (URLs redacted; secrets are never shown again)."""
    from app.alerts import service
    from app.db import read_session
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, read_session(engine) as session:
        rows = [
            _webhook_row(h)
            for h in service.list_webhooks(session, include_disabled=include_disabled)
        ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no webhooks; add one with `specledger alerts webhooks add NAME URL`")
    for row in rows:
        kinds_text = ",".join(row["kinds"]) if row["kinds"] else "all"
        disabled = f"  disabled {row['disabled_at']}" if row["disabled_at"] else ""
        typer.echo(
            f"{row['id']:>4}  {row['name']:<24} {row['format']:<5}  {row['url']:<40} "
            f"kinds={kinds_text}{disabled}"
        )


@webhooks_app.command("disable")
def webhooks_disable(
    name: Annotated[str, typer.Argument(help="The webhook's name (see `alerts webhooks list`).")],
) -> None:
    """Disable a webhook: it gets no new alerts, and its pending deliveries are marked failed."""
    from app.alerts import service
    from app.db import unit_of_work
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, unit_of_work(engine) as session:
        hook = service.disable_webhook(session, name, now=datetime.now(UTC))
    typer.echo(f"webhook {hook.name} disabled")


@alerts_app.command("test")
def alerts_test(
    name: Annotated[str, typer.Argument(help="The webhook's name.")],
    timeout: TimeoutOption = DEFAULT_TIMEOUT_SECONDS,
) -> None:
    """Send a test alert to one webhook now, once, and say whether it arrived (exit status 1
    if not). It is logged like any delivery, and is not retried."""
    from app.alerts import delivery
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, delivery.make_client() as client:
        outcome = delivery.send_test(
            engine, client, name, now=datetime.now(UTC), timeout_seconds=timeout
        )
    if outcome.status is DeliveryStatus.delivered:
        typer.echo(
            f"test alert delivered to {outcome.webhook} ({outcome.url}): HTTP {outcome.http_status}"
        )
        return
    err.print(
        f"test alert to {outcome.webhook} ({outcome.url}) failed: {outcome.error}",
        highlight=False,
        markup=False,
    )
    raise typer.Exit(1)


def _deliver_once(engine: "Engine", *, limit: int, timeout: float) -> "delivery.DeliverySummary":
    from app.alerts import delivery

    with delivery.make_client() as client:
        return delivery.deliver_due(
            engine, client, datetime.now(UTC), limit=limit, timeout_seconds=timeout
        )


def _summary_row(summary: "delivery.DeliverySummary") -> dict[str, Any]:
    return {
        "delivered": summary.delivered,
        "retrying": summary.retrying,
        "failed": summary.failed,
        "skipped": summary.skipped,
        "attempts": [
            {
                "delivery_id": o.delivery_id,
                "webhook": o.webhook,
                "status": o.status.value,
                "attempts": o.attempts,
                "http_status": o.http_status,
                "error": o.error,
                "next_attempt_at": _iso(o.next_attempt_at),
            }
            for o in summary.outcomes
        ],
    }


@alerts_app.command("deliver")
def alerts_deliver(
    loop: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            min=1,
            help="Keep running, sending what is due every SECONDS, until interrupted. "
            "Default: once (for cron).",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many sends per round.")] = 100,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_SECONDS,
    as_json: JsonOption = False,
) -> None:
    """Send every alert delivery that is due, retrying failed ones with exponential backoff.
    Safe to run from several places at once: each delivery is claimed before it is sent."""
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine:
        try:
            while True:
                summary = _deliver_once(engine, limit=limit, timeout=timeout)
                if as_json:
                    typer.echo(json.dumps(_summary_row(summary)))
                elif summary.attempted or summary.skipped:
                    skipped = (
                        f", {summary.skipped} sent by another deliverer" if summary.skipped else ""
                    )
                    typer.echo(
                        f"delivered {summary.delivered}, retrying {summary.retrying}, "
                        f"failed {summary.failed}{skipped}"
                    )
                elif loop is None:
                    typer.echo("nothing due")
                if loop is None:
                    return
                time.sleep(loop)
        except KeyboardInterrupt:
            return


@alerts_app.command("check")
def alerts_check(
    deliver: Annotated[
        bool, typer.Option("--deliver", help="Then send what is due (as `alerts deliver`).")
    ] = False,
) -> None:
    """Queue an alert for every current event: budget thresholds reached and forecasts over
    budget, cost anomalies of the last day and hour (with their drivers), this month's
    waste findings, and deployments whose acceptance fell from their baseline (CUSUM). Each event alerts once, so run it from cron as often as you like
    (e.g. every 15 minutes, with --deliver)."""
    from app.db import unit_of_work
    from app.settings import get_settings
    from app.watch import check_everything

    settings = get_settings()
    with user_errors(), open_engine(settings) as engine:
        with unit_of_work(engine) as session:
            found = check_everything(session, now=datetime.now(UTC), settings=settings)
        typer.echo(
            f"queued {found.total} deliveries: {found.budget_alerts} budget, "
            f"{found.anomaly_alerts} anomaly, {found.waste_alerts} waste, "
            f"{found.drift_alerts} acceptance drift"
        )
        if deliver:
            summary = _deliver_once(engine, limit=100, timeout=DEFAULT_TIMEOUT_SECONDS)
            typer.echo(
                f"delivered {summary.delivered}, retrying {summary.retrying}, "
                f"failed {summary.failed}"
            )


@alerts_app.command("log")
def alerts_log(
    status: Annotated[
        DeliveryStatus | None, typer.Option(help="Only deliveries with this status.")
    ] = None,
    webhook: Annotated[str | None, typer.Option(help="Only this webhook's deliveries.")] = None,
    kind: Annotated[AlertKind | None, typer.Option(help="Only alerts of this kind.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """The delivery log, newest first: each alert per webhook, its status, attempts and
    last error."""
    from app.alerts import service
    from app.db import read_session
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, read_session(engine) as session:
        entries = service.delivery_log(
            session, status=status, webhook=webhook, kind=kind, limit=limit
        )
    rows = [
        {
            "id": e.id,
            "webhook": e.webhook,
            "url": e.url,
            "kind": e.kind.value,
            "dedup_key": e.dedup_key,
            "status": e.status.value,
            "attempts": e.attempts,
            "created_at": _iso(e.created_at),
            "last_attempt_at": _iso(e.last_attempt_at),
            "next_attempt_at": _iso(e.next_attempt_at),
            "delivered_at": _iso(e.delivered_at),
            "last_error": e.last_error,
        }
        for e in entries
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no deliveries")
    for entry, row in zip(entries, rows, strict=True):
        if entry.status is DeliveryStatus.delivered:
            when = f"delivered {row['delivered_at']}"
        elif entry.status is DeliveryStatus.pending:
            when = f"next {row['next_attempt_at']}"
        else:
            when = f"failed {row['last_attempt_at'] or row['created_at']}"
        error = f"  last error: {entry.last_error}" if entry.last_error else ""
        typer.echo(
            f"{entry.id:>5}  {entry.status.value:<9} {entry.webhook:<20} {entry.kind.value:<17} "
            f"{entry.dedup_key:<28} attempts={entry.attempts}  {when}{error}"
        )


def register(app: typer.Typer) -> None:
    app.add_typer(alerts_app, name="alerts")
