"""The billing join (tag or registered ResourceId) and the ``team`` shared-cost policy, on
both databases: each row's ledger entries are checked to the micro.

DESIGN.md, "Billing join": FOCUS rows map to deployments by the tag ``specledger-deployment``
or by the ``ResourceId`` registered for a replica; rows that match nothing stay unallocated.
Shared rows (networking, storage) follow the deployment's policy; ``team`` gives them all to
one named team.
"""

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.cli.ledger import month_window
from app.deployments.service import add_deployment, add_replica
from app.models import BillingRow, LedgerEntry
from ingest.service import IngestOptions, ingest_billing
from tests.factories import at, insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

TAG = "specledger-deployment"
UNTAGGED = "{}"

Entry = tuple[str, str, str | None, str | None, str | None, int, int]
"""(kind, method, deployment, replica, team, effective micros, billed micros)"""


def _tagged(deployment: str) -> str:
    return json.dumps({TAG: deployment})


def _allocate(engine: Engine, tmp_path: Path, rows: list[dict[str, str]]) -> None:
    ingest_billing(engine, str(write_focus_csv(tmp_path / "oct.csv", rows)), IngestOptions())
    with Session(engine) as session, session.begin():  # the caller's unit of work
        run_allocation(session, month_window("2026-10"), share_idle=False, tag_key=TAG)


def _entries(engine: Engine) -> dict[str, list[Entry]]:
    """Ledger entries by the ChargeDescription of their billing row, sorted."""
    by_row: dict[str, list[Entry]] = {}
    with engine.connect() as conn:
        for description, *entry in conn.execute(
            select(
                BillingRow.charge_description,
                LedgerEntry.kind,
                LedgerEntry.method,
                LedgerEntry.deployment,
                LedgerEntry.replica,
                LedgerEntry.team,
                LedgerEntry.effective_cost_micros,
                LedgerEntry.billed_cost_micros,
            ).join(LedgerEntry, LedgerEntry.billing_row_id == BillingRow.id)
        ):
            by_row.setdefault(description, []).append(tuple(entry))  # type: ignore[arg-type]
    return {
        description: sorted(entries, key=lambda e: tuple(str(v) for v in e))
        for description, entries in by_row.items()
    }


@pytest.fixture
def registry(engine: Engine) -> Engine:
    """d1 (proportional): replica r1 (2 GPUs, ResourceId i-r1) and r2 (2 GPUs, none).
    d2 (team policy, team platform): replica q1 (1 GPU, ResourceId i-q1).
    In hour 0: search uses 720 GPU-s on d1/r1, ads 1440 GPU-s on d1/r2; on d2/q1 search uses
    100 GPU-s and ads 300 GPU-s."""
    with Session(engine) as session, session.begin():
        add_deployment(session, name="d1")
        add_replica(session, deployment="d1", name="r1", gpus=2, resource_id="i-r1")
        add_replica(session, deployment="d1", name="r2", gpus=2)
        add_deployment(session, name="d2", shared_policy="team", shared_team="platform")
        add_replica(session, deployment="d2", name="q1", gpus=1, resource_id="i-q1")
    insert_usage(
        engine,
        [
            usage_record(
                deployment="d1", replica="r1", team="search", arrived=at(0, 10), gpu_ns=720 * 10**9
            ),
            usage_record(
                deployment="d1", replica="r2", team="ads", arrived=at(0, 20), gpu_ns=1440 * 10**9
            ),
            usage_record(
                deployment="d2", replica="q1", team="search", arrived=at(0, 30), gpu_ns=100 * 10**9
            ),
            usage_record(
                deployment="d2", replica="q1", team="ads", arrived=at(0, 40), gpu_ns=300 * 10**9
            ),
        ],
    )
    return engine


