"""Alerts as webhook payloads: the alert value, its JSON and Slack-compatible bodies, the
HMAC signature receivers check, the retry schedule, and URL redaction. Pure: no I/O.

An :class:`Alert` names the event it reports with a ``dedup_key`` (``"budget:7:2026-12:80"``):
the channel sends one alert per event and webhook, however often a producer raises it.

Signature. Every request carries ``X-SpecLedger-Signature: t=<unix seconds>,v1=<hex>``, where
the hex is HMAC-SHA256, keyed with the webhook's signing secret, of ``f"{t}.{body}"`` (the
raw request body, bytes as sent). A receiver recomputes it over the body it received and
refuses a stale ``t`` so a captured request cannot be replayed later
(:func:`verify_signature`). Several ``v1=`` entries may appear; any one matching is enough.
"""

import hashlib
import hmac
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from app.domain.errors import DomainError

SIGNATURE_HEADER = "X-SpecLedger-Signature"
DELIVERY_HEADER = "X-SpecLedger-Delivery"
"""The delivery's id: the same on every retry of one delivery, so receivers can drop repeats."""
EVENT_HEADER = "X-SpecLedger-Event"
"""The alert's kind."""
PAYLOAD_TYPE = "specledger.alert"
PAYLOAD_VERSION = 1
DEFAULT_TOLERANCE_SECONDS = 300
"""How old (or how far in the future) a signature's timestamp may be for a receiver."""
DEFAULT_TIMEOUT_SECONDS = 5.0
"""Per request (connect, write, read each): a slow receiver must not hold the queue."""

MAX_DEDUP_KEY = 256
MAX_TITLE = 200
MAX_TEXT = 4000
MAX_URL = 2048
MAX_ERROR = 200

# Slack's limits for the blocks used here (api.slack.com, "Reference: blocks").
_SLACK_HEADER_MAX = 150
_SLACK_SECTION_MAX = 3000
_SLACK_FIELD_MAX = 2000
_SLACK_FIELDS_MAX = 10


class AlertKind(StrEnum):
    budget_threshold = "budget_threshold"
    forecast_crossing = "forecast_crossing"
    budget_step = "budget_step"
    """A budget's spend reached a brownout step: the proxy now warns or routes its scope."""
    anomaly = "anomaly"
    waste_finding = "waste_finding"
    acceptance_drift = "acceptance_drift"
    test = "test"
    """Sent by ``specledger alerts test`` to one webhook; never filtered out."""


PRODUCER_KINDS = tuple(k for k in AlertKind if k is not AlertKind.test)
"""The kinds producers raise, and a webhook may subscribe to."""


class Severity(StrEnum):
    info = "info"
    warning = "warning"
    critical = "critical"


class WebhookFormat(StrEnum):
    json = "json"
    """SpecLedger's own JSON body (:func:`json_payload`)."""
    slack = "slack"
    """``{"text": ..., "blocks": [...]}``, as Slack incoming webhooks take it."""


class DeliveryStatus(StrEnum):
    pending = "pending"
    """Waiting for its first or next attempt (or being sent right now)."""
    delivered = "delivered"
    """The receiver answered 2xx."""
    failed = "failed"
    """Given up: the last attempt failed, or the webhook was disabled first."""


class InvalidAlert(DomainError):
    """An alert a producer built wrongly (empty key, naive time, details not JSON)."""

    code = "invalid_alert"


