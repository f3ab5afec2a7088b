"""Unit costs, reconciliation and chargeback exports through the CLI, on both databases."""

import json
from decimal import Decimal
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from app.cli import app
from app.models import BillingRow
from tests.factories import at, insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

runner = CliRunner()


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def allocated(engine: Engine, cli_env: str, tmp_path: Path) -> Engine:
    rows = [
        focus_row(hour=h, cost="7.20", ListCost="9.00", ContractedCost="8.10") for h in range(2)
    ]
    rows.append(
        focus_row(
            hour=0,
            cost="1.00",
            ServiceCategory="Networking",
            ResourceId="",
            ChargePeriodEnd="2026-10-02T00:00:00Z",
        )
    )
    rows.append(focus_row(hour=0, cost="0.55", Tags='{"other": "x"}', ServiceCategory="Storage"))
    _ok("ingest", "billing", str(write_focus_csv(tmp_path / "oct.csv", rows)))
    _ok("deployments", "add", "d1", "--shared-policy", "even")
    _ok("deployments", "add-replica", "d1", "r1", "--gpus", "2")
    insert_usage(
        engine,
        [
            usage_record(
                arrived=at(0, 1),
                seconds=10,
                gpu_ns=720 * 10**9,
                team="search",
                session_id="s1",
                tags={"app": "chat"},
            ),
            usage_record(
                arrived=at(0, 1, 5),
                seconds=10,
                gpu_ns=360 * 10**9,
                team="search",
                session_id="s1",
                tags={"app": "chat"},
            ),
            usage_record(
                arrived=at(1, 30),
                seconds=4,
                gpu_ns=1_440 * 10**9,
                team="ads",
                session_id="s2",
                tags={"app": "rag"},
                num_drafts=10,
                draft_tokens=40,
                accepted_tokens=10,
                cost_center="CC-7",
            ),
        ],
    )
    _ok("allocate", "--month", "2026-10")
    return engine


def test_reconciliation_balances_to_the_micro(allocated: Engine) -> None:
    report = json.loads(_ok("reconcile", "--month", "2026-10", "--json"))
    usd = report["currencies"]["USD"]
    assert report["balanced"] is True
    assert usd["bill"]["effective"] == "15.950000"
    parts = sum(Decimal(usd[k]["effective"]) for k in ("request", "shared", "idle", "unallocated"))
    assert parts == Decimal("15.950000")
    assert usd["unallocated"]["effective"] == "0.550000"
    assert [r["service_name"] for r in report["unallocated_rows"]] == ["EC2"]
    assert report["unpriced_usage"] == []


def test_reconciliation_lists_usage_no_bill_can_price(allocated: Engine) -> None:
    # Loaded past the name check (ingest usage --allow-unknown-deployments): no share of the
    # bill reaches it, so it must be seen, not costed at 0 in silence.
    stray = [
        usage_record(deployment="d9", arrived=at(0, 5), gpu_ns=90 * 10**9, team="search"),
        usage_record(deployment="d9", arrived=at(0, 6), gpu_ns=30 * 10**9, team="ads"),
        usage_record(deployment="d9", arrived=at(0, 6, month=11), gpu_ns=10**9, team="ads"),
    ]
    insert_usage(allocated, stray)
    report = json.loads(_ok("reconcile", "--month", "2026-10", "--json"))
    assert report["balanced"] is True  # the bill is still all booked
    assert report["unpriced_usage"] == [{"deployment": "d9", "requests": 2, "gpu_seconds": 120.0}]
    text = _ok("reconcile", "--month", "2026-10")
    assert "2 request(s) of deployment 'd9' (120.0 GPU-s) are not priced" in text
    assert "specledger deployments add d9" in text


