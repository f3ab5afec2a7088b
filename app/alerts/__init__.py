"""Alerts as signed webhooks: producers raise them with :func:`enqueue`, deliverers send
them with :func:`deliver_due` (``specledger alerts deliver``), retried with backoff and
logged per delivery. The pure parts (payloads, signatures, the retry schedule) are in
:mod:`app.domain.alerts`."""

from app.alerts.delivery import (
    AttemptOutcome,
    DeliverySummary,
    deliver_due,
    send_test,
)
from app.alerts.service import (
    CreatedWebhook,
    DeliveryLogEntry,
    WebhookDisabled,
    WebhookExists,
    WebhookInfo,
    WebhookNotFound,
    add_webhook,
    delivery_log,
    disable_webhook,
    enqueue,
    list_webhooks,
)
from app.domain.alerts import (
    Alert,
    AlertKind,
    DeliveryStatus,
    RetryPolicy,
    Severity,
    WebhookFormat,
    verify_signature,
)

__all__ = [
    "Alert",
    "AlertKind",
    "AttemptOutcome",
    "CreatedWebhook",
    "DeliveryLogEntry",
    "DeliveryStatus",
    "DeliverySummary",
    "RetryPolicy",
    "Severity",
    "WebhookDisabled",
    "WebhookExists",
    "WebhookFormat",
    "WebhookInfo",
    "WebhookNotFound",
    "add_webhook",
    "deliver_due",
    "delivery_log",
    "disable_webhook",
    "enqueue",
    "list_webhooks",
    "send_test",
    "verify_signature",
]
