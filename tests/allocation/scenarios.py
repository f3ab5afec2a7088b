"""Generated months for the allocation plan: several small fleets side by side.

A :class:`Month` is a batch of independent scenarios (their deployments, resource ids and
tags carry the scenario's number), so one run of the plan checks many of them at once. It
becomes the plan's inputs directly (:meth:`Month.inputs`) or a FOCUS file, a registry and
usage records in a database (:func:`store`), whose loader must give the same inputs.
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from app.allocation.plan import HOUR_US
from app.deployments.service import add_deployment, add_replica
from app.domain.ledger import SharedPolicy
from app.domain.money import format_picos, residual_column, split_picos
from ingest.service import IngestOptions, ingest_billing
from tests.factories import insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

TAG = "specledger-deployment"
MONTH_START = datetime(2026, 10, 1, tzinfo=UTC)
START_US = int(MONTH_START.timestamp()) * 1_000_000
REPLICA_GPUS = {"r1": 4, "r2": 2}
money = st.integers(min_value=-(10**15), max_value=10**15)
"""An amount in picos (up to 1,000 units, 12 decimal places; credits negative)."""


@dataclass(frozen=True)
class Row:
    start_h: int
    hours: int
    effective: int
    """Exact amounts in picos (``app.domain.money``), as the bill states them."""
    billed: int
    listed: int
    contracted: int
    target: str | None
    """Deployment tag ("d1", "d2"), or None for an untagged row."""
    resource: str | None
    """Replica whose ResourceId the row names ("r1", "r2"), or None."""
    compute: bool
    scenario: int = 0


@dataclass(frozen=True)
class Request:
    deployment: str
    replica: str
    team: str | None
    session: str
    arrived_s: int
    seconds: int
    gpu_ns: int
    scenario: int = 0


@dataclass(frozen=True)
class Fleet:
    policies: dict[str, tuple[SharedPolicy, str | None]]
    scenario: int = 0


@dataclass(frozen=True)
class Month:
    rows: list[Row]
    requests: list[Request]
    fleets: list[Fleet]

    def inputs(self) -> dict[str, pa.Table]:
        """The plan's inputs, as the database loader should produce them."""
        rows = self.rows
        return {
            "rows": pa.table(
                {
                    "row_id": list(range(1, len(rows) + 1)),
                    "start_us": [START_US + r.start_h * HOUR_US for r in rows],
                    "end_us": [START_US + (r.start_h + r.hours) * HOUR_US for r in rows],
                    **_money("effective", [r.effective for r in rows]),
                    **_money("billed", [r.billed for r in rows]),
                    **_money("list_cost", [r.listed for r in rows]),
                    **_money("contracted", [r.contracted for r in rows]),
                    "currency": ["USD"] * len(rows),
                    "tag_value": [_name(r.scenario, r.target) for r in rows],
                    "resource_id": [_resource(r.scenario, r.resource) for r in rows],
                    "category_compute": [r.compute for r in rows],
                    "corrects_month": pa.nulls(len(rows), pa.string()),
                }
            ),
            "deployments": pa.table(
                {
                    "deployment": [_name(f.scenario, d) for f in self.fleets for d in f.policies],
                    "tag_value": [_name(f.scenario, d) for f in self.fleets for d in f.policies],
                    "gpus_total": [
                        sum(REPLICA_GPUS.values()) for f in self.fleets for _ in f.policies
                    ],
                    "shared_policy": [str(p) for f in self.fleets for p, _ in f.policies.values()],
                    "shared_team": [t for f in self.fleets for _, t in f.policies.values()],
                }
            ),
            "replicas": pa.table(
                {
                    "deployment": [
                        _name(f.scenario, d)
                        for f in self.fleets
                        for d in f.policies
                        for _ in REPLICA_GPUS
                    ],
                    "replica": [r for f in self.fleets for _ in f.policies for r in REPLICA_GPUS],
                    "gpus": [
                        g for f in self.fleets for _ in f.policies for g in REPLICA_GPUS.values()
                    ],
                    "resource_id": [
                        f"i-{f.scenario}-{d}-{r}"
                        for f in self.fleets
                        for d in f.policies
                        for r in REPLICA_GPUS
                    ],
                }
            ),
            "usage": pa.table(
                {
                    "usage_ord": list(range(1, len(self.requests) + 1)),
                    "event_id": [f"e{i}" for i in range(1, len(self.requests) + 1)],
                    "session_id": [q.session for q in self.requests],
                    "team": pa.array([q.team for q in self.requests], pa.string()),
                    "deployment": [_name(q.scenario, q.deployment) for q in self.requests],
                    "replica": [q.replica for q in self.requests],
                    "arrived_us": [START_US + q.arrived_s * 1_000_000 for q in self.requests],
                    "finished_us": [
                        START_US + (q.arrived_s + q.seconds) * 1_000_000 for q in self.requests
                    ],
                    "gpu_ns": [q.gpu_ns for q in self.requests],
                }
            ),
        }


