"""Alerts reach a real local HTTP server: signed, retried with backoff, deduplicated, logged;
on SQLite and PostgreSQL."""

import json
import logging
import threading
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import Engine, func, select

from app.alerts import (
    Alert,
    AlertKind,
    DeliveryStatus,
    DeliverySummary,
    RetryPolicy,
    Severity,
    WebhookExists,
    WebhookFormat,
    WebhookNotFound,
    add_webhook,
    deliver_due,
    delivery_log,
    disable_webhook,
    enqueue,
    list_webhooks,
    send_test,
    verify_signature,
)
from app.db import unit_of_work
from app.domain.alerts import InvalidWebhook, json_payload
from app.models.alert import AlertDelivery, AlertWebhook
from tests.alerts.conftest import Receiver

NOW = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)


def budget_alert(key: str = "budget:7:2026-12:80", **overrides: object) -> Alert:
    fields: dict[str, object] = {
        "kind": AlertKind.budget_threshold,
        "dedup_key": key,
        "title": "Team search reached 80% of its December budget",
        "text": "Spent 8000.00 of 10000.00 USD; at this rate the budget runs out on Dec 24.",
        "severity": Severity.warning,
        "occurred_at": NOW - timedelta(minutes=5),
        "details": {"budget_id": 7, "spent": "8000.000000", "limit": "10000.000000"},
    }
    fields.update(overrides)
    return Alert(**fields)  # type: ignore[arg-type]


def add(engine: Engine, name: str, url: str, **options: object) -> str:
    """Add a webhook; its signing secret."""
    with unit_of_work(engine) as session:
        return add_webhook(session, name=name, url=url, now=NOW, **options).secret  # type: ignore[arg-type]


def raise_alert(engine: Engine, alert: Alert, now: datetime = NOW) -> int:
    with unit_of_work(engine) as session:
        return enqueue(session, alert, now)


def deliver(engine: Engine, now: datetime, **options: object) -> DeliverySummary:
    with httpx.Client() as client:
        return deliver_due(engine, client, now, **options)  # type: ignore[arg-type]


def deliveries(engine: Engine) -> list[AlertDelivery]:
    with unit_of_work(engine) as session:
        return list(session.scalars(select(AlertDelivery).order_by(AlertDelivery.id)))


def path(mode: str) -> str:
    return f"{mode}/{uuid.uuid4().hex}"


def test_a_signed_json_alert_reaches_the_receiver(engine: Engine, receiver: Receiver) -> None:
    where = path("ok")
    secret = add(engine, "finops", f"{receiver.url}/{where}")
    assert raise_alert(engine, budget_alert()) == 1

    summary = deliver(engine, NOW)

    assert (summary.delivered, summary.retrying, summary.failed) == (1, 0, 0)
    [got] = receiver.requests(where)
    assert verify_signature(secret, got.body, got.headers["x-specledger-signature"], now=NOW)
    assert not verify_signature(
        "whsec_other", got.body, got.headers["x-specledger-signature"], now=NOW
    )
    assert json.loads(got.body) == json_payload(budget_alert())
    assert got.headers["content-type"] == "application/json"
    assert got.headers["x-specledger-event"] == "budget_threshold"
    [row] = deliveries(engine)
    assert got.headers["x-specledger-delivery"] == str(row.id)
    assert (row.status, row.attempts, row.delivered_at, row.last_error) == (
        DeliveryStatus.delivered,
        1,
        NOW,
        None,
    )
    assert row.next_attempt_at is None
    assert deliver(engine, NOW + timedelta(hours=1)).attempted == 0  # nothing left to send


def test_a_receiver_that_fails_first_gets_it_on_the_retry(
    engine: Engine, receiver: Receiver
) -> None:
    where = path("flaky")
    add(engine, "flaky", f"{receiver.url}/{where}")
    raise_alert(engine, budget_alert())

    first = deliver(engine, NOW)

    assert (first.delivered, first.retrying) == (0, 1)
    [row] = deliveries(engine)
    assert (row.status, row.attempts) == (DeliveryStatus.pending, 1)
    assert row.next_attempt_at == NOW + timedelta(seconds=30)  # the default backoff's first wait
    assert row.last_error == "HTTP 500: upstream broke"
    assert deliver(engine, NOW + timedelta(seconds=29)).attempted == 0  # not due yet
    assert len(receiver.requests(where)) == 1

    second = deliver(engine, NOW + timedelta(seconds=30))

    assert second.delivered == 1
    [row] = deliveries(engine)
    assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.delivered, 2, None)
    assert row.delivered_at == NOW + timedelta(seconds=30)
    sent = receiver.requests(where)
    assert len(sent) == 2
    assert sent[0].body == sent[1].body
    assert sent[0].headers["x-specledger-delivery"] == sent[1].headers["x-specledger-delivery"]
    stamps = [r.headers["x-specledger-signature"].split(",")[0] for r in sent]
    assert stamps == [f"t={int(NOW.timestamp())}", f"t={int(NOW.timestamp()) + 30}"]


