"""The allocation of billing rows to requests, idle time and teams, vectorised with numpy.

No database here: the repository loads plain arrays, this module returns the entries.
Every billing row's entries sum exactly to its EffectiveCost and its BilledCost.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from app.domain.allocation import split_by_weight_arrays
from app.domain.ledger import AllocationMethod, EntryKind, SharedPolicy

I64 = NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class DeploymentPolicy:
    name: str
    gpus_total: int
    """GPUs across the deployment's registered replicas (0: none registered)."""
    shared_policy: SharedPolicy = SharedPolicy.proportional
    shared_team: str | None = None
    replica_gpus: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BillingRows:
    """The rows to allocate. ``deployment``/``replica`` are None where nothing matched."""

    row_id: I64
    start_ns: I64
    end_ns: I64
    effective_micros: I64
    billed_micros: I64
    deployment: Sequence[str | None]
    replica: Sequence[str | None]
    is_compute: NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Usage:
    """Requests that may overlap the rows' charge periods."""

    deployment: Sequence[str]
    replica: Sequence[str]
    team: Sequence[str | None]
    arrived_ns: I64
    finished_ns: I64
    gpu_ns: I64


@dataclass
class Entries:
    """One entry per (billing row, share): parallel arrays."""

    row_index: list[I64] = field(default_factory=list)
    """Index into BillingRows."""
    usage_index: list[I64] = field(default_factory=list)
    """Index into Usage, or -1."""
    kind: list[NDArray[np.object_]] = field(default_factory=list)
    method: list[NDArray[np.object_]] = field(default_factory=list)
    team: list[NDArray[np.object_]] = field(default_factory=list)
    gpu_ns: list[I64] = field(default_factory=list)
    effective_micros: list[I64] = field(default_factory=list)
    billed_micros: list[I64] = field(default_factory=list)

    def add(
        self,
        *,
        row_index: I64,
        usage_index: I64,
        kind: EntryKind,
        method: AllocationMethod,
        team: NDArray[np.object_],
        gpu_ns: I64,
        effective: I64,
        billed: I64,
    ) -> None:
        n = len(row_index)
        self.row_index.append(row_index)
        self.usage_index.append(usage_index)
        # Object arrays of one shared string: 8 bytes an entry, not 4 per character.
        self.kind.append(np.full(n, kind, dtype=object))
        self.method.append(np.full(n, method, dtype=object))
        self.team.append(team)
        self.gpu_ns.append(gpu_ns)
        self.effective_micros.append(effective)
        self.billed_micros.append(billed)

    def concat(self) -> dict[str, np.ndarray]:
        if not self.row_index:
            empty_i = np.zeros(0, np.int64)
            return {
                "row_index": empty_i,
                "usage_index": empty_i,
                "kind": np.zeros(0, object),
                "method": np.zeros(0, object),
                "team": np.zeros(0, object),
                "gpu_ns": empty_i,
                "effective_micros": empty_i,
                "billed_micros": empty_i,
            }
        return {
            name: np.concatenate(getattr(self, name))
            for name in (
                "row_index",
                "usage_index",
                "kind",
                "method",
                "team",
                "gpu_ns",
                "effective_micros",
                "billed_micros",
            )
        }


def allocate(
    rows: BillingRows, usage: Usage, policies: dict[str, DeploymentPolicy], *, share_idle: bool
) -> dict[str, np.ndarray]:
    """Allocate every row; see DESIGN.md "Allocation" for the rules.

    Returns parallel arrays (see :class:`Entries`), one element per ledger entry.
    """
    entries = Entries()
    index = _UsageIndex(usage)
    pair_rows: list[I64] = []
    pair_usage: list[I64] = []
    pair_weight: list[I64] = []
    idle_weight = np.zeros(len(rows.row_id), np.int64)
    basis_rows: list[int] = []
    for r in range(len(rows.row_id)):
        name = rows.deployment[r]
        if name is None:
            continue
        policy = policies[name]
        if not rows.is_compute[r] and policy.shared_policy is not SharedPolicy.proportional:
            _allocate_shared_by_team(entries, r, rows, usage, index, policy)
            continue
        found, weight = index.overlapping(name, rows.replica[r], rows.start_ns[r], rows.end_ns[r])
        capacity = _capacity_ns(policy, rows.replica[r], rows.start_ns[r], rows.end_ns[r])
        used = int(weight.sum())
        idle = max(capacity - used, 0) if rows.is_compute[r] else 0
        if used == 0:
            idle = max(idle, 1)  # nobody to charge: the whole row is idle
        basis_rows.append(r)
        idle_weight[r] = idle
        keep = weight > 0
        pair_rows.append(np.full(int(keep.sum()), r, np.int64))
        pair_usage.append(found[keep])
        pair_weight.append(weight[keep])

    _split_rows(
        entries,
        rows,
        basis_rows,
        pair_rows,
        pair_usage,
        pair_weight,
        idle_weight,
        usage,
        share_idle=share_idle,
    )
    unmatched = np.array([i for i, d in enumerate(rows.deployment) if d is None], np.int64)
    if len(unmatched):
        entries.add(
            row_index=unmatched,
            usage_index=np.full(len(unmatched), -1, np.int64),
            kind=EntryKind.unallocated,
            method=AllocationMethod.none,
            team=np.full(len(unmatched), None, object),
            gpu_ns=np.zeros(len(unmatched), np.int64),
            effective=rows.effective_micros[unmatched],
            billed=rows.billed_micros[unmatched],
        )
    return entries.concat()


def _capacity_ns(policy: DeploymentPolicy, replica: str | None, start: int, end: int) -> int:
    gpus = policy.replica_gpus.get(replica, 0) if replica else policy.gpus_total
    return gpus * (end - start)


