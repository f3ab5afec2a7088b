"""The pure side of alerts: values, payloads, signatures, backoff, redaction."""

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from app.domain.alerts import (
    PRODUCER_KINDS,
    Alert,
    AlertKind,
    InvalidAlert,
    InvalidWebhook,
    RetryPolicy,
    Severity,
    WebhookFormat,
    encode_body,
    json_payload,
    parse_kinds,
    receives,
    redact_url,
    render_payload,
    safe_error,
    signature_header,
    slack_payload,
    validate_webhook_url,
    verify_signature,
)

NOW = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
SECRET = "whsec_test"


def alert(**overrides: object) -> Alert:
    fields: dict[str, object] = {
        "kind": AlertKind.waste_finding,
        "dedup_key": "waste:low_acceptance:search:2026-12",
        "title": "Low draft acceptance on search",
        "text": "Acceptance 31% (upper bound 38%) below 50%.",
        "occurred_at": NOW,
        "details": {"monthly_cost": "412.500000", "acceptance": 0.31},
    }
    fields.update(overrides)
    return Alert(**fields)  # type: ignore[arg-type]


class TestAlert:
    def test_normalises_to_utc_and_plain_json(self) -> None:
        plus_one = timezone(timedelta(hours=1))
        made = alert(
            kind="anomaly",
            severity="critical",
            dedup_key="  anomaly:1  ",
            occurred_at=datetime(2026, 12, 5, 10, 30, tzinfo=plus_one),
            details={"days": (1, 2)},
        )
        assert made.kind is AlertKind.anomaly
        assert made.severity is Severity.critical
        assert made.dedup_key == "anomaly:1"
        assert made.occurred_at == NOW
        assert made.occurred_at.tzinfo is UTC
        assert made.details == {"days": [1, 2]}

    @pytest.mark.parametrize(
        ("field", "value", "message"),
        [
            ("dedup_key", " ", "dedup_key"),
            ("dedup_key", "x" * 257, "dedup_key"),
            ("dedup_key", "a\nb", "dedup_key"),
            ("title", "", "title"),
            ("occurred_at", datetime(2026, 12, 5), "naive"),  # noqa: DTZ001
            ("details", {"spent": Decimal("1.5")}, "JSON"),
            ("details", {"ratio": float("nan")}, "JSON"),
            ("kind", "budget", "budget"),
        ],
    )
    def test_refuses_what_cannot_be_sent(self, field: str, value: object, message: str) -> None:
        with pytest.raises(InvalidAlert, match=message):
            alert(**{field: value})


def test_json_payload() -> None:
    assert json_payload(alert()) == {
        "type": "specledger.alert",
        "version": 1,
        "kind": "waste_finding",
        "dedup_key": "waste:low_acceptance:search:2026-12",
        "severity": "warning",
        "title": "Low draft acceptance on search",
        "text": "Acceptance 31% (upper bound 38%) below 50%.",
        "occurred_at": "2026-12-05T09:30:00Z",
        "details": {"monthly_cost": "412.500000", "acceptance": 0.31},
    }
    assert render_payload(alert(), WebhookFormat.json) == json_payload(alert())


def test_slack_payload_keeps_to_slacks_limits() -> None:
    long = alert(
        title="T" * 200,
        text="",
        details={f"k{i}": {"nested": i} for i in range(12)},
        severity=Severity.critical,
    )
    body = slack_payload(long)
    assert render_payload(long, WebhookFormat.slack) == body
    header, fields, context = body["blocks"]  # no section for an empty text
    assert len(header["text"]["text"]) == 150
    assert header["text"]["text"].endswith("…")
    assert len(fields["fields"]) == 10
    assert fields["fields"][0]["text"] == '*k0*\n{"nested": 0}'
    assert context["elements"][0]["text"].startswith("*critical* · waste_finding · ")
    assert body["text"].startswith("🚨 [critical] TTT")


