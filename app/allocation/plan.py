"""The allocation of a window as one relational plan (Ibis), run by DuckDB or Spark.

Inputs are five tables (see :data:`INPUT_SCHEMAS`): the window's billing rows, the
deployments and replicas registry, the usage that may overlap the rows, and the Slurm jobs
that ran a metered server (``job_links``). The output is one
table of ledger entries (:data:`ENTRY_COLUMNS`) and one of pool members. The rules are those
of DESIGN.md "Allocation":

* a billing row joins a deployment by a registered ResourceId (then only that replica's
  requests), else by its deployment tag; a row that joins nothing is ``unallocated``;
* rows of one deployment (and replica), charge period, currency and class are **pooled**
  first: their sums are split once, so the ledger grows with requests, not with requests x
  instances; the pool's member rows are returned beside the entries;
* a compute pool is split by the GPU-nanoseconds of its requests inside its charge period
  (a request spanning two periods pro rata of its wall time) plus an ``idle`` share for the
  unused capacity, unless idle is shared back; a shared pool (networking, storage) by the
  deployment's policy: proportional to GPU-seconds, evenly across the teams active in the
  period, or to one named team;
* a pool whose charge period is longer than an hour (a monthly fee, a commitment) is split
  in two exact levels: first across (charge hour x team) buckets by their summed weights,
  then each bucket across its requests, so no partition holds a month of requests;
* a Slurm job that ran a metered server (its usage record linked to the server's replica) is
  split again: its share of each pool goes to the replica's requests inside the pool's charge
  period by their GPU-ns (pro rata, as above), and what they did not use of the job's GPU-ns
  stays the job's own (``gpu_seconds:slurm-unmetered``), so the job's share is kept exactly;
* every split is largest remainder on the magnitude in integer micros with 128-bit
  intermediates (DECIMAL(38,0)), ties to the earlier member, so the entries of each pool sum
  exactly to it in EffectiveCost, BilledCost, ListCost and ContractedCost; and the same
  split is made of the exact amounts in picos (micros and residual, see
  ``app.domain.money``), in the same ranking, so the entries' exact amounts sum to the
  bill's exactly as well, each within a pico of its exact share.

Exact division: engines divide decimals through floating point, so ``a // b`` is computed as
``round((a - a % b) / b)``, exact while the quotient is below 2**50 (the loader refuses a
billing row of 2**50 micros or more: over a billion in any currency).
"""

from collections.abc import Mapping
from typing import Any, Protocol

import ibis
import ibis.expr.datatypes as dt
import ibis.expr.types as ir

from app.domain.ledger import AllocationMethod, EntryKind, SharedPolicy
from app.domain.money import PICOS_PER_MICRO, residual_column

HOUR_US = 3_600_000_000
DEC = dt.Decimal(38, 0)
MAX_EXACT_MICROS = 2**50
"""A billing row's cost must be below this (in magnitude) for the exact-division trick."""

INPUT_SCHEMAS: dict[str, dict[str, str]] = {
    "rows": {
        "row_id": "int64",
        "start_us": "int64",
        "end_us": "int64",
        "effective": "int64",
        "billed": "int64",
        "list_cost": "int64",
        "contracted": "int64",
        "effective_residual_picos": "int64",
        "billed_residual_picos": "int64",
        "list_cost_residual_picos": "int64",
        "contracted_residual_picos": "int64",
        "currency": "string",
        "tag_value": "string",
        "resource_id": "string",
        "category_compute": "boolean",
        "corrects_month": "string",
    },
    "deployments": {
        "deployment": "string",
        "tag_value": "string",
        "gpus_total": "int64",
        "shared_policy": "string",
        "shared_team": "string",
    },
    "replicas": {
        "deployment": "string",
        "replica": "string",
        "gpus": "int64",
        "resource_id": "string",
    },
    "usage": {
        "usage_ord": "int64",
        "event_id": "string",
        "session_id": "string",
        "team": "string",
        "deployment": "string",
        "replica": "string",
        "arrived_us": "int64",
        "finished_us": "int64",
        "gpu_ns": "int64",
    },
    "job_links": {
        "event_id": "string",
        "deployment": "string",
        "replica": "string",
    },
}

