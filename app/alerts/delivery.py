"""Sending due deliveries: claim, POST (signed), record; retried with backoff.

Each delivery is claimed before it is sent, in its own short transaction: a conditional
UPDATE counts the attempt and moves ``next_attempt_at`` past the claim's end, and only if
it changed the row (same status, same attempt count, still due) does this deliverer send.
Two deliverers running at once (two cron jobs, a loop and a manual run) therefore never
send one attempt twice; the loser sees zero rows updated and skips. A deliverer that dies
mid-send leaves the row pending; it is due again when the claim ends (at-least-once: the
``X-SpecLedger-Delivery`` header lets receivers drop a repeat).

The claim is committed before the POST, so this takes an :class:`~sqlalchemy.Engine` and
runs its own transactions, rather than a caller's session.
"""

import logging
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import httpx
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from app import __version__
from app.alerts.service import create_test_delivery, get_webhook
from app.db import read_session, unit_of_work
from app.domain.alerts import (
    DEFAULT_RETRY,
    DEFAULT_TIMEOUT_SECONDS,
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    Alert,
    AlertKind,
    DeliveryStatus,
    RetryPolicy,
    Severity,
    encode_body,
    iso_z,
    redact_url,
    safe_error,
    signature_header,
)
from app.models.alert import AlertDelivery, AlertWebhook

log = logging.getLogger("specledger.alerts")

CLAIM = timedelta(minutes=10)
"""How long a claimed delivery is left alone by other deliverers. Longer than one request
can take, and than one run's time budget."""
DEFAULT_TIME_BUDGET_SECONDS = 60.0
"""A run claims no new delivery after this long; the rest waits for the next run. It keeps
the signature's timestamp (the run's ``now``) within receivers' five-minute tolerance."""
USER_AGENT = f"SpecLedger-Alerts/{__version__}"
_BODY_SNIPPET = 120


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    delivery_id: int
    webhook: str
    url: str
    """Redacted: ``scheme://host[:port]/…``."""
    status: DeliveryStatus
    """After the attempt: delivered, pending (a retry is scheduled) or failed."""
    attempts: int
    http_status: int | None
    error: str | None
    next_attempt_at: datetime | None


@dataclass(frozen=True, slots=True)
class DeliverySummary:
    delivered: int = 0
    retrying: int = 0
    failed: int = 0
    skipped: int = 0
    """Due, but claimed first by another deliverer."""
    outcomes: tuple[AttemptOutcome, ...] = field(default=(), repr=False)

    @property
    def attempted(self) -> int:
        return self.delivered + self.retrying + self.failed


@dataclass(frozen=True, slots=True)
class _Claim:
    delivery_id: int
    attempts: int
    """The attempt count after claiming: this attempt's number."""
    kind: AlertKind
    payload: dict[str, object]
    webhook: str
    url: str
    secret: str = field(repr=False)


def deliver_due(
    engine: Engine,
    client: httpx.Client,
    now: datetime,
    *,
    policy: RetryPolicy = DEFAULT_RETRY,
    limit: int = 100,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    time_budget_seconds: float = DEFAULT_TIME_BUDGET_SECONDS,
) -> DeliverySummary:
    """POST every pending delivery due at ``now`` (oldest due first, at most ``limit``).

    2xx means delivered. Another status or a transport error (refused, timeout, DNS)
    schedules the next attempt by ``policy``, or marks the delivery failed after its
    last attempt. Redirects are not followed (they count as failures).

    Args:
        engine: The database; each claim and each result is its own transaction.
        client: Sends the requests (tests pass one with a mock transport, or a real one).
        now: The current time, aware: what is due, the signature's timestamp, the backoff.
        policy: Backoff and maximum attempts.
        limit: At most this many deliveries in this run.
        timeout_seconds: Per request.
        time_budget_seconds: Claim no new delivery after this much wall time.

    Returns:
        What happened: counts and one outcome per attempt.
    """
    started = time.monotonic()
    with read_session(engine) as session:
        due = list(
            session.scalars(
                select(AlertDelivery.id)
                .join(AlertWebhook, AlertWebhook.id == AlertDelivery.webhook_id)
                .where(
                    AlertDelivery.status == DeliveryStatus.pending,
                    AlertDelivery.next_attempt_at <= now,
                    AlertWebhook.disabled_at.is_(None),
                )
                .order_by(AlertDelivery.next_attempt_at, AlertDelivery.id)
                .limit(limit)
            )
        )
    outcomes: list[AttemptOutcome] = []
    skipped = 0
    for delivery_id in due:
        if time.monotonic() - started > time_budget_seconds:
            break
        outcome = attempt(
            engine, client, delivery_id, now=now, policy=policy, timeout_seconds=timeout_seconds
        )
        if outcome is None:
            skipped += 1
        else:
            outcomes.append(outcome)
    return DeliverySummary(
        delivered=sum(o.status is DeliveryStatus.delivered for o in outcomes),
        retrying=sum(o.status is DeliveryStatus.pending for o in outcomes),
        failed=sum(o.status is DeliveryStatus.failed for o in outcomes),
        skipped=skipped,
        outcomes=tuple(outcomes),
    )