class TestResourceIdJoin:
    def test_an_untagged_row_joins_the_replica_registered_for_its_resource_id(
        self, registry: Engine, tmp_path: Path
    ) -> None:
        rows = [
            focus_row(cost="7.20", Tags=UNTAGGED, ResourceId="i-r1", ChargeDescription="by-id"),
        ]
        _allocate(registry, tmp_path, rows)

        # Only r1's request, against r1's capacity: 2 GPUs x 3600 s = 7200 GPU-s;
        # search 720 GPU-s -> 7.20 x 720 / 7200 = 0.72; the rest of r1 is idle.
        assert _entries(registry)["by-id"] == [
            ("idle", "gpu_seconds", "d1", "r1", None, 6_480_000, 6_480_000),
            ("request", "gpu_seconds", "d1", "r1", "search", 720_000, 720_000),
        ]

    def test_a_tagged_row_with_an_unknown_resource_id_joins_the_whole_deployment(
        self, registry: Engine, tmp_path: Path
    ) -> None:
        rows = [
            focus_row(
                cost="3.60", Tags=_tagged("d1"), ResourceId="i-unknown", ChargeDescription="by-tag"
            ),
        ]
        _allocate(registry, tmp_path, rows)

        # Both replicas: 4 GPUs x 3600 s = 14400 GPU-s; search 720 -> 0.18, ads 1440 -> 0.36.
        assert _entries(registry)["by-tag"] == [
            ("idle", "gpu_seconds", "d1", None, None, 3_060_000, 3_060_000),
            ("request", "gpu_seconds", "d1", "r1", "search", 180_000, 180_000),
            ("request", "gpu_seconds", "d1", "r2", "ads", 360_000, 360_000),
        ]

    def test_a_registered_resource_id_wins_over_the_tag(
        self, registry: Engine, tmp_path: Path
    ) -> None:
        rows = [
            focus_row(cost="7.20", Tags=_tagged("d2"), ResourceId="i-r1", ChargeDescription="both"),
        ]
        _allocate(registry, tmp_path, rows)

        assert [e[:5] for e in _entries(registry)["both"]] == [
            ("idle", "gpu_seconds", "d1", "r1", None),
            ("request", "gpu_seconds", "d1", "r1", "search"),
        ]

    def test_a_row_matching_neither_tag_nor_resource_id_stays_unallocated(
        self, registry: Engine, tmp_path: Path
    ) -> None:
        rows = [
            focus_row(cost="2.50", Tags=UNTAGGED, ResourceId="i-stranger", ChargeDescription="x"),
            focus_row(cost="1.25", Tags=_tagged("nobody"), ResourceId="", ChargeDescription="y"),
        ]
        _allocate(registry, tmp_path, rows)

        assert _entries(registry) == {
            "x": [("unallocated", "none", None, None, None, 2_500_000, 2_500_000)],
            "y": [("unallocated", "none", None, None, None, 1_250_000, 1_250_000)],
        }


class TestTeamSharedPolicy:
    def test_shared_rows_go_whole_to_the_named_team(self, registry: Engine, tmp_path: Path) -> None:
        rows = [
            # search and ads both use d2 in this hour; neither gets any of it
            focus_row(
                cost="1.00",
                ServiceCategory="Networking",
                Tags=_tagged("d2"),
                ResourceId="",
                ChargeDescription="network",
            ),
            # nobody uses d2 in hour 5: the named team pays all the same
            focus_row(
                hour=5,
                cost="0.40",
                ServiceCategory="Storage",
                Tags=_tagged("d2"),
                ResourceId="",
                ChargeDescription="storage",
            ),
        ]
        _allocate(registry, tmp_path, rows)

        assert _entries(registry) == {
            "network": [("shared", "team", "d2", None, "platform", 1_000_000, 1_000_000)],
            "storage": [("shared", "team", "d2", None, "platform", 400_000, 400_000)],
        }

    def test_gpu_rows_of_a_team_policy_deployment_still_split_by_gpu_seconds(
        self, registry: Engine, tmp_path: Path
    ) -> None:
        rows = [
            focus_row(cost="2.00", Tags=UNTAGGED, ResourceId="i-q1", ChargeDescription="gpu"),
        ]
        _allocate(registry, tmp_path, rows)

        # 1 GPU x 3600 s: search 100/3600, ads 300/3600, idle 3200/3600 of 2.00, to the micro
        # by largest remainder (55555.6 -> 55555, 166666.7 -> 166667, 1777777.8 -> 1777778).
        assert _entries(registry)["gpu"] == [
            ("idle", "gpu_seconds", "d2", "q1", None, 1_777_778, 1_777_778),
            ("request", "gpu_seconds", "d2", "q1", "ads", 166_667, 166_667),
            ("request", "gpu_seconds", "d2", "q1", "search", 55_555, 55_555),
        ]

    def test_the_same_shared_row_follows_each_deployments_policy(
        self, registry: Engine, tmp_path: Path
    ) -> None:
        rows = [
            focus_row(
                cost="1.00",
                ServiceCategory="Networking",
                Tags=_tagged(name),
                ResourceId="",
                ChargeDescription=name,
            )
            for name in ("d1", "d2")
        ]
        _allocate(registry, tmp_path, rows)

        entries = _entries(registry)
        # d1 is proportional: its requests' GPU-seconds (720 : 1440), no idle for shared rows;
        # the shares are booked as shared cost, not as the requests' own.
        assert entries["d1"] == [
            ("shared", "proportional", "d1", "r1", "search", 333_333, 333_333),
            ("shared", "proportional", "d1", "r2", "ads", 666_667, 666_667),
        ]
        assert entries["d2"] == [("shared", "team", "d2", None, "platform", 1_000_000, 1_000_000)]