ENTRY_COLUMNS = (
    "kind",
    "method",
    "pool_id",
    "billing_row_id",
    "start_us",
    "end_us",
    "deployment",
    "replica",
    "event_id",
    "session_id",
    "team",
    "gpu_ns",
    "effective_cost_micros",
    "billed_cost_micros",
    "list_cost_micros",
    "contracted_cost_micros",
    "effective_cost_residual_picos",
    "billed_cost_residual_picos",
    "list_cost_residual_picos",
    "contracted_cost_residual_picos",
    "currency",
    "corrects_month",
)
"""Columns of the entries the plan returns (one per share), in this order."""
ENTRY_TEXT_COLUMNS = frozenset(
    {
        "kind",
        "method",
        "deployment",
        "replica",
        "event_id",
        "session_id",
        "team",
        "currency",
        "corrects_month",
    }
)
"""The entry columns that hold text; the others are int64."""

BASES = (
    ("effective", "effective_cost_micros"),
    ("billed", "billed_cost_micros"),
    ("list_cost", "list_cost_micros"),
    ("contracted", "contracted_cost_micros"),
)
"""(pool column, entry column) of each cost basis split; each has its residual in picos
beside it (``app.domain.money.residual_column``)."""

POOL_MEMBER_COLUMNS = ("pool_id", "billing_row_id")
_REQUEST_COLUMNS = (
    "usage_ord",
    "event_id",
    "session_id",
    "team",
    "replica",
    "arrived_us",
)
"""What a (pool, request) pair carries besides its pool's key, its weight and hour."""
NO_TEAM_KEY = "\x00"
"""Stands for a missing team in a join key (NULL never equals NULL)."""


class Stage(Protocol):
    """What an engine does with a table that several parts of the plan read (see
    :func:`allocate_plan`)."""

    def __call__(self, table: ir.Table, *, derived: bool = False) -> ir.Table:
        """``table`` to read from (computed once and kept, or as it is).

        ``derived``: the table is row-wise work and joins to small tables over a table that
        was staged itself, so an engine that scans cheaply may recompute it for each reader
        rather than keep a copy of it (DuckDB: a view, not a temporary table)."""
        ...


def inline(table: ir.Table, *, derived: bool = False) -> ir.Table:
    """The :class:`Stage` that keeps nothing: each reader gets the expression itself."""
    return table


def exact_divmod(numerator: ir.Value, denominator: ir.Value) -> tuple[ir.Value, ir.Value]:
    """``divmod`` of non-negative DECIMAL(38,0) values: (int64 quotient, decimal remainder).

    Exact while the quotient is below 2**50 (see the module docstring)."""
    remainder = numerator % denominator
    quotient = ((numerator - remainder) / denominator).round().cast("int64")
    return quotient, remainder


def largest_remainder(
    members: ir.Table,
    *,
    group: list[str],
    order: list[str],
    weight: str,
    bases: list[tuple[str, str]],
    stage: Stage = inline,
) -> ir.Table:
    """Split each group's amounts across its members by weight, exactly.

    Args:
        members: One row per member; the group's amount in each basis column is repeated on
            each of its members.
        group: Columns naming the group (never NULL).
        order: Columns breaking ties between equal remainders (ascending: earlier first);
            unique per group.
        weight: Non-negative integer weight column; a group's weights must not all be zero.
        bases: (amount column, output column) pairs, each split independently; each amount's
            residual column is split with it into the output's residual column.
        stage: Applied to the tables the split reads more than once (see
            :func:`allocate_plan`).

    Returns:
        ``members`` with two output columns per basis: int64 micros, and the int64 residual
        in picos of the exact share.

    A group whose bases all hold the same amount (on-demand usage: list, contracted, billed
    and effective cost alike) is ranked once and its shares copied: the ranking is the costly
    step (a sort per group), and equal amounts rank alike.
    """
    members = stage(members, derived=True)
    amounts = [amount for amount, _ in bases]
    first = amounts[0]
    uniform = ibis.and_(
        *(members[a] == members[first] for a in amounts[1:]),
        *(members[residual_column(a)] == members[residual_column(first)] for a in amounts[1:]),
    )
    alike = _split(members.filter(uniform), group, order, weight, bases[:1], stage)
    first_out = bases[0][1]
    alike = alike.mutate(
        **{out: alike[first_out] for _, out in bases[1:]},
        **{residual_column(out): alike[residual_column(first_out)] for _, out in bases[1:]},
    )
    if len(bases) == 1:
        return alike
    mixed = _split(members.filter(~uniform), group, order, weight, bases, stage)
    return alike.union(mixed.select(*alike.columns))