def attempt(
    engine: Engine,
    client: httpx.Client,
    delivery_id: int,
    *,
    now: datetime,
    policy: RetryPolicy = DEFAULT_RETRY,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    final: bool = False,
) -> AttemptOutcome | None:
    """Claim one delivery if it is due, send it, record the result.

    Args:
        final: Fail it on error instead of scheduling a retry (test alerts).

    Returns:
        The outcome, or None if the delivery was not due or another deliverer claimed it.
    """
    with unit_of_work(engine) as session:
        claim = _claim(session, delivery_id, now=now)
    if claim is None:
        return None
    return _send_and_record(
        engine, client, claim, now=now, policy=policy, timeout_seconds=timeout_seconds, final=final
    )


def _send_and_record(
    engine: Engine,
    client: httpx.Client,
    claim: _Claim,
    *,
    now: datetime,
    policy: RetryPolicy,
    timeout_seconds: float,
    final: bool,
) -> AttemptOutcome:
    http_status, error = _send(client, claim, now=now, timeout_seconds=timeout_seconds)
    delay = None if final else policy.delay_after(claim.attempts)
    if error is None:
        status, next_at = DeliveryStatus.delivered, None
    elif delay is None:
        status, next_at = DeliveryStatus.failed, None
    else:
        status, next_at = DeliveryStatus.pending, now + delay
    with unit_of_work(engine) as session:
        # Only while our claim holds: a disabled webhook, or a claim that ran out and was
        # taken over, has a newer story than this attempt.
        session.execute(
            update(AlertDelivery)
            .where(
                AlertDelivery.id == claim.delivery_id,
                AlertDelivery.status == DeliveryStatus.pending,
                AlertDelivery.attempts == claim.attempts,
            )
            .values(
                status=status,
                next_attempt_at=next_at,
                delivered_at=now if error is None else None,
                last_error=error,
            )
        )
    url = redact_url(claim.url)
    if error is None:
        log.info("alert delivery %s to %s (%s) delivered", claim.delivery_id, claim.webhook, url)
    else:
        log.warning(
            "alert delivery %s to %s (%s), attempt %s: %s; %s",
            claim.delivery_id,
            claim.webhook,
            url,
            claim.attempts,
            error,
            f"next attempt at {next_at:%Y-%m-%dT%H:%M:%SZ}" if next_at else "failed",
        )
    return AttemptOutcome(
        delivery_id=claim.delivery_id,
        webhook=claim.webhook,
        url=url,
        status=status,
        attempts=claim.attempts,
        http_status=http_status,
        error=error,
        next_attempt_at=next_at,
    )