def _split_rows(
    entries: Entries,
    rows: BillingRows,
    basis_rows: list[int],
    pair_rows: list[I64],
    pair_usage: list[I64],
    pair_weight: list[I64],
    idle_weight: I64,
    usage: Usage,
    *,
    share_idle: bool,
) -> None:
    """Split each basis row across its requests plus one idle slot, both cost bases."""
    if not basis_rows:
        return
    basis = np.array(basis_rows, np.int64)
    req_rows = np.concatenate(pair_rows)
    req_usage = np.concatenate(pair_usage)
    req_weight = np.concatenate(pair_weight)
    # Idle is an extra share per row, unless it is shared back in proportion to usage.
    used = np.bincount(req_rows, weights=req_weight, minlength=len(rows.row_id))
    idle_rows = basis[used[basis] == 0] if share_idle else basis[idle_weight[basis] > 0]
    all_rows = np.concatenate([req_rows, idle_rows])
    all_weight = np.concatenate([req_weight, idle_weight[idle_rows]])
    order = np.argsort(all_rows, kind="stable")
    group_of_row = np.full(len(rows.row_id), -1, np.int64)
    group_of_row[basis] = np.arange(len(basis))
    groups = group_of_row[all_rows[order]]
    weights = all_weight[order]
    effective = split_by_weight_arrays(rows.effective_micros[basis], groups, weights)
    billed = split_by_weight_arrays(rows.billed_micros[basis], groups, weights)

    is_request = order < len(req_rows)
    position = order[is_request]
    entries.add(
        row_index=req_rows[position],
        usage_index=req_usage[position],
        kind=EntryKind.request,
        method=AllocationMethod.gpu_seconds,
        team=np.asarray(usage.team, object)[req_usage[position]],
        gpu_ns=req_weight[position],
        effective=effective[is_request],
        billed=billed[is_request],
    )
    idle_pos = order[~is_request] - len(req_rows)
    entries.add(
        row_index=idle_rows[idle_pos],
        usage_index=np.full(len(idle_pos), -1, np.int64),
        kind=EntryKind.idle,
        method=AllocationMethod.gpu_seconds,
        team=np.full(len(idle_pos), None, object),
        gpu_ns=idle_weight[idle_rows[idle_pos]],
        effective=effective[~is_request],
        billed=billed[~is_request],
    )


def _allocate_shared_by_team(
    entries: Entries,
    r: int,
    rows: BillingRows,
    usage: Usage,
    index: "_UsageIndex",
    policy: DeploymentPolicy,
) -> None:
    """Shared rows under the ``even`` or ``team`` policy: one entry per team."""
    teams: list[str | None]
    if policy.shared_policy is SharedPolicy.team and policy.shared_team:
        teams = [policy.shared_team]
    else:
        found, _ = index.overlapping(policy.name, None, rows.start_ns[r], rows.end_ns[r])
        teams = sorted({t for t in np.asarray(usage.team, object)[found] if t is not None})
    n = max(len(teams), 1)
    weights = np.ones(n, np.int64)
    groups = np.zeros(n, np.int64)
    effective = split_by_weight_arrays(rows.effective_micros[[r]], groups, weights)
    billed = split_by_weight_arrays(rows.billed_micros[[r]], groups, weights)
    entries.add(
        row_index=np.full(n, r, np.int64),
        usage_index=np.full(n, -1, np.int64),
        kind=EntryKind.shared if teams else EntryKind.idle,
        method=AllocationMethod.of_policy(policy.shared_policy),
        team=np.array(teams or [None], object),
        gpu_ns=np.zeros(n, np.int64),
        effective=effective,
        billed=billed,
    )


class _UsageIndex:
    """Requests per (deployment, replica), sorted by arrival, for fast window lookups."""

    def __init__(self, usage: Usage) -> None:
        self.usage = usage
        self.blocks: dict[tuple[str, str | None], tuple[I64, I64, I64, int]] = {}
        deployments = np.asarray(usage.deployment, object)
        replicas = np.asarray(usage.replica, object)
        for name in set(usage.deployment):
            mask = deployments == name
            self._add((name, None), np.flatnonzero(mask))
            for replica in set(replicas[mask]):
                self._add((name, replica), np.flatnonzero(mask & (replicas == replica)))

    def _add(self, key: tuple[str, str | None], members: I64) -> None:
        order = members[np.argsort(self.usage.arrived_ns[members], kind="stable")]
        arrived = self.usage.arrived_ns[order]
        longest = int((self.usage.finished_ns[order] - arrived).max(initial=0))
        self.blocks[key] = (order, arrived, self.usage.finished_ns[order], longest)

    def overlapping(
        self, deployment: str, replica: str | None, start: int, end: int
    ) -> tuple[I64, I64]:
        """Requests overlapping ``[start, end)`` and their GPU-ns inside it (pro rata of
        their wall time, so a request spanning two charge hours is split between them)."""
        block = self.blocks.get((deployment, replica))
        if block is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        order, arrived, finished, longest = block
        lo = np.searchsorted(arrived, start - longest, side="left")
        hi = np.searchsorted(arrived, end, side="left")
        candidates = np.arange(lo, hi)
        a, f = arrived[candidates], finished[candidates]
        inside = (f > start) | ((f == a) & (a >= start))
        candidates, a, f = candidates[inside], a[inside], f[inside]
        members = order[candidates]
        gpu = self.usage.gpu_ns[members]
        duration = f - a
        overlap = np.minimum(f, end) - np.maximum(a, start)
        whole = (duration <= 0) | ((a >= start) & (f <= end))
        weight = np.where(whole, gpu, np.floor(gpu * (overlap / np.maximum(duration, 1))))
        return members, weight.astype(np.int64)
