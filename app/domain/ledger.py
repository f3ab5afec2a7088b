"""The ledger's vocabulary: what an entry is a share of, how it was split, which run of a month
is the ledger of record, what reports group by, and what a line is called when no request
gives it a name.

The ORM columns are typed with these enums (stored as their values in plain VARCHARs) and the
features compare with them; nothing here touches the database.
"""

from enum import StrEnum

__all__ = [
    "COMPUTE_METHODS",
    "TAG_PREFIX",
    "AllocationMethod",
    "CostLabel",
    "Dimension",
    "EntryKind",
    "RunStatus",
    "SharedPolicy",
]


class EntryKind(StrEnum):
    """What a ledger entry is a share of (DESIGN.md, "Allocation" and "Ledger")."""

    request = "request"
    """A request's share of a billing row, by its GPU-seconds."""
    idle = "idle"
    """A row's unused capacity, or a shared row with no team to charge."""
    shared = "shared"
    """A team's share of a shared row (networking, storage) under the even or team policy."""
    unallocated = "unallocated"
    """A whole billing row that matched no deployment."""
    adjustment = "adjustment"
    """A change to a closed month's allocation, booked in an open month."""


class RunStatus(StrEnum):
    """Whether an allocation run is the ledger of record of its month (or ad-hoc window)."""

    current = "current"
    replaced = "replaced"
    """Re-running an open month replaced it; its entries are gone."""


class SharedPolicy(StrEnum):
    """How a deployment's shared rows (networking, storage) are split."""

    proportional = "proportional"
    """By GPU-seconds of the requests in the row's charge period."""
    even = "even"
    """Evenly across the teams active in the row's charge period."""
    team = "team"
    """All to one named team."""


class AllocationMethod(StrEnum):
    """How an entry's share was computed (``LedgerEntry.method``)."""

    gpu_seconds = "gpu_seconds"
    gpu_seconds_two_level = "gpu_seconds:hour,team"
    """By GPU-seconds in two levels: (charge hour, team) buckets, then their requests."""
    gpu_seconds_slurm_job = "gpu_seconds:slurm-job"
    """A request's share of the Slurm job its server ran in: the job's share of its node,
    split again by the proxy's GPU-seconds."""
    gpu_seconds_slurm_unmetered = "gpu_seconds:slurm-unmetered"
    """What a metered Slurm job's requests did not use of the job's share: the job's own."""
    proportional = "proportional"
    proportional_two_level = "proportional:hour,team"
    even = "even"
    team = "team"
    none = "none"
    """Not split: an unallocated row."""
    restatement_request = "restatement:request"
    restatement_idle = "restatement:idle"
    restatement_shared = "restatement:shared"
    restatement_unallocated = "restatement:unallocated"

    @classmethod
    def of_policy(cls, policy: SharedPolicy) -> "AllocationMethod":
        """The method of a shared row split by ``policy``."""
        return cls(policy.value)

    @classmethod
    def restating(cls, kind: EntryKind) -> "AllocationMethod":
        """The method of an adjustment that restates entries of ``kind``.

        Raises:
            ValueError: For ``adjustment`` (an adjustment restates what the month booked).
        """
        return cls(f"restatement:{kind.value}")

    @property
    def splits_compute(self) -> bool:
        """Whether the entry is a share of a compute pool (GPU instance rows), so its
        ``gpu_ns`` is GPU time; a proportional shared row carries the same GPU-ns only as
        its split weight, and counting it too would count that time twice."""
        return self in _COMPUTE_METHODS

    @property
    def restated_kind(self) -> EntryKind | None:
        """The kind an adjustment with this method restates; None for other methods."""
        prefix, _, kind = self.value.partition(":")
        return EntryKind(kind) if prefix == "restatement" else None


_COMPUTE_METHODS = frozenset(
    {
        AllocationMethod.gpu_seconds,
        AllocationMethod.gpu_seconds_two_level,
        AllocationMethod.gpu_seconds_slurm_job,
        AllocationMethod.gpu_seconds_slurm_unmetered,
    }
)
COMPUTE_METHODS: tuple[str, ...] = tuple(sorted(m.value for m in _COMPUTE_METHODS))
"""The methods of compute-pool entries: the only entries whose ``gpu_ns`` is GPU time."""


class Dimension(StrEnum):
    """What allocation and unit-cost reports group by, besides ``tag:KEY``."""

    team = "team"
    session = "session"
    deployment = "deployment"
    model = "model"
    method = "method"
    """The speculation method of the request (ngram, eagle, ..., none)."""
    cost_center = "cost_center"


TAG_PREFIX = "tag:"
"""A dimension ``tag:KEY`` groups by the value of the usage tag ``KEY``."""


class CostLabel(StrEnum):
    """The name a report line gets on a dimension where no request gives it a value."""

    idle = "(idle)"
    unallocated = "(unallocated)"
    shared = "(shared)"
    adjustment = "(adjustment)"
    none = "(none)"
    """A request without a value on the dimension."""
    untagged = "(untagged)"
    """A request without the tag of a ``tag:KEY`` dimension."""
    no_team = "(no team)"
    """Cost of a request that names no team."""
    rounding = "(rounding)"
    """What the lines' amounts, shown to the micro, fall short of the bill's exact total
    rounded once (a chargeback's last line)."""

    @classmethod
    def of(cls, kind: EntryKind) -> "CostLabel":
        """The label of cost that is not a request's: idle, shared, unallocated, adjustment.

        Raises:
            KeyError: For ``request``, which is named by its own values.
        """
        kind = EntryKind(kind)
        if kind is EntryKind.request:
            raise KeyError("a request's cost is named by its own values")
        return cls[kind.name]