class TestSignature:
    body = encode_body(json_payload(alert()))
    stamp = int(NOW.timestamp())

    def test_round_trip(self) -> None:
        header = signature_header(SECRET, self.body, timestamp=self.stamp)
        assert header.startswith(f"t={self.stamp},v1=")
        assert len(header.split("v1=")[1]) == 64
        assert verify_signature(SECRET, self.body, header, now=NOW + timedelta(seconds=299))

    def test_refuses_a_changed_body_a_wrong_secret_or_an_old_stamp(self) -> None:
        header = signature_header(SECRET, self.body, timestamp=self.stamp)
        assert not verify_signature(SECRET, self.body + b" ", header, now=NOW)
        assert not verify_signature("whsec_other", self.body, header, now=NOW)
        assert not verify_signature(SECRET, self.body, header, now=NOW + timedelta(seconds=301))
        assert not verify_signature(SECRET, self.body, header, now=NOW - timedelta(seconds=301))
        forged = header.replace(f"t={self.stamp}", f"t={self.stamp + 60}")
        assert not verify_signature(SECRET, self.body, forged, now=NOW)

    @pytest.mark.parametrize(
        "header", [None, "", "v1=abc", f"t={int(NOW.timestamp())}", "t=x,v1=y"]
    )
    def test_refuses_malformed_headers(self, header: str | None) -> None:
        assert not verify_signature(SECRET, self.body, header, now=NOW)

    def test_any_of_several_signatures_may_match(self) -> None:
        good = signature_header(SECRET, self.body, timestamp=self.stamp).split(",")[1]
        header = f"t={self.stamp},v1={'0' * 64},{good}"
        assert verify_signature(SECRET, self.body, header, now=NOW)


class TestRetryPolicy:
    def test_default_schedule_doubles_up_to_an_hour(self) -> None:
        assert [d.total_seconds() for d in RetryPolicy().schedule()] == [
            30,
            60,
            120,
            240,
            480,
            960,
            1920,
            3600,
            3600,
        ]

    def test_no_wait_after_the_last_attempt(self) -> None:
        policy = RetryPolicy(max_attempts=3, base_delay_seconds=10, max_delay_seconds=15)
        assert policy.delay_after(1) == timedelta(seconds=10)
        assert policy.delay_after(2) == timedelta(seconds=15)
        assert policy.delay_after(3) is None
        huge = RetryPolicy(max_attempts=10_000)
        assert huge.delay_after(5_000) == timedelta(hours=1)  # no float overflow

    @pytest.mark.parametrize(
        "options",
        [
            {"max_attempts": 0},
            {"base_delay_seconds": 0},
            {"base_delay_seconds": 10, "max_delay_seconds": 5},
            {"multiplier": 0.5},
        ],
    )
    def test_refuses_nonsense(self, options: dict[str, float]) -> None:
        with pytest.raises(InvalidAlert):
            RetryPolicy(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/XXXX", "https://hooks.slack.com/…"),
        ("https://user:pw@example.com:8443/a?token=s", "https://example.com:8443/…"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com/", "http://example.com/"),
        ("http://example.com/?k=v", "http://example.com/…"),
        ("http://[::1]:9000/hook", "http://[::1]:9000/…"),
        ("not a url", "?://?/…"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_safe_error_hides_the_url_and_secrets() -> None:
    url = "https://u:pa55word@hooks.example.com/services/T0/SECRETPATH?token=tok123"
    message = (
        f"Error for url '{url}' with whsec_abc\nat /services/T0/SECRETPATH and tok123 " + "x" * 300
    )
    shown = safe_error(message, url=url, secrets=("whsec_abc",))
    assert len(shown) <= 200
    assert "https://hooks.example.com/…" in shown
    for hidden in ("SECRETPATH", "tok123", "whsec_abc", "pa55word", "\n"):
        assert hidden not in shown


def test_validate_webhook_url() -> None:
    assert validate_webhook_url(" https://a.example.com/x ") == "https://a.example.com/x"
    for bad in ("ftp://a.example.com/x", "https:///x", "https://a.example.com/x y", "//a/b"):
        with pytest.raises(InvalidWebhook):
            validate_webhook_url(bad)
    with pytest.raises(InvalidWebhook, match="port"):
        validate_webhook_url("https://a.example.com:99999/secret")


def test_kinds() -> None:
    assert parse_kinds(None) is None
    assert parse_kinds([]) is None
    assert parse_kinds(["anomaly,budget_threshold", "anomaly"]) == [
        AlertKind.budget_threshold,
        AlertKind.anomaly,
    ]
    with pytest.raises(InvalidWebhook, match="test"):
        parse_kinds(["test"])  # a test alert goes to one webhook, never by subscription
    assert receives(None, AlertKind.anomaly)
    assert not receives(["anomaly"], AlertKind.waste_finding)
    assert receives(["anomaly"], AlertKind.test)
    assert AlertKind.test not in PRODUCER_KINDS