class InvalidWebhook(DomainError):
    """A webhook that cannot be used as given (bad URL, unknown format or kind)."""

    code = "invalid_webhook"


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert:
    """One event worth telling people about.

    Args:
        kind: What produced it.
        dedup_key: Names the event, not the alert: raising the same key again sends nothing
            new (``"budget:7:2026-12:80"``: budget 7, December, 80% threshold).
        title: One line, plain text.
        text: A few sentences, plain text.
        severity: How urgent.
        occurred_at: When the event happened; aware (stored as UTC).
        details: JSON values only; money as decimal strings (``"1234.500000"``), never floats.

    Raises:
        InvalidAlert: If a field is empty, too long, naive or not JSON.
    """

    kind: AlertKind
    dedup_key: str
    title: str
    text: str
    severity: Severity = Severity.warning
    occurred_at: datetime
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            kind = AlertKind(self.kind)
            severity = Severity(self.severity)
        except ValueError as exc:
            raise InvalidAlert(str(exc)) from None
        key = self.dedup_key.strip() if isinstance(self.dedup_key, str) else ""
        if not key or len(key) > MAX_DEDUP_KEY or _has_control(key):
            raise InvalidAlert(
                f"dedup_key must be 1 to {MAX_DEDUP_KEY} printable characters naming the event"
            )
        title = self.title.strip()
        if not title or len(title) > MAX_TITLE:
            raise InvalidAlert(f"title must be 1 to {MAX_TITLE} characters")
        if len(self.text) > MAX_TEXT:
            raise InvalidAlert(f"text must be at most {MAX_TEXT} characters")
        if self.occurred_at.tzinfo is None or self.occurred_at.utcoffset() is None:
            raise InvalidAlert(f"occurred_at {self.occurred_at!r} is naive; give an aware time")
        try:
            details = json.loads(json.dumps(dict(self.details), allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidAlert(f"details must hold JSON values only: {exc}") from None
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "severity", severity)
        object.__setattr__(self, "dedup_key", key)
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "occurred_at", self.occurred_at.astimezone(UTC))
        object.__setattr__(self, "details", details)


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def iso_z(moment: datetime) -> str:
    """An aware time as ISO 8601 UTC with a ``Z`` (``2026-12-05T09:30:00Z``)."""
    utc = moment.astimezone(UTC)
    text = utc.isoformat(timespec="microseconds" if utc.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def json_payload(alert: Alert) -> dict[str, Any]:
    """SpecLedger's JSON body for an alert.

    Returns:
        ``{"type": "specledger.alert", "version": 1, "kind", "dedup_key", "severity",
        "title", "text", "occurred_at" (ISO 8601 UTC), "details"}``.
    """
    return {
        "type": PAYLOAD_TYPE,
        "version": PAYLOAD_VERSION,
        "kind": alert.kind.value,
        "dedup_key": alert.dedup_key,
        "severity": alert.severity.value,
        "title": alert.title,
        "text": alert.text,
        "occurred_at": iso_z(alert.occurred_at),
        "details": dict(alert.details),
    }


_SEVERITY_MARK = {Severity.info: "ℹ️", Severity.warning: "⚠️", Severity.critical: "🚨"}


def slack_escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn gives meaning to (&, <, >)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _detail_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def slack_payload(alert: Alert) -> dict[str, Any]:
    """A Slack-compatible body: ``{"text": ..., "blocks": [...]}``.

    ``text`` is the notification fallback; the blocks are a header (the title), a section
    (the text), up to ten fields (the details, in order) and a context line (severity,
    kind, time and the event's key). Text is clipped to Slack's block limits.
    """
    mark = _SEVERITY_MARK[alert.severity]
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {
                "type": "plain_text",
                "text": _clip(f"{mark} {alert.title}", _SLACK_HEADER_MAX),
                "emoji": True,
            },
        }
    ]
    if alert.text.strip():
        blocks.append(
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": _clip(slack_escape(alert.text), _SLACK_SECTION_MAX),
                },
            }
        )
    fields = [
        {
            "type": "mrkdwn",
            "text": _clip(
                f"*{slack_escape(key)}*\n{slack_escape(_detail_text(value))}", _SLACK_FIELD_MAX
            ),
        }
        for key, value in list(alert.details.items())[:_SLACK_FIELDS_MAX]
    ]
    if fields:
        blocks.append({"type": "section", "fields": fields})
    context = (
        f"*{alert.severity.value}* · {alert.kind.value} · {iso_z(alert.occurred_at)} · "
        f"`{slack_escape(alert.dedup_key)}`"
    )
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]})
    fallback = f"{mark} [{alert.severity.value}] {alert.title}"
    if alert.text.strip():
        fallback += f": {alert.text}"
    return {"text": _clip(slack_escape(fallback), _SLACK_SECTION_MAX), "blocks": blocks}


def render_payload(alert: Alert, fmt: WebhookFormat) -> dict[str, Any]:
    """The body a webhook of format ``fmt`` receives for ``alert``."""
    return slack_payload(alert) if fmt is WebhookFormat.slack else json_payload(alert)