def _split(
    members: ir.Table,
    group: list[str],
    order: list[str],
    weight: str,
    bases: list[tuple[str, str]],
    stage: Stage,
) -> ir.Table:
    """:func:`largest_remainder` ranking every basis. Group sums are aggregates joined back,
    not windows: a window re-partitions every column of the members, an aggregate only the
    keys.

    Each basis is split twice with one ranking (the costly step): its exact amount in picos,
    ``E = M * 10**6 + R`` (micros and residual), by largest remainder, so each share is within
    a pico of its exact share; and its micros, each the floor of its share of ``M`` plus one
    for the first members of the same ranking, so the micros sum to ``M`` and each is within
    a micro of its share. The residual stored is the exact share less the micros."""
    totals = members.group_by(group).aggregate(_wsum=members[weight].cast(DEC).sum())
    t = stage(members.join(totals, group), derived=True)
    # Each step is its own projection whose columns the next one reads: an expression used
    # twice in one projection is written out twice, which grows the SQL and the engines'
    # planning time.
    step: dict[str, ir.Value] = {}
    for amount, out in bases:
        residual, w = t[residual_column(amount)], t[weight].cast(DEC)
        base, remainder = exact_divmod(t[amount].abs().cast(DEC) * w, t._wsum)
        pico_base, pico_remainder = exact_divmod(residual.abs().cast(DEC) * w, t._wsum)
        exact = t[amount].cast(DEC) * PICOS_PER_MICRO + residual.cast(DEC)
        step |= {
            f"_base_{out}": base,
            f"_rem_{out}": remainder,
            f"_rbase_{out}": pico_base,
            f"_rrem_{out}": pico_remainder,
            f"_xabs_{out}": exact.abs(),
            f"_xsign_{out}": ibis.ifelse(exact < 0, -1, 1).cast(DEC),
        }
    t = t.mutate(**step)
    # |M| * w = base * W + rem, so M's share in picos is sign(M) * (base * 10**6 + a + a_rem / W)
    # with divmod(rem * 10**6, W) = (a, a_rem): a stays below 10**6, so the quotient is exact.
    # Signs are taken relative to the exact amount's: the split is of its magnitude, and a
    # credit splits as the mirror image of a charge (as ``split_by_weight``).
    step = {}
    for amount, out in bases:
        a, a_rem = exact_divmod(t[f"_rem_{out}"] * PICOS_PER_MICRO, t._wsum)
        m_sign = ibis.ifelse(t[amount] < 0, -1, 1).cast(DEC) * t[f"_xsign_{out}"]
        r_sign = ibis.ifelse(t[residual_column(amount)] < 0, -1, 1).cast(DEC) * t[f"_xsign_{out}"]
        step |= {
            f"_whole_{out}": m_sign * (t[f"_base_{out}"].cast(DEC) * PICOS_PER_MICRO + a.cast(DEC))
            + r_sign * t[f"_rbase_{out}"].cast(DEC),
            # Both fractions' numerators over W: their sum lies in (-2W, 2W).
            f"_frac_{out}": m_sign * a_rem + r_sign * t[f"_rrem_{out}"],
        }
    t = t.mutate(**step)
    step = {}
    for _, out in bases:
        frac, wsum = t[f"_frac_{out}"], t._wsum
        carry = ibis.cases((frac >= wsum, 1), (frac >= 0, 0), (frac >= -wsum, -1), else_=-2)
        step |= {f"_carry_{out}": carry.cast(DEC)}
    t = t.mutate(**step)
    step = {}
    for _, out in bases:
        carry = t[f"_carry_{out}"]
        step |= {
            f"_pfloor_{out}": t[f"_whole_{out}"] + carry,
            f"_prem_{out}": t[f"_frac_{out}"] - carry * t._wsum,
        }
    t = t.mutate(**step)
    # Kept (a temporary table in DuckDB's staged run): read by the aggregate and the join
    # below, its arithmetic inlined twice made DuckDB's plan of the split three times slower.
    t = stage(t)
    spread = t.group_by(group).aggregate(
        **{f"_spread_{out}": t[f"_base_{out}"].sum() for _, out in bases},
        **{f"_pspread_{out}": t[f"_pfloor_{out}"].sum() for _, out in bases},
    )
    t = t.join(spread, group)
    t = t.mutate(
        **{
            f"_rank_{out}": ibis.row_number().over(
                group_by=group, order_by=[ibis.desc(t[f"_prem_{out}"]), *(t[c] for c in order)]
            )
            for _, out in bases
        }
    )
    step = {}
    for amount, out in bases:
        rank = t[f"_rank_{out}"]
        share = t[f"_base_{out}"] + (rank < t[amount].abs() - t[f"_spread_{out}"]).cast("int64")
        step |= {
            f"_micros_{out}": ibis.ifelse(t[amount] < 0, -share, share),
            f"_pshare_{out}": t[f"_xsign_{out}"]
            * (
                t[f"_pfloor_{out}"]
                + (rank.cast(DEC) < t[f"_xabs_{out}"] - t[f"_pspread_{out}"]).cast(DEC)
            ),
        }
    t = t.mutate(**step)
    step = {}
    for _, out in bases:
        micros = t[f"_micros_{out}"]
        step |= {
            out: micros,
            residual_column(out): (t[f"_pshare_{out}"] - micros.cast(DEC) * PICOS_PER_MICRO).cast(
                "int64"
            ),
        }
    t = t.mutate(**step)
    scratch: tuple[str, ...] = ("_base_", "_rem_", "_rbase_", "_rrem_", "_xabs_", "_xsign_")
    scratch += ("_whole_", "_frac_")
    scratch += ("_carry_", "_pfloor_", "_prem_", "_spread_", "_pspread_", "_rank_", "_micros_")
    scratch += ("_pshare_",)
    return t.drop("_wsum", *(c for c in t.columns if c.startswith(scratch)))