def _name(scenario: int, deployment: str | None) -> str | None:
    return None if deployment is None else f"s{scenario}-{deployment}"


def _money(name: str, picos: list[int]) -> dict[str, list[int]]:
    """A column of exact amounts as the loader stores them: micros and residual picos."""
    parts = [split_picos(p) for p in picos]
    return {name: [m for m, _ in parts], residual_column(name): [r for _, r in parts]}


def _resource(scenario: int, replica: str | None) -> str | None:
    return None if replica is None else f"i-{scenario}-d1-{replica}"


@st.composite
def scenario(draw: st.DrawFn, number: int) -> tuple[list[Row], list[Request], Fleet]:
    rows = [
        Row(
            start_h=draw(st.integers(0, 5)),
            hours=draw(st.sampled_from([1, 1, 1, 2, 30])),
            effective=draw(money),
            billed=draw(money),
            listed=draw(money),
            contracted=draw(money),
            target=draw(st.sampled_from(["d1", "d2", None])),
            resource=draw(st.sampled_from([None, None, "r1", "r2"])),
            compute=draw(st.booleans()),
            scenario=number,
        )
        for _ in range(draw(st.integers(1, 8)))
    ]
    # Repeated rows of one hour: the instances a pool sums.
    rows += [rows[0]] * draw(st.integers(0, 3))
    requests = [
        Request(
            deployment=draw(st.sampled_from(["d1", "d2"])),
            replica=draw(st.sampled_from(["r1", "r2"])),
            team=draw(st.sampled_from(["a", "b", None])),
            session=f"s{draw(st.integers(0, 3))}",
            arrived_s=draw(st.integers(0, 8 * 3600)),
            seconds=draw(st.sampled_from([0, 1, 30, 600, 5400])),
            gpu_ns=draw(st.integers(0, 4 * 3600 * 10**9)),
            scenario=number,
        )
        for _ in range(draw(st.integers(0, 14)))
    ]
    policies: dict[str, tuple[SharedPolicy, str | None]] = {}
    for d in ("d1", "d2"):
        policy = draw(st.sampled_from(list(SharedPolicy)))
        # The registry refuses the team policy without a team; the others may name one.
        team = "platform" if policy is SharedPolicy.team else draw(st.sampled_from(["ops", None]))
        policies[d] = (policy, team)
    return rows, requests, Fleet(policies, number)


@st.composite
def months(draw: st.DrawFn, max_scenarios: int = 6) -> Month:
    rows: list[Row] = []
    requests: list[Request] = []
    fleets: list[Fleet] = []
    for number in range(draw(st.integers(1, max_scenarios))):
        more_rows, more_requests, fleet = draw(scenario(number))
        rows += more_rows
        requests += more_requests
        fleets.append(fleet)
    return Month(rows, requests, fleets)


def store(session: Session, month: Month, folder: Path) -> None:
    """Write a month into the database: a FOCUS file ingested, the registry, the usage."""
    for fleet in month.fleets:
        for deployment, (policy, team) in fleet.policies.items():
            name = _name(fleet.scenario, deployment)
            assert name is not None
            add_deployment(session, name=name, shared_policy=policy, shared_team=team)
            for replica, gpus in REPLICA_GPUS.items():
                add_replica(
                    session,
                    deployment=name,
                    name=replica,
                    gpus=gpus,
                    resource_id=f"i-{fleet.scenario}-{deployment}-{replica}",
                )
    records = [_focus(r) for r in month.rows]
    path = write_focus_csv(folder / "month.csv", records)
    ingest_billing(session.connection(), str(path), IngestOptions(source="scenario"))
    if not month.requests:
        return
    insert_usage(
        session.connection(),
        [
            usage_record(
                deployment=f"s{q.scenario}-{q.deployment}",
                replica=q.replica,
                team=q.team,
                session_id=q.session,
                arrived=MONTH_START + timedelta(seconds=q.arrived_s),
                seconds=q.seconds,
                gpu_ns=q.gpu_ns,
                event_id=f"e{i}",
            )
            for i, q in enumerate(month.requests, start=1)
        ],
    )


def _focus(row: Row) -> dict[str, str]:
    def usd(picos: int) -> str:
        return format_picos(picos)

    start = MONTH_START + timedelta(hours=row.start_h)
    end = start + timedelta(hours=row.hours)
    tags: dict[str, Any] = {} if row.target is None else {TAG: _name(row.scenario, row.target)}
    return focus_row(
        cost=usd(row.effective),
        BilledCost=usd(row.billed),
        ListCost=usd(row.listed),
        ContractedCost=usd(row.contracted),
        ChargePeriodStart=f"{start:%Y-%m-%dT%H:%M:%SZ}",
        ChargePeriodEnd=f"{end:%Y-%m-%dT%H:%M:%SZ}",
        ServiceCategory="Compute" if row.compute else "Networking",
        ResourceId=_resource(row.scenario, row.resource) or "",
        Tags=json.dumps(tags),
        ChargeCategory="Credit" if row.effective < 0 else "Usage",
    )