def test_a_receiver_that_is_down_fails_after_the_last_attempt_without_leaking_secrets(
    engine: Engine, down_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"{down_url}/services/T0001/B0002/hushhushpath?token=zzsecretzz"
    secret = add(engine, "down", url)
    raise_alert(engine, budget_alert())
    policy = RetryPolicy(max_attempts=3, base_delay_seconds=10, max_delay_seconds=15)
    caplog.set_level(logging.INFO, logger="specledger.alerts")

    moments = [NOW, NOW + timedelta(seconds=10), NOW + timedelta(seconds=25)]
    results = [deliver(engine, moment, policy=policy) for moment in moments]

    assert [(r.retrying, r.failed) for r in results] == [(1, 0), (1, 0), (0, 1)]
    [row] = deliveries(engine)
    assert (row.status, row.attempts, row.next_attempt_at) == (DeliveryStatus.failed, 3, None)
    assert row.last_attempt_at == NOW + timedelta(seconds=25)
    assert row.last_error is not None
    assert row.last_error.startswith("ConnectError")
    assert deliver(engine, NOW + timedelta(days=1), policy=policy).attempted == 0
    with unit_of_work(engine) as session:
        [entry] = delivery_log(session, status=DeliveryStatus.failed)
    assert entry.url == f"{down_url}/…"
    shown = [row.last_error, entry.url, caplog.text, repr(entry)]
    for text in shown:
        for hidden in ("hushhushpath", "zzsecretzz", "T0001", secret):
            assert hidden not in text
    assert "failed" in caplog.text


def test_the_same_event_alerts_once(engine: Engine, receiver: Receiver) -> None:
    where = path("ok")
    add(engine, "finops", f"{receiver.url}/{where}")

    assert raise_alert(engine, budget_alert()) == 1
    assert raise_alert(engine, budget_alert(title="Raised again by a rerun")) == 0
    deliver(engine, NOW)
    assert raise_alert(engine, budget_alert(), NOW + timedelta(days=1)) == 0
    deliver(engine, NOW + timedelta(days=1))

    assert len(receiver.requests(where)) == 1
    assert raise_alert(engine, budget_alert("budget:7:2026-12:100")) == 1  # another event


def test_slack_webhooks_get_a_slack_body(engine: Engine, receiver: Receiver) -> None:
    where = path("ok")
    add(engine, "slack", f"{receiver.url}/{where}", format=WebhookFormat.slack)
    raise_alert(engine, budget_alert(text="Spend <80%> of budget & rising"))

    deliver(engine, NOW)

    [got] = receiver.requests(where)
    body = json.loads(got.body)
    assert set(body) == {"text", "blocks"}
    assert "Team search reached 80%" in body["text"]
    header, section, fields, context = body["blocks"]
    assert header["type"] == "header"
    assert header["text"]["type"] == "plain_text"
    assert header["text"]["text"].endswith("Team search reached 80% of its December budget")
    assert section["text"] == {"type": "mrkdwn", "text": "Spend &lt;80%&gt; of budget &amp; rising"}
    assert [f["text"] for f in fields["fields"]] == [
        "*budget_id*\n7",
        "*spent*\n8000.000000",
        "*limit*\n10000.000000",
    ]
    assert context["type"] == "context"
    assert "budget:7:2026-12:80" in context["elements"][0]["text"]


def test_webhooks_receive_only_their_kinds(engine: Engine, receiver: Receiver) -> None:
    anomalies, everything = path("ok"), path("ok")
    add(engine, "anomalies", f"{receiver.url}/{anomalies}", kinds=["anomaly,waste_finding"])
    add(engine, "everything", f"{receiver.url}/{everything}")

    assert raise_alert(engine, budget_alert()) == 1
    anomaly = budget_alert("anomaly:search:2026-12-05", kind=AlertKind.anomaly)
    assert raise_alert(engine, anomaly) == 2
    deliver(engine, NOW)

    assert [json.loads(r.body)["kind"] for r in receiver.requests(anomalies)] == ["anomaly"]
    assert len(receiver.requests(everything)) == 2


def test_a_disabled_webhook_gets_nothing(engine: Engine, receiver: Receiver) -> None:
    where = path("ok")
    add(engine, "old", f"{receiver.url}/{where}")
    raise_alert(engine, budget_alert())  # pending when the webhook is disabled
    with unit_of_work(engine) as session:
        disable_webhook(session, "old", now=NOW)
        disable_webhook(session, "old", now=NOW + timedelta(hours=1))  # harmless

    assert raise_alert(engine, budget_alert("budget:7:2026-12:100")) == 0
    assert deliver(engine, NOW + timedelta(hours=1)).attempted == 0
    assert receiver.requests(where) == []
    [row] = deliveries(engine)
    assert (row.status, row.attempts, row.last_error) == (
        DeliveryStatus.failed,
        0,
        "webhook disabled",
    )
    with unit_of_work(engine) as session:
        assert list_webhooks(session) == []
        [hook] = list_webhooks(session, include_disabled=True)
        assert hook.disabled_at == NOW


def test_two_deliverers_at_once_never_send_a_delivery_twice(
    engine: Engine, receiver: Receiver
) -> None:
    where = path("slow")
    add(engine, "slow", f"{receiver.url}/{where}")
    for n in range(12):
        raise_alert(engine, budget_alert(f"budget:{n}:2026-12:80"))
    start = threading.Barrier(2)
    summaries: list[DeliverySummary] = []

    def run() -> None:
        start.wait()
        summaries.append(deliver(engine, NOW))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert len(summaries) == 2
    sent = receiver.requests(where)
    ids = [r.headers["x-specledger-delivery"] for r in sent]
    assert len(ids) == 12
    assert len(set(ids)) == 12
    assert sum(s.delivered for s in summaries) == 12
    assert all(s.delivered >= 1 for s in summaries)  # they did run side by side
    assert all(s.retrying == s.failed == 0 for s in summaries)
    assert {(d.status, d.attempts) for d in deliveries(engine)} == {(DeliveryStatus.delivered, 1)}


def test_a_test_alert_is_sent_once_whatever_the_kinds(
    engine: Engine, receiver: Receiver, down_url: str
) -> None:
    where = path("ok")
    secret = add(engine, "picky", f"{receiver.url}/{where}", kinds=["anomaly"])
    add(engine, "down", f"{down_url}/x")

    with httpx.Client() as client:
        ok = send_test(engine, client, "picky", now=NOW)
        down = send_test(engine, client, "down", now=NOW)
        with pytest.raises(WebhookNotFound):
            send_test(engine, client, "nobody", now=NOW)

    assert (ok.status, ok.http_status, ok.attempts) == (DeliveryStatus.delivered, 200, 1)
    [got] = receiver.requests(where)
    assert json.loads(got.body)["kind"] == "test"
    assert verify_signature(secret, got.body, got.headers["x-specledger-signature"], now=NOW)
    assert (down.status, down.attempts) == (DeliveryStatus.failed, 1)  # not retried
    assert deliver(engine, NOW + timedelta(days=1)).attempted == 0


def test_an_alert_raised_by_work_that_rolls_back_is_never_sent(engine: Engine) -> None:
    add(engine, "finops", "https://hooks.example.com/x")

    def produce() -> None:
        with unit_of_work(engine) as session:
            enqueue(session, budget_alert(), NOW)
            raise RuntimeError("the producer's work failed")

    with pytest.raises(RuntimeError):
        produce()
    assert deliveries(engine) == []


def test_webhook_names_are_unique_and_urls_checked(engine: Engine) -> None:
    add(engine, "finops", "https://hooks.example.com/x")
    with pytest.raises(WebhookExists), unit_of_work(engine) as session:
        add_webhook(session, name="finops", url="https://other.example.com/", now=NOW)
    with pytest.raises(InvalidWebhook) as bad, unit_of_work(engine) as session:
        add_webhook(session, name="bad", url="ftp://files.example.com/secret-path", now=NOW)
    assert "secret-path" not in bad.value.message
    with pytest.raises(InvalidWebhook, match="unknown alert kind"), unit_of_work(engine) as session:
        add_webhook(session, name="bad", url="https://a.example.com/", kinds=["budget"], now=NOW)
    with unit_of_work(engine) as session:
        [hook] = list_webhooks(session)
        stored = session.scalar(select(func.count()).select_from(AlertWebhook))
    assert stored == 1
    assert hook.url == "https://hooks.example.com/…"
    assert not hasattr(hook, "secret")