def _with_hours(table: ir.Table, start: str, end: str, name: str) -> ir.Table:
    """One row per hour that ``[start, end)`` overlaps (its start's hour for an empty one),
    the hour's start in column ``name``."""
    last = ibis.greatest(table[end] - 1, table[start])
    # Bounds as columns first: Ibis 12 drops the parentheses of an expression given as
    # range()'s start when it compiles to Spark. The stop is an hour start itself: Spark's
    # SEQUENCE includes its stop and Ibis trims it only when it is hit exactly.
    table = table.mutate(
        _first=table[start] - table[start] % HOUR_US, _stop=last - last % HOUR_US + HOUR_US
    )
    return table.mutate(**{name: ibis.range(table._first, table._stop, HOUR_US).unnest()}).drop(
        "_first", "_stop"
    )


def matched_rows(rows: ir.Table, deployments: ir.Table, replicas: ir.Table) -> ir.Table:
    """Each row with its deployment (None: unallocated), replica, policy and capacity."""
    by_resource = replicas.filter(replicas.resource_id.notnull()).select(
        "resource_id", r_deployment="deployment", r_replica="replica"
    )
    by_tag = deployments.select("tag_value", t_deployment="deployment")
    # .view() after each join: Ibis cannot join on a column a join chain computed.
    m = rows.left_join(by_resource, "resource_id").select(
        *rows.columns, "r_deployment", "r_replica"
    )
    m = m.view()
    m = m.left_join(by_tag, "tag_value").select(
        *rows.columns,
        deployment=ibis.coalesce(m.r_deployment, by_tag.t_deployment),
        replica=m.r_replica,
    )
    m = m.view()
    policy = deployments.view().select("deployment", "gpus_total", "shared_policy", "shared_team")
    m = m.left_join(policy, "deployment").select(
        *m.columns, "gpus_total", "shared_policy", "shared_team"
    )
    m = m.view()
    replica_gpus = replicas.view().select("deployment", "replica", replica_gpus="gpus")
    m = m.left_join(replica_gpus, ["deployment", "replica"]).select(*m.columns, "replica_gpus")
    m = m.view()
    m = m.select(
        *rows.columns,
        "deployment",
        "replica",
        "shared_policy",
        "shared_team",
        is_compute=m.category_compute | m.replica.notnull(),
        gpus=ibis.coalesce(m.replica_gpus, m.gpus_total, 0),
    )
    return m