def _claim(session: Session, delivery_id: int, *, now: datetime) -> _Claim | None:
    """Claim a due delivery in ``session``'s transaction, which the caller commits before
    sending; None if it is not due or another deliverer has it."""
    row = session.execute(
        select(
            AlertDelivery.attempts,
            AlertDelivery.kind,
            AlertDelivery.payload,
            AlertWebhook.name,
            AlertWebhook.url,
            AlertWebhook.secret,
        )
        .join(AlertWebhook, AlertWebhook.id == AlertDelivery.webhook_id)
        .where(
            AlertDelivery.id == delivery_id,
            AlertDelivery.status == DeliveryStatus.pending,
            AlertDelivery.next_attempt_at <= now,
            AlertWebhook.disabled_at.is_(None),
        )
    ).first()
    if row is None:
        return None
    attempts, kind, payload, name, url, secret = row
    # The conditional UPDATE is the claim: on PostgreSQL a concurrent claimer waits for
    # our commit and then finds ``attempts`` changed; on SQLite the transactions are
    # serialised (BEGIN IMMEDIATE) and the second one's SELECT finds nothing due.
    claimed = session.connection().execute(
        update(AlertDelivery)
        .where(
            AlertDelivery.id == delivery_id,
            AlertDelivery.status == DeliveryStatus.pending,
            AlertDelivery.attempts == attempts,
            AlertDelivery.next_attempt_at <= now,
        )
        .values(attempts=attempts + 1, last_attempt_at=now, next_attempt_at=now + CLAIM)
    )
    if claimed.rowcount != 1:
        return None
    return _Claim(delivery_id, attempts + 1, kind, payload, name, url, secret)


def _send(
    client: httpx.Client, claim: _Claim, *, now: datetime, timeout_seconds: float
) -> tuple[int | None, str | None]:
    """POST the claimed delivery; ``(HTTP status or None, error or None)``."""
    body = encode_body(claim.payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        SIGNATURE_HEADER: signature_header(claim.secret, body, timestamp=int(now.timestamp())),
        DELIVERY_HEADER: str(claim.delivery_id),
        EVENT_HEADER: claim.kind.value,
    }
    try:
        with client.stream(
            "POST",
            claim.url,
            content=body,
            headers=headers,
            timeout=timeout_seconds,
            follow_redirects=False,
        ) as response:
            if response.is_success:
                return response.status_code, None
            snippet = _read_snippet(response)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return None, safe_error(
            f"{type(exc).__name__}: {exc}", url=claim.url, secrets=(claim.secret,)
        )
    message = f"HTTP {response.status_code}" + (f": {snippet}" if snippet else "")
    return response.status_code, safe_error(message, url=claim.url, secrets=(claim.secret,))


def _read_snippet(response: httpx.Response) -> str:
    """The start of an error response's body, read no further than needed."""
    chunk = b""
    for part in response.iter_bytes():
        chunk += part
        if len(chunk) >= _BODY_SNIPPET:
            break
    return chunk[:_BODY_SNIPPET].decode("utf-8", "replace").strip()


def send_test(
    engine: Engine,
    client: httpx.Client,
    name: str,
    *,
    now: datetime,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> AttemptOutcome:
    """Send a test alert to one webhook now, once (no retries), whatever kinds it takes.

    Raises:
        WebhookNotFound: If there is no such webhook.
        WebhookDisabled: If it is disabled.
    """
    alert = Alert(
        kind=AlertKind.test,
        dedup_key=f"test:{iso_z(now)}:{secrets.token_hex(4)}",
        title="SpecLedger test alert",
        text=f"If you can read this, webhook {name!r} receives SpecLedger alerts.",
        severity=Severity.info,
        occurred_at=now,
        details={"webhook": name},
    )
    with unit_of_work(engine) as session:
        delivery_id = create_test_delivery(session, get_webhook(session, name), alert, now=now)
        claim = _claim(session, delivery_id, now=now)  # before any deliverer can see it
    assert claim is not None, "a new delivery is due and unclaimed"
    return _send_and_record(
        engine,
        client,
        claim,
        now=now,
        policy=DEFAULT_RETRY,
        timeout_seconds=timeout_seconds,
        final=True,
    )


def make_client() -> httpx.Client:
    """The HTTP client of the command line: no redirects, the timeout set per request."""
    return httpx.Client(headers={"User-Agent": USER_AGENT}, follow_redirects=False)