def test_unit_costs_by_team_add_up_to_the_bill(allocated: Engine) -> None:
    body = json.loads(_ok("costs", "--month", "2026-10", "--by", "team", "--json"))
    assert body["currency"] == "USD"  # the bill's: every amount is in it
    assert _ok("costs", "--month", "2026-10", "--by", "team").endswith(
        "Amounts in USD, the month's bill's currency.\n"
    )
    lines = body["lines"]
    by_team = {line["team"]: line for line in lines}
    assert set(by_team) == {"search", "ads", "(idle)", "(unallocated)"}
    assert sum(Decimal(line["effective_cost"]) for line in lines) == Decimal("15.95")
    search = by_team["search"]
    # hour 0: 7.20 * 1080 / 7200 GPU-s, plus half of the evenly shared 1.00 networking row
    assert Decimal(search["effective_cost"]) == Decimal("1.08") + Decimal("0.50")
    assert search["session_seconds"] == 15.0  # two overlapping requests: 0..10 s and 5..15 s
    assert search["gpu_seconds"] == 1080.0
    assert search["cost_per_1k_session_seconds"] == str(
        (Decimal("1.58") * 1000 / 15).quantize(Decimal("0.000001"))
    )
    ads = by_team["ads"]
    assert ads["acceptance_rate"] == 0.25
    assert ads["mean_acceptance_length"] == 2.0


def test_costs_by_tag_and_session_and_team_filter(allocated: Engine) -> None:
    lines = json.loads(_ok("costs", "--month", "2026-10", "--by", "tag:app,session", "--json"))[
        "lines"
    ]
    keys = {(line["tag:app"], line["session"]) for line in lines}
    assert {("chat", "s1"), ("rag", "s2")} <= keys
    only_ads = json.loads(
        _ok("costs", "--month", "2026-10", "--by", "team", "--team", "ads", "--json")
    )["lines"]
    assert {line["team"] for line in only_ads} == {"ads"}
    bad = runner.invoke(app, ["costs", "--month", "2026-10", "--by", "colour"])
    assert bad.exit_code == 2
    assert "cannot group by 'colour'" in bad.stderr


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_chargeback_totals_equal_the_reconciliation(
    allocated: Engine, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / f"chargeback.{fmt}"
    _ok("export", "chargeback", "--month", "2026-10", "--format", fmt, "--out", str(out))
    table = pq.read_table(out) if fmt == "parquet" else pacsv.read_csv(out)
    costs = [Decimal(str(v)) for v in table.column("effective_cost").to_pylist()]
    assert sum(costs) == Decimal("15.95")
    assert set(table.column_names) >= {
        "team",
        "deployment",
        "cost_per_1m_output_tokens",
        "session_seconds",
        "idle_share",
    }


def test_focus_export_shares_sum_back_to_each_source_row(allocated: Engine, tmp_path: Path) -> None:
    out = tmp_path / "allocated.parquet"
    _ok("export", "chargeback", "--month", "2026-10", "--format", "focus", "--out", str(out))
    table = pq.read_table(out).to_pylist()
    with allocated.connect() as conn:
        sources = {r.id: r for r in conn.execute(select(BillingRow))}
    for row_id, source in sources.items():
        shares = [r for r in table if r["x_SourceBillingRowId"] == row_id]
        assert shares, row_id
        for column, micros in (
            ("BilledCost", source.billed_cost_micros),
            ("EffectiveCost", source.effective_cost_micros),
            ("ListCost", source.list_cost_micros),
            ("ContractedCost", source.contracted_cost_micros),
        ):
            assert sum(r[column] for r in shares) == Decimal(micros) / 10**6
        assert all(
            r["ChargePeriodStart"] == f"{source.charge_period_start:%Y-%m-%dT%H:%M:%SZ}"
            for r in shares
        )
    requests = [
        r
        for r in table
        if r["AllocatedMethodId"] == "specledger:gpu-seconds"
        and r["AllocatedResourceId"]
        and r["AllocatedResourceId"].startswith("evt-")
    ]
    assert {json.loads(r["AllocatedTags"])["team"] for r in requests} == {"search", "ads"}
    assert all(r["ServiceProviderName"] == "AWS" for r in table)