def pools(matched: ir.Table) -> tuple[ir.Table, ir.Table]:
    """Allocated rows summed per pool, and the pools' member rows.

    A pool is the rows of one deployment (and replica), charge period, currency, correction
    month and class (compute, shared by GPU-seconds, shared by team); its id is its first row.
    """
    m = matched.filter(matched.deployment.notnull())
    by_team = ~m.is_compute & (m.shared_policy != SharedPolicy.proportional.value)
    m = m.mutate(by_team=by_team)
    key = [
        "deployment",
        "replica",
        "start_us",
        "end_us",
        "currency",
        "corrects_month",
        "is_compute",
        "by_team",
        "gpus",
        "shared_policy",
        "shared_team",
    ]
    # Windows, not a group-by and a join back: a window partition keeps NULL keys together.
    m = m.mutate(
        pool_id=m.row_id.min().over(group_by=key), rows_in_pool=m.count().over(group_by=key)
    )
    members = m.filter(m.rows_in_pool > 1).select("pool_id", billing_row_id=m.row_id)
    pooled = m.group_by([*key, "pool_id", "rows_in_pool"]).aggregate(
        **{amount: m[amount].sum() for amount, _ in BASES},
        **{residual_column(a): m[residual_column(a)].sum() for a, _ in BASES},
    )
    return pooled, members


def _pairs(pooled: ir.Table, usage: ir.Table, keys: tuple[str, ...] = ("pool_id",)) -> ir.Table:
    """(pool, request) pairs with the request's GPU-ns inside the pool's charge period.

    ``keys`` name a pool (and are carried to its pairs). Both sides are cut into the hours
    they overlap and joined on (deployment, hour), so the join is an equi-join; each pair is
    kept at its first common hour."""
    pool_hours = _with_hours(
        pooled.select(
            *keys,
            p_deployment="deployment",
            p_replica="replica",
            p_start="start_us",
            p_end="end_us",
        ),
        "p_start",
        "p_end",
        "hour",
    )
    usage_hours = _with_hours(usage, "arrived_us", "finished_us", "u_hour")
    j = pool_hours.join(
        usage_hours,
        [
            pool_hours.p_deployment == usage_hours.deployment,
            pool_hours.hour == usage_hours.u_hour,
            pool_hours.p_replica.isnull() | (pool_hours.p_replica == usage_hours.replica),
        ],
    )
    a, f, start, end = j.arrived_us, j.finished_us, j.p_start, j.p_end
    first_common = ibis.greatest(a - a % HOUR_US, start - start % HOUR_US)
    j = j.filter(
        a < end,
        (f > start) | ((f == a) & (a >= start)),
        j.hour == first_common,
    )
    duration = f - a
    whole = (duration <= 0) | ((a >= start) & (f <= end))
    overlap = ibis.least(f, end) - ibis.greatest(a, start)
    pro_rata, _ = exact_divmod(
        j.gpu_ns.cast(DEC) * ibis.greatest(overlap, 0).cast(DEC),
        ibis.greatest(duration, 1).cast(DEC),
    )
    return j.select(
        *keys,
        *_REQUEST_COLUMNS,
        weight=ibis.ifelse(whole, j.gpu_ns, pro_rata),
        hour=first_common,
    )


def allocate_tables(
    tables: Mapping[str, ir.Table],
    *,
    share_idle: bool,
    split_jobs: bool,
    stage: Stage = inline,
) -> tuple[ir.Table, ir.Table]:
    """:func:`allocate_plan` over the inputs by name (plan.INPUT_SCHEMAS)."""
    return allocate_plan(
        tables["rows"],
        tables["deployments"],
        tables["replicas"],
        tables["usage"],
        tables["job_links"],
        share_idle=share_idle,
        split_jobs=split_jobs,
        stage=stage,
    )


def allocate_plan(
    rows: ir.Table,
    deployments: ir.Table,
    replicas: ir.Table,
    usage: ir.Table,
    job_links: ir.Table,
    *,
    share_idle: bool,
    split_jobs: bool,
    stage: Stage = inline,
) -> tuple[ir.Table, ir.Table]:
    """The entries of a window and its pools' member rows, as unexecuted expressions.

    ``split_jobs``: whether ``job_links`` may hold rows. The split of linked Slurm jobs reads
    the entries twice, so a window without any leaves it out of the plan.

    ``stage`` is applied to the intermediate tables that several parts of the plan read (the
    matched rows, the pools, the pairs, and the split's members marked ``derived``); an
    engine that would recompute them per reader (Spark inlines common subexpressions) caches
    them there."""
    matched = stage(matched_rows(rows, deployments, replicas))
    pooled, members = pools(matched)
    pooled = stage(pooled)
    pairs = stage(_pairs(pooled, usage))
    entries = [
        _unallocated(matched),
        _by_weight(pooled.filter(~pooled.by_team), pairs, share_idle=share_idle, stage=stage),
        _by_team(pooled.filter(pooled.by_team), pairs, stage=stage),
    ]
    out = entries[0]
    for more in entries[1:]:
        out = out.union(more)
    if split_jobs:
        out = _split_slurm_jobs(stage(out), job_links, usage, stage=stage)
    return out, members