def encode_body(payload: Mapping[str, Any]) -> bytes:
    """The exact bytes sent (and signed): compact UTF-8 JSON."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, *, timestamp: int) -> str:
    """The ``X-SpecLedger-Signature`` value for ``body`` sent at ``timestamp``.

    Args:
        secret: The webhook's signing secret.
        body: The request body, bytes exactly as sent.
        timestamp: Unix seconds of the attempt.

    Returns:
        ``"t=<timestamp>,v1=<hex HMAC-SHA256 of f'{timestamp}.{body}'>"``.
    """
    return f"t={timestamp},v1={_mac(secret, timestamp, body)}"


def verify_signature(
    secret: str,
    body: bytes,
    header: str | None,
    *,
    now: datetime,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
) -> bool:
    """Whether a request's signature header is valid for its body: what receivers run.

    Args:
        secret: The webhook's signing secret (shown once by ``alerts webhooks add``).
        body: The raw request body as received (before any JSON parsing).
        header: The ``X-SpecLedger-Signature`` header, or None when missing.
        now: The receiver's current time, aware.
        tolerance_seconds: The largest accepted distance between ``t`` and ``now``.

    Returns:
        True if ``t`` is within the tolerance and one ``v1`` matches, in constant time.
    """
    if not header:
        return False
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        return False
    if abs(now.timestamp() - timestamp) > tolerance_seconds:
        return False
    expected = _mac(secret, timestamp, body)
    matches = [hmac.compare_digest(expected.encode(), c.encode()) for c in candidates]
    return any(matches)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with a cap and a maximum number of attempts.

    After failed attempt ``n`` (1-based) the next one waits
    ``min(max_delay_seconds, base_delay_seconds * multiplier ** (n - 1))``; after attempt
    ``max_attempts`` the delivery has failed. The defaults retry for about three hours:
    30 s, 1, 2, 4, 8, 16 and 32 min, then hourly, ten attempts in all.
    """

    max_attempts: int = 10
    base_delay_seconds: float = 30.0
    max_delay_seconds: float = 3600.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidAlert("max_attempts must be at least 1")
        if not (0 < self.base_delay_seconds <= self.max_delay_seconds < math.inf):
            raise InvalidAlert("delays must satisfy 0 < base_delay_seconds <= max_delay_seconds")
        if self.multiplier < 1:
            raise InvalidAlert("multiplier must be at least 1")

    def delay_after(self, attempts: int) -> timedelta | None:
        """The wait after ``attempts`` failed attempts, or None when there is no next one."""
        if attempts >= self.max_attempts:
            return None
        exponent = max(attempts - 1, 0)
        # Compare in log space: multiplier ** exponent overflows a float for large exponents.
        cap = self.max_delay_seconds
        if exponent * math.log(self.multiplier) >= math.log(cap / self.base_delay_seconds):
            return timedelta(seconds=cap)
        return timedelta(seconds=min(cap, self.base_delay_seconds * self.multiplier**exponent))

    def schedule(self) -> list[timedelta]:
        """Every wait between attempts, in order (``max_attempts - 1`` of them)."""
        delays = (self.delay_after(n) for n in range(1, self.max_attempts))
        return [d for d in delays if d is not None]


DEFAULT_RETRY = RetryPolicy()


def validate_webhook_url(url: str) -> str:
    """A webhook URL, stripped, if it is an absolute http(s) URL with a host.

    Raises:
        InvalidWebhook: Otherwise (the message shows the URL redacted only).
    """
    url = url.strip()
    parts = urlsplit(url)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or len(url) > MAX_URL
        or any(c.isspace() for c in url)
    ):
        raise InvalidWebhook(
            f"webhook URL {redact_url(url)} is not an absolute http:// or https:// URL "
            f"of at most {MAX_URL} characters"
        )
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise InvalidWebhook(f"webhook URL {redact_url(url)} has an invalid port") from None
    return url


def redact_url(url: str) -> str:
    """``scheme://host[:port]/…``: a URL as listings, logs and errors may show it.

    Webhook URLs can be secrets themselves (Slack's are), so the path, query, fragment and
    any user or password are never shown.
    """
    parts = urlsplit(url.strip())
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    scheme = parts.scheme or "?"
    rest = "/…" if parts.path not in ("", "/") or parts.query or parts.fragment else "/"
    return f"{scheme}://{host}{port}{rest}"


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]+")


def safe_error(message: str, *, url: str, secrets: tuple[str, ...] = ()) -> str:
    """An error message fit for the delivery log: the webhook URL redacted, secrets
    removed, control characters squeezed, at most :data:`MAX_ERROR` characters."""
    text = message
    parts = urlsplit(url)
    hidden = [url, *secrets, parts.path, parts.query, parts.fragment]
    hidden += [parts.username or "", parts.password or ""]
    hidden += [value for _, value in parse_qsl(parts.query)]
    # Path segments long enough to be tokens (Slack's last one is 24 characters).
    hidden += [segment for segment in parts.path.split("/") if len(segment) >= 8]
    for value in sorted({h for h in hidden if len(h) > 1}, key=len, reverse=True):
        replacement = redact_url(url) if value == url else "…"
        text = text.replace(value, replacement)
    text = _UNPRINTABLE.sub(" ", text).strip()
    return _clip(text, MAX_ERROR)


def parse_kinds(values: list[str] | tuple[str, ...] | None) -> list[AlertKind] | None:
    """Kinds a webhook subscribes to, from names (comma-separated allowed); None for all.

    Raises:
        InvalidWebhook: For a name that is not a producer kind.
    """
    if not values:
        return None
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    known = {k.value: k for k in PRODUCER_KINDS}
    unknown = sorted({n for n in names if n not in known})
    if unknown:
        raise InvalidWebhook(
            f"unknown alert kind(s) {', '.join(unknown)}; choose from {', '.join(known)}"
        )
    return sorted({known[n] for n in names}, key=PRODUCER_KINDS.index) or None


def receives(kinds: list[str] | None, kind: AlertKind) -> bool:
    """Whether a webhook subscribed to ``kinds`` (None: all) receives alerts of ``kind``."""
    return kind is AlertKind.test or kinds is None or kind.value in kinds