def _entry(
    source: ir.Table,
    *,
    kind: EntryKind | ir.Value,
    method: AllocationMethod | ir.Value,
    billing_row_id: ir.Value,
    replica: ir.Value,
    team: ir.Value,
    gpu_ns: ir.Value,
    event_id: ir.Value | None = None,
    session_id: ir.Value | None = None,
) -> ir.Table:
    """The entry columns, in :data:`ENTRY_COLUMNS` order, from a split table."""
    text = ibis.null().cast("string")

    def as_value(value: Any) -> ir.Value:
        return ibis.literal(str(value), "string") if isinstance(value, str) else value

    return source.select(
        kind=as_value(kind),
        method=as_value(method),
        pool_id=source.pool_id.cast("int64"),
        billing_row_id=billing_row_id.cast("int64"),
        start_us=source.start_us,
        end_us=source.end_us,
        deployment=source.deployment.cast("string"),
        replica=replica.cast("string"),
        event_id=(text if event_id is None else event_id).cast("string"),
        session_id=(text if session_id is None else session_id).cast("string"),
        team=team.cast("string"),
        gpu_ns=gpu_ns.cast("int64"),
        **{out: source[out].cast("int64") for _, out in BASES},
        **{residual_column(out): source[residual_column(out)].cast("int64") for _, out in BASES},
        currency=source.currency,
        corrects_month=source.corrects_month.cast("string"),
    )


def _unallocated(matched: ir.Table) -> ir.Table:
    rows = matched.filter(matched.deployment.isnull())
    rows = rows.mutate(
        pool_id=rows.row_id,
        **{out: rows[amount] for amount, out in BASES},
        **{residual_column(out): rows[residual_column(amount)] for amount, out in BASES},
    )
    none = ibis.null().cast("string")
    return _entry(
        rows,
        kind=EntryKind.unallocated,
        method=AllocationMethod.none,
        billing_row_id=rows.row_id,
        replica=none,
        team=none,
        gpu_ns=ibis.literal(0, "int64"),
    )


def _single_row(pool: ir.Table) -> ir.Value:
    """The billing row of a one-row pool (its id); None for a pool of several rows (they are
    listed in the pool members)."""
    return ibis.ifelse(pool.rows_in_pool == 1, pool.pool_id, ibis.null().cast("int64"))


def _by_weight(
    pooled: ir.Table,
    pairs: ir.Table,
    *,
    share_idle: bool,
    stage: Stage,
) -> ir.Table:
    """Pools split by GPU-ns across their requests plus idle: compute and proportional."""
    requests = pairs.filter(pairs.weight > 0).semi_join(pooled, "pool_id")
    used = requests.group_by("pool_id").aggregate(used=requests.weight.sum())
    p = pooled.left_join(used, "pool_id").drop("pool_id_right")
    used_ns = ibis.coalesce(p.used, 0)
    capacity = p.gpus * (p.end_us - p.start_us) * 1000
    idle = ibis.greatest(capacity - used_ns, 0) if not share_idle else ibis.literal(0, "int64")
    idle = ibis.ifelse(p.is_compute, idle, 0)
    p = p.mutate(idle_weight=ibis.ifelse(used_ns == 0, ibis.greatest(idle, 1), idle))
    two_level = (p.end_us - p.start_us) > HOUR_US

    members = requests.select(
        "pool_id",
        *_REQUEST_COLUMNS,
        "weight",
        "hour",
        is_idle=ibis.literal(False),
    )
    idle_members = p.filter(p.idle_weight > 0).select(
        "pool_id",
        usage_ord=ibis.literal(0, "int64"),
        event_id=ibis.null().cast("string"),
        session_id=ibis.null().cast("string"),
        team=ibis.null().cast("string"),
        replica=p.replica,
        arrived_us=ibis.literal(0, "int64"),
        weight=p.idle_weight,
        hour=p.start_us - p.start_us % HOUR_US,
        is_idle=ibis.literal(True),
    )
    everyone = members.union(idle_members)
    # The split reads the amounts only; the pool's other columns join its result, so the
    # rows that the split sorts stay narrow.
    amounts = p.select(
        "pool_id",
        *[amount for amount, _ in BASES],
        *[residual_column(amount) for amount, _ in BASES],
        two_level=two_level,
    )
    described = p.select(
        "pool_id",
        "start_us",
        "end_us",
        "deployment",
        "currency",
        "corrects_month",
        "is_compute",
        "rows_in_pool",
    )
    split = _two_level_split(everyone.join(amounts, "pool_id"), stage).join(described, "pool_id")
    kind = ibis.ifelse(
        split.is_idle,
        EntryKind.idle.value,
        ibis.ifelse(split.is_compute, EntryKind.request.value, EntryKind.shared.value),
    )
    method = ibis.ifelse(
        split.is_compute,
        ibis.ifelse(
            split.two_level,
            AllocationMethod.gpu_seconds_two_level.value,
            AllocationMethod.gpu_seconds.value,
        ),
        ibis.ifelse(
            split.two_level,
            AllocationMethod.proportional_two_level.value,
            AllocationMethod.proportional.value,
        ),
    )
    return _entry(
        split,
        kind=kind,
        method=method,
        billing_row_id=_single_row(split),
        replica=split.replica,
        team=split.team,
        gpu_ns=split.weight,
        event_id=split.event_id,
        session_id=split.session_id,
    )


def _two_level_split(members: ir.Table, stage: Stage) -> ir.Table:
    """Largest remainder per pool; for a pool longer than an hour, per (hour, team) bucket
    first and then within each bucket (idle is a bucket of its own)."""
    members = stage(members, derived=True)
    order = ["is_idle", "arrived_us", "usage_ord"]
    flat = largest_remainder(
        members.filter(~members.two_level),
        group=["pool_id"],
        order=order,
        weight="weight",
        bases=[(amount, out) for amount, out in BASES],
        stage=stage,
    )
    deep = members.filter(members.two_level)
    bucket_key = ["pool_id", "hour", "is_idle", "team"]
    pool_amounts = [
        *[amount for amount, _ in BASES],
        *[residual_column(amount) for amount, _ in BASES],
    ]
    buckets = deep.group_by([*bucket_key, *pool_amounts]).aggregate(bucket_weight=deep.weight.sum())
    buckets = largest_remainder(
        buckets,
        group=["pool_id"],
        order=["hour", "is_idle", "team"],
        weight="bucket_weight",
        bases=[(amount, f"bucket_{amount}") for amount, _ in BASES],
        stage=stage,
    ).select(
        *bucket_key,
        *[f"bucket_{amount}" for amount, _ in BASES],
        *[residual_column(f"bucket_{amount}") for amount, _ in BASES],
    )
    # Null-safe join on team: a bucket of requests that name no team.
    deep = deep.mutate(team_key=ibis.coalesce(deep.team, NO_TEAM_KEY))
    buckets = buckets.mutate(team_key=ibis.coalesce(buckets.team, NO_TEAM_KEY)).drop("team")
    inner = deep.join(buckets, ["pool_id", "hour", "is_idle", "team_key"])
    inner = largest_remainder(
        inner,
        group=["pool_id", "hour", "is_idle", "team_key"],
        order=["arrived_us", "usage_ord"],
        weight="weight",
        bases=[(f"bucket_{amount}", out) for amount, out in BASES],
        stage=stage,
    )
    columns = flat.columns
    return flat.union(inner.select(*columns))


def _by_team(pooled: ir.Table, pairs: ir.Table, *, stage: Stage) -> ir.Table:
    """Shared pools of even- or team-policy deployments: one entry per team (or one idle)."""
    active = pairs.filter(pairs.team.notnull()).select("pool_id", "team").distinct()
    named = pooled.filter(
        (pooled.shared_policy == SharedPolicy.team.value) & pooled.shared_team.notnull()
    ).select("pool_id", team="shared_team")
    even = pooled.filter(
        ~((pooled.shared_policy == SharedPolicy.team.value) & pooled.shared_team.notnull())
    ).select("pool_id")
    teams = named.union(even.join(active, "pool_id").select("pool_id", "team"))
    with_team = pooled.left_join(teams, "pool_id").drop("pool_id_right")
    with_team = with_team.mutate(weight=ibis.literal(1, "int64"))
    split = largest_remainder(
        with_team,
        group=["pool_id"],
        order=["team"],
        weight="weight",
        bases=[(amount, out) for amount, out in BASES],
        stage=stage,
    )
    return _entry(
        split,
        kind=ibis.ifelse(split.team.isnull(), EntryKind.idle.value, EntryKind.shared.value),
        method=split.shared_policy,
        billing_row_id=_single_row(split),
        replica=ibis.null().cast("string"),
        team=split.team,
        gpu_ns=ibis.literal(0, "int64"),
    )


def _split_slurm_jobs(
    entries: ir.Table,
    job_links: ir.Table,
    usage: ir.Table,
    *,
    stage: Stage,
) -> ir.Table:
    """Each linked Slurm job's entries split again across its server's requests (see the
    module docstring); the other entries unchanged."""
    links = job_links.select(
        job_event_id="event_id", link_deployment="deployment", link_replica="replica"
    )
    is_job = entries.kind == EntryKind.request.value
    jobs = entries.filter(is_job).join(links, entries.event_id == links.job_event_id)
    jobs = stage(jobs.select(*entries.columns, "job_event_id", "link_deployment", "link_replica"))
    others = entries.anti_join(
        jobs.select(pool_id="pool_id", event_id="job_event_id"), ["pool_id", "event_id"]
    )
    keys = ("pool_id", "job_event_id")
    served = jobs.select(
        *keys,
        deployment="link_deployment",
        replica="link_replica",
        start_us="start_us",
        end_us="end_us",
    )
    requests = _pairs(served, usage, keys)
    requests = stage(requests.filter(requests.weight > 0))
    used = requests.group_by(list(keys)).aggregate(used=requests.weight.sum())
    j = jobs.left_join(used, list(keys)).drop("pool_id_right", "job_event_id_right")
    used_ns = ibis.coalesce(j.used, 0)
    unused = ibis.greatest(j.gpu_ns - used_ns, 0)
    j = j.mutate(rest_weight=ibis.ifelse(used_ns == 0, ibis.greatest(unused, 1), unused))
    amounts = [out for _, out in BASES]
    members = requests.select(
        *keys,
        "usage_ord",
        "event_id",
        "session_id",
        "team",
        "arrived_us",
        "weight",
        is_rest=ibis.literal(False),
    ).union(
        j.filter(j.rest_weight > 0).select(
            *keys,
            usage_ord=ibis.literal(0, "int64"),
            event_id="job_event_id",
            session_id="session_id",
            team="team",
            arrived_us=ibis.literal(0, "int64"),
            weight="rest_weight",
            is_rest=ibis.literal(True),
        )
    )
    job_amounts = j.select(
        *keys,
        *[j[out].name(f"job_{out}") for out in amounts],
        *[j[residual_column(out)].name(residual_column(f"job_{out}")) for out in amounts],
        job_team="team",
    )
    split = largest_remainder(
        members.join(job_amounts, list(keys)),
        group=list(keys),
        order=["is_rest", "arrived_us", "usage_ord"],
        weight="weight",
        bases=[(f"job_{out}", out) for out in amounts],
        stage=stage,
    )
    described = jobs.select(
        *keys,
        "billing_row_id",
        "start_us",
        "end_us",
        "deployment",
        "replica",
        "currency",
        "corrects_month",
    )
    s = split.join(described, list(keys))
    method = ibis.ifelse(
        s.is_rest,
        AllocationMethod.gpu_seconds_slurm_unmetered.value,
        AllocationMethod.gpu_seconds_slurm_job.value,
    )
    again = s.select(
        kind=ibis.literal(EntryKind.request.value, "string"),
        method=method,
        pool_id=s.pool_id.cast("int64"),
        billing_row_id=s.billing_row_id.cast("int64"),
        start_us=s.start_us,
        end_us=s.end_us,
        deployment=s.deployment.cast("string"),
        replica=s.replica.cast("string"),
        event_id=s.event_id.cast("string"),
        session_id=s.session_id.cast("string"),
        # Teams are the job's Slurm account unless the metered request names one.
        team=ibis.coalesce(s.team, s.job_team).cast("string"),
        gpu_ns=s.weight.cast("int64"),
        **{out: s[out].cast("int64") for out in amounts},
        **{residual_column(out): s[residual_column(out)].cast("int64") for out in amounts},
        currency=s.currency,
        corrects_month=s.corrects_month.cast("string"),
    )
    return others.union(again.select(*ENTRY_COLUMNS))
